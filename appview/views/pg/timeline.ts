/**
 * Home timeline on PostgreSQL (appview/views/timeline.ts, spec 4.2 rules 1-2): the same two
 * skeleton strategies, the same choice between them and the same cold start, each as one
 * statement that also hydrates the page (a join of the skeleton's ids), so a page is two round
 * trips: the viewer's id and follow facts, then the page. The threshold merge reads the heads and
 * every qualifying followee's window in one statement (`LATERAL`); a bounded global walk that
 * ends before the page is full is completed below its last row by a third statement that finds
 * that row and merges below it.
 *
 * @module
 */

import { COLLECTION_POST } from "../../../shared/nsid.ts";
import { type TextKey, TOP_TIME } from "../cursor.ts";
import type { PostRow } from "../present.ts";
import { hiddenSql } from "../safety.ts";
import {
  GLOBAL_SCAN_ROWS_PER_RESULT,
  PER_FOLLOWEE_MAX_FOLLOWS,
  type TimelinePage,
  type TimelineStrategy,
} from "../timeline.ts";
import { POST_COLUMNS_OF_P } from "./posts.ts";
import { type PgClient, queryRow, queryRows } from "./query.ts";

const VIEWER = `SELECT a.id,
    EXISTS (SELECT 1 FROM follows WHERE follower = a.id) AS follows,
    (SELECT following_count FROM profiles WHERE did = $1) AS following
  FROM actors a WHERE a.did = $1`;

/** The page's rows, hydrated in skeleton order. */
const hydrated = (skeleton: string) =>
  `SELECT ${POST_COLUMNS_OF_P} FROM (${skeleton}) s JOIN posts p ON p.id = s.id
  ORDER BY s.indexed_at DESC, s.uri DESC`;

/**
 * The threshold merge of timeline.ts: the followees' newest post below the cursor (`time`, `uri`),
 * the `take`-th newest of these heads as the floor, then the posts in [floor, cursor) of the
 * followees whose head reaches the floor, `take` at most each, sorted, the first `take`. `with`
 * adds common table expressions that `time` and `uri` may read. $1 viewer id, $4 take.
 */
const mergeSql = (time: string, uri: string, with_ = "") =>
  hydrated(`WITH ${with_} heads AS MATERIALIZED (
      SELECT f.subject AS author, (
        SELECT indexed_at FROM posts
        WHERE author = f.subject AND (indexed_at, uri) < (${time}, ${uri})
        ORDER BY indexed_at DESC, uri DESC LIMIT 1) AS t
      FROM follows f WHERE f.follower = $1 AND NOT ${hiddenSql("$1", "f.subject")}),
    floor AS MATERIALIZED (SELECT coalesce((SELECT t FROM heads WHERE t IS NOT NULL
      ORDER BY t DESC LIMIT 1 OFFSET $4 - 1), '') AS t)
    SELECT w.id, w.indexed_at, w.uri
    FROM floor CROSS JOIN heads CROSS JOIN LATERAL (
      SELECT id, indexed_at, uri FROM posts
      WHERE author = heads.author AND indexed_at >= floor.t
        AND (indexed_at, uri) < (${time}, ${uri})
      ORDER BY indexed_at DESC, uri DESC LIMIT $4) w
    WHERE heads.t >= floor.t
    ORDER BY w.indexed_at DESC, w.uri DESC LIMIT $4`);

// $1 viewer id, $2, $3 cursor, $4 take.
const MERGE = mergeSql("$2", "$3");
// The merge below the last row the bounded walk read: the $5-th row below the cursor (none: the
// walk read every row below it, and the merge finds nothing). $5 is a bigint, as the walk's LIMIT
// takes it (`$5 - 1` alone would make it an integer, and a bound past 2^31 an error).
const MERGE_BELOW_WALK = mergeSql(
  "(SELECT t FROM walked)",
  "(SELECT u FROM walked)",
  `walked AS MATERIALIZED (SELECT indexed_at AS t, uri AS u FROM posts
      WHERE (indexed_at, uri) < ($2, $3)
      ORDER BY indexed_at DESC, uri DESC LIMIT 1 OFFSET $5::bigint - 1),`,
);
// $1 viewer id, $2, $3 cursor, $4 take, $5 bound of the walk. The follow test is a scalar
// subquery, not EXISTS: PostgreSQL turns an EXISTS into a join, and estimating the filters very
// selective it hashed the viewer's follows and read all $5 rows before sorting (2-5 ms with the
// query bench's ingest running); as a per-row test the walk stays in time order and stops at the
// $4-th row kept (about 190 rows read for a viewer following a fifth of the authors, 0.3 ms).
const GLOBAL_SCAN = hydrated(`SELECT id, indexed_at, uri FROM (
    SELECT id, author, indexed_at, uri FROM posts
    WHERE (indexed_at, uri) < ($2, $3)
    ORDER BY indexed_at DESC, uri DESC LIMIT $5) w
  WHERE (SELECT true FROM follows WHERE follower = $1 AND subject = w.author LIMIT 1)
    AND NOT ${hiddenSql("$1", "w.author")}
  ORDER BY indexed_at DESC, uri DESC LIMIT $4`);
// $1, $2 cursor, $3 collection, $4 take, $5 viewer id (null: none).
const COLD_START = hydrated(`SELECT id, indexed_at, uri FROM posts
  WHERE (indexed_at, uri) < ($1, $2) AND collection = $3
    AND NOT ${hiddenSql("$5::bigint", "author")}
  ORDER BY indexed_at DESC, uri DESC LIMIT $4`);

/** Reads timelines. */
export class PgTimelineView {
  readonly #sql: PgClient;
  readonly #scanRowsPerResult: number;

  /** `scanRowsPerResult` bounds the global walk (default {@link GLOBAL_SCAN_ROWS_PER_RESULT}). */
  constructor(sql: PgClient, opts: { scanRowsPerResult?: number } = {}) {
    this.#sql = sql;
    this.#scanRowsPerResult = opts.scanRowsPerResult ?? GLOBAL_SCAN_ROWS_PER_RESULT;
  }

  /** The home timeline of `viewerDid`: `limit` posts below `cursor` (null: from the top). */
  async home(
    viewerDid: string,
    opts: { limit: number; cursor: TextKey | null; strategy?: TimelineStrategy },
  ): Promise<TimelinePage> {
    const [time, uri] = opts.cursor ?? [TOP_TIME, ""];
    const take = opts.limit + 1;
    let rows: PostRow[];
    const viewer = await queryRow<{ id: number; follows: boolean; following: number | null }>(
      this.#sql,
      VIEWER,
      [viewerDid],
    );
    if (viewer === undefined || !viewer.follows) {
      rows = await this.#rows(COLD_START, [time, uri, COLLECTION_POST, take, viewer?.id ?? null]);
    } else {
      const strategy = opts.strategy ?? "auto";
      const perFollowee = strategy === "per_followee" ||
        (strategy === "auto" && (viewer.following ?? 0) <= PER_FOLLOWEE_MAX_FOLLOWS);
      rows = perFollowee
        ? await this.#rows(MERGE, [viewer.id, time, uri, take])
        : await this.#scan(viewer.id, time, uri, take);
    }
    const more = rows.length > opts.limit;
    if (more) rows.length = opts.limit;
    const last = rows[rows.length - 1];
    return { rows, next: more ? [last.indexed_at, last.uri] : null };
  }

  /** The bounded global walk, completed below its last row by the threshold merge. */
  async #scan(viewer: number, time: string, uri: string, take: number): Promise<PostRow[]> {
    const bound = Math.min(Number.MAX_SAFE_INTEGER, take * this.#scanRowsPerResult);
    const found = await this.#rows(GLOBAL_SCAN, [viewer, time, uri, take, bound]);
    if (found.length >= take) return found;
    const below = await this.#rows(MERGE_BELOW_WALK, [
      viewer,
      time,
      uri,
      take - found.length,
      bound,
    ]);
    return found.concat(below);
  }

  async #rows(text: string, params: unknown[]): Promise<PostRow[]> {
    return await queryRows<PostRow>(this.#sql, text, params);
  }
}
