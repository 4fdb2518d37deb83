/**
 * Builders of {@link IndexOp}s for tests and the ingest benchmark: valid records in lex JSON
 * form with real CIDs.
 *
 * @module
 */

import { encodeCbor } from "../shared/cbor.ts";
import { cidForCbor, formatCid } from "../shared/cid.ts";
import {
  BLOB_TYPE,
  COLLECTION_BLOCK,
  COLLECTION_FOLLOW,
  COLLECTION_LIKE,
  COLLECTION_POST,
  COLLECTION_PROFILE,
  COLLECTION_REPOST,
  PROFILE_RKEY,
} from "../shared/nsid.ts";
import type { AccountStatusOp, HandleOp, IndexOp, RecordOp } from "../shared/ops.ts";
import type { DatabaseSync, SQLInputValue } from "node:sqlite";
import { openIndexDb } from "./db/open.ts";
import { type ApplyResult, IndexWriter } from "./ingest/apply_ops.ts";

/** A deterministic CID string derived from `seed`. */
export function cidOf(seed: string): string {
  return formatCid(cidForCbor(encodeCbor({ seed })));
}

/** A `did:plc` with 24 characters derived from `name` (padded with `x`). */
export function didOf(name: string): string {
  return `did:plc:${name.toLowerCase().replace(/[^a-z0-9]/g, "").padEnd(24, "x").slice(0, 24)}`;
}

/** The AT-URI of a record. */
export function uriOf(did: string, collection: string, rkey: string): string {
  return `at://${did}/${collection}/${rkey}`;
}

const CREATED_AT = "2024-05-01T12:00:00.000Z";

function create(
  did: string,
  collection: string,
  rkey: string,
  record: Record<string, unknown>,
  action: "create" | "update" = "create",
): RecordOp {
  return {
    kind: "record",
    action,
    did,
    collection,
    rkey,
    cid: cidOf(JSON.stringify(record)),
    record,
  };
}

/** Deletes the record (did, collection, rkey). */
export function deleteOp(did: string, collection: string, rkey: string): RecordOp {
  return { kind: "record", action: "delete", did, collection, rkey, cid: null, record: null };
}

/** Creates a post; `reply` names the parent (and root, defaulting to the parent). */
export function postOp(
  did: string,
  rkey: string,
  text: string,
  opts: { parent?: string; root?: string; embed?: unknown; langs?: string[]; update?: boolean } =
    {},
): RecordOp {
  const record: Record<string, unknown> = { $type: COLLECTION_POST, text, createdAt: CREATED_AT };
  if (opts.parent !== undefined) {
    const root = opts.root ?? opts.parent;
    record.reply = {
      root: { uri: root, cid: cidOf(root) },
      parent: { uri: opts.parent, cid: cidOf(opts.parent) },
    };
  }
  if (opts.embed !== undefined) record.embed = opts.embed;
  if (opts.langs !== undefined) record.langs = opts.langs;
  return create(did, COLLECTION_POST, rkey, record, opts.update ? "update" : "create");
}

/** Likes the post `subject`. */
export function likeOp(did: string, rkey: string, subject: string): RecordOp {
  return create(did, COLLECTION_LIKE, rkey, {
    $type: COLLECTION_LIKE,
    subject: { uri: subject, cid: cidOf(subject) },
    createdAt: CREATED_AT,
  });
}

/** Reposts the post `subject`. */
export function repostOp(did: string, rkey: string, subject: string): RecordOp {
  return create(did, COLLECTION_REPOST, rkey, {
    $type: COLLECTION_REPOST,
    subject: { uri: subject, cid: cidOf(subject) },
    createdAt: CREATED_AT,
  });
}

/** Follows `subject`. */
export function followOp(did: string, rkey: string, subject: string): RecordOp {
  return create(did, COLLECTION_FOLLOW, rkey, {
    $type: COLLECTION_FOLLOW,
    subject,
    createdAt: CREATED_AT,
  });
}

/** Blocks `subject`. */
export function blockOp(did: string, rkey: string, subject: string): RecordOp {
  return create(did, COLLECTION_BLOCK, rkey, {
    $type: COLLECTION_BLOCK,
    subject,
    createdAt: CREATED_AT,
  });
}

/** Writes the profile record (rkey `self`); `avatar` is a CID string. */
export function profileOp(
  did: string,
  fields: { displayName?: string; description?: string; avatar?: string; banner?: string },
): RecordOp {
  const record: Record<string, unknown> = { $type: COLLECTION_PROFILE };
  if (fields.displayName !== undefined) record.displayName = fields.displayName;
  if (fields.description !== undefined) record.description = fields.description;
  for (const key of ["avatar", "banner"] as const) {
    const cid = fields[key];
    if (cid !== undefined) {
      record[key] = { $type: BLOB_TYPE, ref: { $link: cid }, mimeType: "image/png", size: 1000 };
    }
  }
  return create(did, COLLECTION_PROFILE, PROFILE_RKEY, record);
}

/** The account `did` became inactive with `status` (`takendown`, `deactivated`), or active. */
export function accountStatusOp(
  did: string,
  status: "takendown" | "deactivated" | null,
): AccountStatusOp {
  return { kind: "account_status", did, active: status === null, status };
}

/** Sets (or clears, with null) the handle of `did`. */
export function handleOp(did: string, handle: string | null): HandleOp {
  return { kind: "handle", did, handle };
}

/** A fresh `:memory:` index with a writer whose clock ticks one second per reading. */
export interface TestIndex extends Disposable {
  readonly db: DatabaseSync;
  readonly writer: IndexWriter;
  /** Applies ops and returns the result. */
  apply(...ops: IndexOp[]): ApplyResult;
  /** One row as a plain object, or undefined. */
  row(sql: string, ...params: SQLInputValue[]): Record<string, unknown> | undefined;
  /** All rows as plain objects. */
  rows(sql: string, ...params: SQLInputValue[]): Record<string, unknown>[];
}

/** Opens a test index; `fixedClock` pins every timestamp to one instant. */
export function openTestIndex(opts: { fixedClock?: boolean; batchSize?: number } = {}): TestIndex {
  const db = openIndexDb(":memory:");
  let t = Date.parse("2024-06-01T00:00:00.000Z");
  const now = opts.fixedClock ? () => new Date(t) : () => new Date(t += 1000);
  const writer = new IndexWriter(db, { now, batchSize: opts.batchSize });
  const plain = (r: unknown) => (r === undefined ? undefined : { ...(r as object) });
  return {
    db,
    writer,
    apply: (...ops) => writer.applyOps(ops),
    row: (sql, ...params) => plain(db.prepare(sql).get(...params)),
    rows: (sql, ...params) =>
      db.prepare(sql).all(...params).map((r) => ({ ...r }) as Record<string, unknown>),
    [Symbol.dispose]: () => db.close(),
  };
}

/**
 * The little world of the member-safety view tests (blocks, inactive accounts): four accounts
 * (Dave follows nobody, for the cold-start timeline), their follows, posts, a reply chain across
 * accounts (Bob replies to Alice, Carol to Bob) and Bob's like of Alice's post.
 */
export function safetyWorld(): {
  ALICE: string;
  BOB: string;
  CAROL: string;
  DAVE: string;
  A1: string;
  B1: string;
  BR: string;
  CR: string;
  C1: string;
  ops: IndexOp[];
} {
  const [ALICE, BOB, CAROL, DAVE] = ["alice", "bob", "carol", "dave"].map(didOf);
  const A1 = uriOf(ALICE, COLLECTION_POST, "3kaaaaaaaaa22");
  const B1 = uriOf(BOB, COLLECTION_POST, "3kbbbbbbbbb22");
  const BR = uriOf(BOB, COLLECTION_POST, "3kbbbbbbbbc22");
  const CR = uriOf(CAROL, COLLECTION_POST, "3kccccccccc22");
  const C1 = uriOf(CAROL, COLLECTION_POST, "3kcccccccce22");
  const ops: IndexOp[] = [
    handleOp(ALICE, "alice.test"),
    handleOp(BOB, "bob.test"),
    handleOp(CAROL, "carol.test"),
    handleOp(DAVE, "dave.test"),
    followOp(ALICE, "3kfollow00022", BOB),
    followOp(ALICE, "3kfollow00122", CAROL),
    followOp(BOB, "3kfollow00222", ALICE),
    followOp(CAROL, "3kfollow00322", ALICE),
    followOp(CAROL, "3kfollow00422", BOB),
    postOp(ALICE, "3kaaaaaaaaa22", "a post by alice"),
    postOp(BOB, "3kbbbbbbbbb22", "a post by bob"),
    postOp(BOB, "3kbbbbbbbbc22", "a reply post by bob", { parent: A1 }),
    postOp(CAROL, "3kccccccccc22", "a reply post by carol", { parent: BR, root: A1 }),
    postOp(CAROL, "3kcccccccce22", "a post by carol"),
    likeOp(BOB, "3klike0000022", A1),
  ];
  return { ALICE, BOB, CAROL, DAVE, A1, B1, BR, CR, C1, ops };
}
