/**
 * The PostgreSQL write path's first half, pure: each {@link IndexOp} checked as
 * `IndexWriter.#applyOne` checks it (appview/ingest/apply_ops.ts, with the same skip reasons and
 * details), then flattened into the columns of the write functions (`appview/db/pg/
 * write_functions.ts`) with the fields the SQLite indexers compute (post URI pieces, reply
 * parent, subject keys, blob CIDs), and with the DIDs whose actor ids the op needs: `ids` where
 * SQLite's indexers call `ActorIds.idOf` (assigning one), `finds` where they call `find`.
 *
 * The indexing time is not part of it: SQLite reads the clock once per op it applies (after the
 * DID check), so the writer reads it in the same places, after the rev gate (`pg_writer.ts`).
 *
 * Text PostgreSQL cannot store: U+0000 (NUL) in a text value. Such characters are stored as
 * U+FFFD (the replacement character) on PostgreSQL, while SQLite stores them as they are.
 *
 * @module
 */

import {
  COLLECTION_BLOCK,
  COLLECTION_FOLLOW,
  COLLECTION_LIKE,
  COLLECTION_POST,
  COLLECTION_PROFILE,
  COLLECTION_REPOST,
  PROFILE_RKEY,
} from "../../../shared/nsid.ts";
import type { IndexOp } from "../../../shared/ops.ts";
import { validateRecord } from "../../../shared/records.ts";
import { isValidDid, isValidHandle, isValidRecordKey } from "../../../shared/syntax.ts";
import { OP_KIND } from "../../db/pg/write_functions.ts";
import { postKeyOf } from "../../db/post_key.ts";
import { DELETED_STATUS } from "../indexers/index_account_status.ts";
import { blobCid } from "../indexers/index_profiles.ts";
import { didOfUri } from "../indexers/notify.ts";
import type { SkipReason } from "../skips.ts";
import { strongRef } from "../types.ts";

/** The collections the index handles (the SQLite writer's indexers). */
export const INDEXED_COLLECTIONS: ReadonlySet<string> = new Set([
  COLLECTION_POST,
  COLLECTION_LIKE,
  COLLECTION_REPOST,
  COLLECTION_FOLLOW,
  COLLECTION_BLOCK,
  COLLECTION_PROFILE,
]);

/** One op as the write functions take it (the columns of `OP_COLUMNS`), without ids and time. */
export interface FlatOp {
  k: number;
  did: string;
  rkey: string | null;
  uri: string | null;
  cid: string | null;
  text: string | null;
  descr: string | null;
  parent: string | null;
  root: string | null;
  embed: string | null;
  langs: string | null;
  created: string | null;
  sdid: string | null;
  srkey: string | null;
  suri: string | null;
  scid: string | null;
  avatar: string | null;
  banner: string | null;
  handle: string | null;
  flag: number | null;
}

/** A skip decided from the op alone. */
export interface Skip {
  readonly reason: SkipReason;
  readonly detail: string;
}

/** What {@link prepareOp} makes of one op. */
export type PreparedOp =
  /** Skipped before the clock is read (an invalid DID). */
  | { readonly type: "early"; readonly skip: Skip }
  /** Skipped after the clock is read. */
  | { readonly type: "skip"; readonly skip: Skip }
  /** Applied without any row change (a delete SQLite's indexer ignores). */
  | { readonly type: "noop" }
  | {
    readonly type: "apply";
    readonly flat: FlatOp;
    /**
     * DIDs that get an actor id if they have none (SQLite: `idOf`). The ids of `did` and `sdid`
     * are looked up for every op; one without an id stays null (SQLite: `find`).
     */
    readonly ids: readonly string[];
  };

const NUL = "\u0000";

/** `s` with every U+0000 replaced (module comment); null stays null. */
export function pgText(s: string | null): string | null {
  return s === null || !s.includes(NUL) ? s : s.replaceAll(NUL, "\uFFFD");
}

function flat(k: number, did: string, fields: Partial<FlatOp> = {}): FlatOp {
  return {
    k,
    did,
    rkey: null,
    uri: null,
    cid: null,
    text: null,
    descr: null,
    parent: null,
    root: null,
    embed: null,
    langs: null,
    created: null,
    sdid: null,
    srkey: null,
    suri: null,
    scid: null,
    avatar: null,
    banner: null,
    handle: null,
    flag: null,
    ...fields,
  };
}

const skip = (reason: SkipReason, detail: string): PreparedOp => ({
  type: "skip",
  skip: { reason, detail },
});

const DELETE_KIND: Readonly<Record<string, number>> = {
  [COLLECTION_POST]: OP_KIND.postDelete,
  [COLLECTION_LIKE]: OP_KIND.likeDelete,
  [COLLECTION_REPOST]: OP_KIND.repostDelete,
  [COLLECTION_FOLLOW]: OP_KIND.followDelete,
  [COLLECTION_BLOCK]: OP_KIND.blockDelete,
};

/** Checks and flattens `op` (module comment). */
export function prepareOp(op: IndexOp): PreparedOp {
  if (!isValidDid(op.did)) {
    return { type: "early", skip: { reason: "invalid_op", detail: `Invalid DID: ${op.did}` } };
  }
  const did = op.did;
  if (op.kind === "handle") {
    if (op.handle === null) {
      return { type: "apply", flat: flat(OP_KIND.handleClear, did), ids: [] };
    }
    if (!isValidHandle(op.handle)) return skip("invalid_op", `Invalid handle: ${op.handle}`);
    return {
      type: "apply",
      flat: flat(OP_KIND.handleSet, did, {
        handle: op.handle.toLowerCase(),
        flag: op.authoritative === true ? 1 : 0,
      }),
      ids: [],
    };
  }
  if (op.kind === "account") {
    return { type: "apply", flat: flat(OP_KIND.account, did), ids: [] };
  }
  if (op.kind === "account_status") {
    if (op.active) {
      return { type: "apply", flat: flat(OP_KIND.statusActive, did), ids: [] };
    }
    if (op.status === DELETED_STATUS) {
      return { type: "apply", flat: flat(OP_KIND.statusDeleted, did), ids: [] };
    }
    return {
      type: "apply",
      flat: flat(OP_KIND.statusInactive, did, { handle: op.status }),
      ids: [did],
    };
  }
  const { collection, rkey } = op;
  if (!INDEXED_COLLECTIONS.has(collection)) {
    return skip("unsupported_collection", `Unsupported collection: ${collection}`);
  }
  if (!isValidRecordKey(rkey)) return skip("invalid_op", `Invalid record key: ${rkey}`);
  const uri = `at://${did}/${collection}/${rkey}`;
  if (op.action === "delete") {
    if (collection === COLLECTION_PROFILE) {
      return rkey === PROFILE_RKEY
        ? { type: "apply", flat: flat(OP_KIND.profileDelete, did), ids: [] }
        : { type: "noop" };
    }
    return {
      type: "apply",
      flat: flat(DELETE_KIND[collection], did, { rkey }),
      ids: [],
    };
  }
  if (typeof op.cid !== "string" || op.cid === "") {
    return skip("invalid_op", `Record has no CID: ${uri}`);
  }
  let value: Readonly<Record<string, unknown>>;
  if (op.checked === true && op.record !== null) value = op.record;
  else {
    const checked = validateRecord(collection, op.record);
    if (!checked.ok) return skip("invalid_record", checked.reason);
    value = checked.value;
  }
  switch (collection) {
    case COLLECTION_POST: {
      // index_posts.ts
      const reply = value.reply as { parent?: unknown; root?: unknown } | undefined;
      const parent = reply === undefined ? null : strongRef(reply.parent)?.uri ?? null;
      const root = reply === undefined ? null : strongRef(reply.root)?.uri ?? null;
      const recipient = parent === null ? null : didOfUri(parent);
      return {
        type: "apply",
        flat: flat(OP_KIND.postPut, did, {
          rkey,
          uri,
          cid: op.cid,
          text: pgText(value.text as string),
          parent: pgText(parent),
          root: pgText(root),
          embed: value.embed === undefined ? null : JSON.stringify(value.embed),
          langs: value.langs === undefined ? "[]" : JSON.stringify(value.langs),
          created: pgText(value.createdAt as string),
          sdid: recipient,
        }),
        ids: recipient === null ? [did] : [did, recipient],
      };
    }
    case COLLECTION_LIKE:
    case COLLECTION_REPOST: {
      // index_interactions.ts
      const subject = strongRef(value.subject);
      const createdAt = value.createdAt;
      if (subject === null || typeof createdAt !== "string") {
        return skip("invalid_record", "Record has no subject");
      }
      const post = postKeyOf(subject.uri);
      if (post === null) {
        return skip("invalid_record", `Subject is not a post URI with a DID: ${subject.uri}`);
      }
      return {
        type: "apply",
        flat: flat(collection === COLLECTION_LIKE ? OP_KIND.likePut : OP_KIND.repostPut, did, {
          rkey,
          uri,
          created: pgText(createdAt),
          sdid: post.did,
          srkey: post.rkey,
          suri: subject.uri,
          scid: pgText(subject.cid),
          flag: op.action === "update" ? 1 : 0,
        }),
        ids: [did, post.did],
      };
    }
    case COLLECTION_FOLLOW:
    case COLLECTION_BLOCK: {
      // index_graph.ts, index_blocks.ts
      const subject = value.subject;
      const createdAt = value.createdAt;
      if (typeof subject !== "string" || typeof createdAt !== "string") {
        return skip("invalid_record", "Record has no subject");
      }
      if (collection === COLLECTION_BLOCK && subject === did) {
        return skip("invalid_record", `Record blocks its own author: ${subject}`);
      }
      return {
        type: "apply",
        flat: flat(collection === COLLECTION_FOLLOW ? OP_KIND.followPut : OP_KIND.blockPut, did, {
          rkey,
          uri,
          created: pgText(createdAt),
          sdid: subject,
        }),
        ids: [did, subject],
      };
    }
    default: {
      // COLLECTION_PROFILE, index_profiles.ts
      if (rkey !== PROFILE_RKEY) {
        return skip("invalid_record", `Profile record key is not ${PROFILE_RKEY}: ${rkey}`);
      }
      return {
        type: "apply",
        flat: flat(OP_KIND.profilePut, did, {
          text: typeof value.displayName === "string" ? pgText(value.displayName) : null,
          descr: typeof value.description === "string" ? pgText(value.description) : null,
          avatar: pgText(blobCid(value.avatar)),
          banner: pgText(blobCid(value.banner)),
        }),
        ids: [],
      };
    }
  }
}

/** One applied op on its way to the database. */
export interface PendingOp {
  /** Position in the batch's ops. */
  readonly index: number;
  readonly flat: FlatOp;
  /** Indexing time. */
  readonly now: string;
  /** Actor ids of `flat.did` and `flat.sdid` (null: none). */
  a: number | null;
  s: number | null;
}
