/**
 * What a backfill changes (docs/behaviour.md 6.2 rule 9): the ops that turn the rows the index
 * holds for one account into those of its verified repository. Run by the write path inside the
 * snapshot's transaction (`IndexWriter.applySnapshot`), so the rows read are the rows changed.
 *
 * - A row whose record the repository no longer holds gets a delete op (counters follow).
 * - A record the index does not hold gets a create op; one it holds differently (what the index
 *   keeps of it differs) an update op; one it holds the same, nothing. What is compared is what
 *   the index keeps: a post's CID; a like's or repost's subject and `createdAt`; a follow's
 *   subject; a block's subject and `createdAt`. The profile record is always put (its upsert
 *   changes nothing when equal).
 * - Follow records naming the same subject make one row, as when they arrive one by one
 *   (`index_graph.ts`): made from the oldest record (its `createdAt`, its notification), under
 *   the newest rkey. So when the index already holds that row under the newest rkey, the older
 *   records are left out; otherwise all of them are applied, oldest first.
 * - Deletes come first, then the records in key order.
 *
 * @module
 */

import type { DatabaseSync, StatementSync } from "node:sqlite";
import {
  COLLECTION_BLOCK,
  COLLECTION_FOLLOW,
  COLLECTION_LIKE,
  COLLECTION_POST,
  COLLECTION_PROFILE,
  COLLECTION_REPOST,
  PROFILE_RKEY,
} from "../../../shared/nsid.ts";
import type { RecordOp } from "../../../shared/ops.ts";
import { actorIdSql } from "../../db/schema.ts";

/** Path (`collection/rkey`) to what the index keeps of the record. */
type Held = Map<string, string>;

/** Reads one account's indexed records; statements prepared once. */
export class IndexedRecords {
  readonly #posts: StatementSync;
  readonly #likes: StatementSync;
  readonly #reposts: StatementSync;
  readonly #follows: StatementSync;
  readonly #blocks: StatementSync;
  readonly #profile: StatementSync;

  constructor(db: DatabaseSync) {
    const me = actorIdSql("?1");
    this.#posts = db.prepare(`SELECT rkey, cid AS v FROM posts WHERE author = ${me}`);
    const interaction = (table: string) =>
      db.prepare(
        `SELECT t.rkey, 'at://' || a.did || '/${COLLECTION_POST}/' || t.subject_rkey || '|' ||
           t.subject_cid || '|' || t.created_at AS v
         FROM ${table} t JOIN actors a ON a.id = t.subject_author WHERE t.actor = ${me}`,
      );
    this.#likes = interaction("likes");
    this.#reposts = interaction("reposts");
    this.#follows = db.prepare(
      `SELECT f.rkey, a.did AS v FROM follows f JOIN actors a ON a.id = f.subject
       WHERE f.follower = ${me} AND f.rkey IS NOT NULL`,
    );
    this.#blocks = db.prepare(
      `SELECT b.rkey, a.did || '|' || b.created_at AS v FROM blocks b
       JOIN actors a ON a.id = b.subject WHERE b.actor = ${me}`,
    );
    this.#profile = db.prepare("SELECT has_record FROM profiles WHERE did = ?1");
  }

  /** What the index keeps of each record of `did`, by path. */
  read(did: string): Held {
    const held: Held = new Map();
    const add = (collection: string, stmt: StatementSync) => {
      for (const row of stmt.all(did) as { rkey: string; v: string }[]) {
        held.set(`${collection}/${row.rkey}`, row.v);
      }
    };
    add(COLLECTION_POST, this.#posts);
    add(COLLECTION_LIKE, this.#likes);
    add(COLLECTION_REPOST, this.#reposts);
    add(COLLECTION_FOLLOW, this.#follows);
    add(COLLECTION_BLOCK, this.#blocks);
    const profile = this.#profile.get(did) as { has_record: number } | undefined;
    if (profile?.has_record === 1) held.set(`${COLLECTION_PROFILE}/${PROFILE_RKEY}`, "");
    return held;
  }
}

/**
 * The ops that make `held` (the index's rows of the account) equal to `records` (the verified
 * repository's, in key order), as the module notes say.
 */
export function diffRepo(did: string, held: Held, records: readonly RecordOp[]): RecordOp[] {
  const wanted = withoutShadowedFollows(records, held);
  const wantedPaths = new Set(wanted.map(pathOf));
  const ops: RecordOp[] = [];
  for (const path of held.keys()) {
    if (wantedPaths.has(path)) continue;
    const slash = path.indexOf("/");
    ops.push({
      kind: "record",
      action: "delete",
      did,
      collection: path.slice(0, slash),
      rkey: path.slice(slash + 1),
      cid: null,
      record: null,
    });
  }
  for (const op of wanted) {
    const have = held.get(pathOf(op));
    if (have === undefined) ops.push(op);
    else if (op.collection === COLLECTION_PROFILE || have !== keptOf(op)) {
      ops.push({ ...op, action: "update" });
    }
  }
  return ops;
}

/** What the index keeps of a record (the `v` of {@link IndexedRecords}), from the record. */
function keptOf(op: RecordOp): string | null {
  const r = op.record ?? {};
  switch (op.collection) {
    case COLLECTION_POST:
      return op.cid;
    case COLLECTION_LIKE:
    case COLLECTION_REPOST: {
      const subject = r.subject as { uri?: unknown; cid?: unknown } | undefined;
      return `${subject?.uri}|${subject?.cid}|${r.createdAt}`;
    }
    case COLLECTION_FOLLOW:
      return String(r.subject);
    case COLLECTION_BLOCK:
      return `${r.subject}|${r.createdAt}`;
    default:
      return null;
  }
}

/**
 * Follow records whose subject a newer follow record (a greater rkey) also names are left out
 * when the index holds that subject's row under the newest rkey (module notes).
 */
function withoutShadowedFollows(records: readonly RecordOp[], held: Held): RecordOp[] {
  const newest = new Map<unknown, string>();
  for (const op of records) {
    if (op.collection !== COLLECTION_FOLLOW) continue;
    const subject = op.record?.subject;
    const seen = newest.get(subject);
    if (seen === undefined || op.rkey > seen) newest.set(subject, op.rkey);
  }
  return records.filter((op) => {
    if (op.collection !== COLLECTION_FOLLOW) return true;
    const subject = op.record?.subject;
    const last = newest.get(subject)!;
    return last === op.rkey || held.get(`${COLLECTION_FOLLOW}/${last}`) !== String(subject);
  });
}

function pathOf(op: RecordOp): string {
  return `${op.collection}/${op.rkey}`;
}
