/**
 * Reading the holds of records the operator took down (`record_takedown.ts`, docs/behaviour.md
 * 4.1 rule 15): one hold, the holds of an account or of all (listings), and which CIDs of an
 * account are held (`sync.getBlocks`).
 *
 * @module
 */

import { AtUriError, parseAtUri } from "../../shared/at_uri.ts";
import { isLookupDid } from "../accounts/accounts.ts";
import {
  recordTakedownCidPrefix,
  recordTakedownKey,
  recordTakedownPrefix,
  repoRecordKey,
} from "../store/keys.ts";
import type { StoredRecord } from "../repo/repo_root.ts";

/** Most holds one listing answers. */
export const MAX_TAKEDOWN_PAGE = 1000;

/** A held record (stored under `recordTakedownKey`). */
export interface RecordTakedown {
  /** `at://<did>/<collection>/<rkey>`. */
  uri: string;
  /** The record's CID string. */
  cid: string;
  /** The record block, exactly as it was in the repository. */
  bytes: Uint8Array;
  /** The operator's reason, shown to the author. */
  reason?: string;
  /** When it was taken down (ISO 8601). */
  createdAt: string;
  /** The blob CIDs the record references (kept while held). */
  blobs: string[];
}

/**
 * Parses a record AT-URI for the commands (a DID or handle authority, a collection, a record key).
 *
 * @throws {AtUriError} naming the value
 */
export function parseRecordUri(
  uri: string,
): { authority: string; collection: string; rkey: string } {
  const parsed = parseAtUri(uri);
  if (parsed.authority.startsWith("did:") && !isLookupDid(parsed.authority)) {
    throw new AtUriError(`Invalid AT-URI authority: ${JSON.stringify(parsed.authority)}`);
  }
  return parsed;
}

/** The hold of the record at `did`/`collection`/`rkey`, or null. */
export async function getRecordTakedown(
  kv: Deno.Kv,
  did: string,
  collection: string,
  rkey: string,
): Promise<RecordTakedown | null> {
  return (await kv.get<RecordTakedown>(recordTakedownKey(did, collection, rkey))).value;
}

/**
 * The CIDs of the held records of `did` among `cids` (one read when it holds none): blocks
 * `sync.getBlocks` does not serve, whatever a cache of the commit that wrote them still has.
 * A pending hold (its record still live with the held CID) does not count.
 */
export async function heldRecordCids(kv: Deno.Kv, did: string, cids: string[]): Promise<string[]> {
  const paths = new Map<string, string[]>();
  for await (const e of kv.list({ prefix: recordTakedownCidPrefix(did) })) {
    const [, , cid, path] = e.key as string[];
    paths.set(cid, [...paths.get(cid) ?? [], path]);
  }
  const held: string[] = [];
  for (const cid of paths.size === 0 ? [] : new Set(cids)) {
    for (const path of paths.get(cid) ?? []) {
      const [collection, rkey] = path.split("/");
      const live = await kv.get<StoredRecord>(repoRecordKey(did, collection, rkey));
      if (live.value?.cid !== cid) {
        held.push(cid);
        break;
      }
    }
  }
  return held;
}

/** A hold as a listing gives it: `pending` when its record is still live with the held CID. */
export interface ListedTakedown extends RecordTakedown {
  pending: boolean;
}

/**
 * Lists the holds of `did` (or of every account) by record path, `limit` a page; the cursor is
 * the last URI listed. With `inForce`, pending holds (module comment) are left out.
 *
 * @throws {AtUriError} for a cursor that is not a record AT-URI (of `did`, when given)
 */
export async function listRecordTakedowns(
  kv: Deno.Kv,
  opts: { did?: string; limit: number; cursor?: string; inForce?: boolean },
): Promise<{ takedowns: ListedTakedown[]; cursor: string | null }> {
  const prefix = recordTakedownPrefix(opts.did);
  let start: Deno.KvKey | undefined;
  if (opts.cursor !== undefined) {
    const c = parseRecordUri(opts.cursor);
    if (!c.authority.startsWith("did:") || (opts.did !== undefined && c.authority !== opts.did)) {
      throw new AtUriError(`Cursor is not a listed record URI: ${JSON.stringify(opts.cursor)}`);
    }
    // Just after the cursor's key (a longer key sorts after its prefix).
    start = [...recordTakedownKey(c.authority, c.collection, c.rkey), 0];
  }
  const limit = Math.min(Math.max(1, opts.limit), MAX_TAKEDOWN_PAGE);
  const takedowns: ListedTakedown[] = [];
  let more = false;
  const iter = kv.list<RecordTakedown>(start === undefined ? { prefix } : { prefix, start }, {
    batchSize: Math.min(limit + 1, 500),
  });
  for await (const entry of iter) {
    if (takedowns.length === limit) {
      more = true;
      break;
    }
    const [, did, collection, rkey] = entry.key as string[];
    const live = (await kv.get<StoredRecord>(repoRecordKey(did, collection, rkey))).value;
    const pending = live?.cid === entry.value.cid;
    if (pending && opts.inForce) continue;
    takedowns.push({ ...entry.value, pending });
  }
  const last = takedowns.at(-1);
  return { takedowns, cursor: more && last !== undefined ? last.uri : null };
}
