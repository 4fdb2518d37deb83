/**
 * What the index keeps of one account's records, read on PostgreSQL: the `IndexedRecords` of
 * appview/ingest/backfill/repo_diff.ts (same values, so `diffRepo` plans the same ops), read in one
 * round trip inside the snapshot's transaction.
 *
 * @module
 */

import type postgres from "postgres";
import {
  COLLECTION_BLOCK,
  COLLECTION_FOLLOW,
  COLLECTION_LIKE,
  COLLECTION_POST,
  COLLECTION_PROFILE,
  COLLECTION_REPOST,
  PROFILE_RKEY,
} from "../../../shared/nsid.ts";

const ME = "(SELECT id FROM actors WHERE did = $1)";

const interaction = (table: string) =>
  `SELECT t.rkey, 'at://' || a.did || '/${COLLECTION_POST}/' || t.subject_rkey || '|' ||
     t.subject_cid || '|' || t.created_at AS v
   FROM ${table} t JOIN actors a ON a.id = t.subject_author WHERE t.actor = ${ME}`;

const QUERIES: readonly [string, string][] = [
  [COLLECTION_POST, `SELECT rkey, cid AS v FROM posts WHERE author = ${ME}`],
  [COLLECTION_LIKE, interaction("likes")],
  [COLLECTION_REPOST, interaction("reposts")],
  [
    COLLECTION_FOLLOW,
    `SELECT f.rkey, a.did AS v FROM follows f JOIN actors a ON a.id = f.subject
     WHERE f.follower = ${ME} AND f.rkey IS NOT NULL`,
  ],
  [
    COLLECTION_BLOCK,
    `SELECT b.rkey, a.did || '|' || b.created_at AS v FROM blocks b
     JOIN actors a ON a.id = b.subject WHERE b.actor = ${ME}`,
  ],
];

/** Path (`collection/rkey`) to what the index keeps of each record of `did`. */
export async function readIndexedRecords(
  sql: postgres.Sql | postgres.TransactionSql,
  did: string,
): Promise<Map<string, string>> {
  const [profile, ...sets] = await Promise.all([
    sql`SELECT has_record FROM profiles WHERE did = ${did}`,
    ...QUERIES.map(([, query]) => sql.unsafe(query, [did], { prepare: true })),
  ]);
  const held = new Map<string, string>();
  sets.forEach((rows, i) => {
    for (const row of rows) held.set(`${QUERIES[i][0]}/${row.rkey}`, row.v as string);
  });
  if (profile[0]?.has_record === 1) held.set(`${COLLECTION_PROFILE}/${PROFILE_RKEY}`, "");
  return held;
}
