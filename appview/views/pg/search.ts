/**
 * Full-text search on PostgreSQL (appview/views/search.ts; behaviour 10.9): the words
 * `searchTerms` keeps, each a phrase of its tokens, ANDed (`search_query()`), matched against the
 * normalised post text (appview/db/pg/schema.ts), newest first by `posts.id` below the cursor,
 * filtered and hydrated in the same statement.
 *
 * FTS5 reads a word's matches newest first; a GIN index cannot, so there are two ways to the
 * newest matches, and their costs cross:
 * - walk `posts` newest first by id and test each row's text: about `need / share` rows for a
 *   word in `share` of the posts, each costing a normalisation of the text (about 13 µs here);
 * - read every match below the cursor through the GIN index `posts_search` and keep the newest:
 *   `share x rows below` matches, each a heap visit (about 2 µs).
 * The planner cannot choose well (it does not know the share at a prepared statement's generic
 * plan, and counts the normalisation as nearly free), so the statements fix their plans and the
 * view chooses: it first walks {@link FIRST_WALK} rows, which also measures the share of matches
 * near the cursor, then goes on with whichever way is cheaper for the rest: another walk sized
 * for what is missing, or the index below the last row walked. The worst case is a word at the
 * crossing (about 1.4% of posts at 1M), where either way costs about `need x 30` walked rows.
 *
 * @module
 */

import { actorIdSql } from "../../db/schema.ts";
import { SEARCH_QUERY_SQL, SEARCH_VECTOR_SQL } from "../../db/pg/schema.ts";
import type { PostRow } from "../present.ts";
import { inactiveSql, unavailableSql } from "../safety.ts";
import { type SearchPage, searchTerms } from "../search.ts";
import { POST_COLUMNS_OF_P } from "./posts.ts";
import { type PgClient, queryRows } from "./query.ts";

/** Rows the first walk reads. */
export const FIRST_WALK = 128;
/** A row walked costs about as much as this many matches read through the index. */
export const WALK_ROW_COST = 6;
/** Walks before the index reads the rest. */
const MAX_WALKS = 3;

// The tsquery once per statement (an InitPlan), not once per row tested.
const MATCHES = `${SEARCH_VECTOR_SQL} @@ (SELECT ${SEARCH_QUERY_SQL("$1")})`;

// $1 the words, $2 the cursor (row id), $3 how many, $4 rows to walk, $5 the viewer. `floor` is
// the last row the walk reads (null: it reaches the oldest post); the walk stops early once it
// has $3 matches.
const walkSql = (hidden: string) =>
  `WITH edge AS MATERIALIZED (SELECT (SELECT id FROM posts WHERE id < $2
      ORDER BY id DESC LIMIT 1 OFFSET $4 - 1) AS floor)
  SELECT edge.floor, m.* FROM edge LEFT JOIN LATERAL (
    SELECT ${POST_COLUMNS_OF_P}
    FROM (SELECT * FROM posts WHERE id < $2 ORDER BY id DESC LIMIT $4) p
    WHERE ${MATCHES} AND NOT ${hidden}
    ORDER BY p.id DESC LIMIT $3) m ON true
  ORDER BY m.id DESC`;
// $1 the words, $2 the cursor, $3 how many, $4 the viewer. `+ 0` keeps the primary key out: no
// walk in id order, no bitmap of every id below the cursor beside the GIN one.
const indexSql = (hidden: string) =>
  `SELECT ${POST_COLUMNS_OF_P} FROM posts p
  WHERE ${MATCHES} AND p.id + 0 < $2 AND NOT ${hidden}
  ORDER BY p.id + 0 DESC LIMIT $3`;

const PLAIN = inactiveSql("p.author");
const WALK = walkSql(PLAIN);
const WALK_FOR_VIEWER = walkSql(unavailableSql(actorIdSql("$5"), "p.author"));
const INDEX = indexSql(PLAIN);
const INDEX_FOR_VIEWER = indexSql(unavailableSql(actorIdSql("$4"), "p.author"));

type WalkRow = PostRow & { floor: number | null };

/** Searches posts. */
export class PgSearchView {
  readonly #sql: PgClient;
  readonly #firstWalk: number;

  /** `firstWalk`: rows the first walk reads (default {@link FIRST_WALK}). */
  constructor(sql: PgClient, opts: { firstWalk?: number } = {}) {
    this.#sql = sql;
    this.#firstWalk = opts.firstWalk ?? FIRST_WALK;
  }

  /**
   * Posts matching every word of `q`, newest first, below the row id `before` (null: top), none
   * by an inactive account (spec 4.2 rule 12); with `viewerDid`, none by an account the viewer
   * blocks or is blocked by (rule 10).
   */
  async search(
    q: string,
    opts: { limit: number; before: number | null; viewerDid?: string | null },
  ): Promise<SearchPage> {
    const terms = searchTerms(q);
    if (terms.length === 0) return { rows: [], next: null };
    const viewer = opts.viewerDid || null;
    const take = opts.limit + 1;
    const rows: PostRow[] = [];
    let before = opts.before ?? Number.MAX_SAFE_INTEGER;
    let walk = this.#firstWalk;
    let walked = 0;
    for (let walks = 0;; walks++) {
      const need = take - rows.length;
      if (walks === MAX_WALKS) {
        rows.push(...await this.#index(terms, before, need, viewer));
        break;
      }
      const found = await queryRows<WalkRow>(
        this.#sql,
        viewer === null ? WALK : WALK_FOR_VIEWER,
        viewer === null ? [terms, before, need, walk] : [terms, before, need, walk, viewer],
      );
      const floor = found[0].floor;
      for (const { floor: _, ...row } of found) if (row.id !== null) rows.push(row);
      if (rows.length === take || floor === null) break;
      walked += walk;
      before = floor;
      // Matches per row walked so far, and what each way would cost for the rest.
      const share = rows.length / walked;
      const rest = take - rows.length;
      if (share === 0 || (rest / share) * WALK_ROW_COST > share * floor) {
        rows.push(...await this.#index(terms, before, rest, viewer));
        break;
      }
      walk = Math.ceil((rest / share) * 1.5);
    }
    const more = rows.length > opts.limit;
    if (more) rows.length = opts.limit;
    return { rows, next: more ? rows[rows.length - 1].id : null };
  }

  async #index(
    terms: string[],
    before: number,
    need: number,
    viewer: string | null,
  ): Promise<PostRow[]> {
    return viewer === null
      ? await queryRows<PostRow>(this.#sql, INDEX, [terms, before, need])
      : await queryRows<PostRow>(this.#sql, INDEX_FOR_VIEWER, [terms, before, need, viewer]);
  }
}
