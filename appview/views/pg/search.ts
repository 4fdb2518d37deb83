/**
 * Full-text search on PostgreSQL (appview/views/search.ts; behaviour 10.9): the words
 * `searchTerms` keeps, each a phrase of its tokens, ANDed (`search_query()`), matched against the
 * normalised post text (appview/db/pg/schema.ts), newest first by `posts.id` below the cursor,
 * filtered and hydrated in the same statement.
 *
 * FTS5 reads a word's matches newest first; a GIN index cannot. There are three ways to the newest
 * matches of a word in `share` of the posts, for `rest` rows still missing, `below` posts under
 * the cursor (costs measured at 1M posts on the two-core machine, 2026-11-28, see the constants):
 * - **walk** `posts` newest first by id and test each row's stored search vector: `rest / share`
 *   rows at {@link COST.walkRow} each. Cheapest for frequent words.
 * - **window**: the GIN bitmap of every match (the word's posting list, {@link COST.posting} a
 *   match) ANDed with the primary key's bitmap of the `2 x rest / share` ids just below the cursor
 *   ({@link COST.idInWindow} each), then only the matches in that window are visited
 *   ({@link COST.heapVisit}). Cheapest in between (0.05-0.5% of posts).
 * - **index**: every match below the cursor through the GIN index alone, each visited: `share x
 *   below x (posting + heap visit)`. Cheapest for rare words.
 * The planner cannot choose among them (a prepared statement's generic plan does not know the
 * share), so each statement fixes its plan and the view chooses: it first walks
 * {@link FIRST_WALK} rows, which finishes the page for a frequent word and measures the share of
 * matches near the cursor, then goes on with the cheapest way for the rest, choosing again after
 * every step from every row looked at so far (a walk or a window that falls short is followed by a
 * smaller one, never by the index reading every older match, which cost up to 140 ms before). A
 * first walk that finds nothing goes to the index: the word is then rarer than about 0.1%.
 * Worst case at 1M posts: about 5 ms of database time (a word in about 0.3% of posts). Before the
 * vector was stored (schema version 11) each walked row cost 7-13 µs, and search's p99 missed its
 * 50 ms budget at 72-142 ms.
 *
 * @module
 */

import { actorIdSql } from "../../db/schema.ts";
import type { PgSql } from "../../db/pg/open.ts";
import { SEARCH_QUERY_SQL, SEARCH_VECTOR_SQL } from "../../db/pg/schema.ts";
import type { PostRow } from "../present.ts";
import { inactiveSql, unavailableSql } from "../safety.ts";
import { type SearchPage, searchTerms } from "../search.ts";
import { POST_COLUMNS_OF_P } from "./posts.ts";
import { queryRows } from "./query.ts";

/** Rows the first walk reads (about 1.6 ms; a word in 0.5% of posts has about 10 there). */
export const FIRST_WALK = 2048;

/**
 * Costs in µs at 1M posts on the two-core machine (2026-11-28, EXPLAIN ANALYZE of each statement
 * over the query bench's words): a row walked and tested; a match read from the GIN posting list;
 * an id of the window read from the primary key; a match's row visited (2 µs in shared buffers,
 * 5-7 µs when not, as most old matches are).
 */
export const COST = Object.freeze({ walkRow: 0.8, posting: 0.3, idInWindow: 0.07, heapVisit: 4 });

/** How a search goes on after its first walk: chosen by cost, or fixed (tests: each way). */
export type SearchWay = "auto" | "walk" | "window" | "index";

// The tsquery once per statement (an InitPlan), not once per row tested.
const MATCHES = `${SEARCH_VECTOR_SQL} @@ (SELECT ${SEARCH_QUERY_SQL("$1")})`;

// $1 the words, $2 the cursor (row id), $3 how many, $4 rows to walk, $5 the viewer. `floor` is
// the last row the walk reads (null: it reaches the oldest post); the walk stops early once it
// has $3 matches.
const walkSql = (hidden: string) =>
  `WITH edge AS MATERIALIZED (SELECT (SELECT id FROM posts WHERE id < $2
      ORDER BY id DESC LIMIT 1 OFFSET $4::bigint - 1) AS floor)
  SELECT edge.floor, m.* FROM edge LEFT JOIN LATERAL (
    SELECT ${POST_COLUMNS_OF_P}
    FROM (SELECT * FROM posts WHERE id < $2 ORDER BY id DESC LIMIT $4) p
    WHERE ${MATCHES} AND NOT ${hidden}
    ORDER BY p.id DESC LIMIT $3) m ON true
  ORDER BY m.id DESC`;
// $1 the words, $2 the cursor, $3 how many, $4 the window's lowest id, $5 the viewer. Run with
// plain index scans off ({@link WINDOW_PLAN}), so the plan is the GIN and the primary key
// bitmaps ANDed.
const windowSql = (hidden: string) =>
  `SELECT ${POST_COLUMNS_OF_P} FROM posts p
  WHERE ${MATCHES} AND p.id >= $4 AND p.id < $2 AND NOT ${hidden}
  ORDER BY p.id DESC LIMIT $3`;
// $1 the words, $2 the cursor, $3 how many, $4 the viewer. `+ 0` keeps the primary key out: no
// walk in id order, no bitmap of every id below the cursor beside the GIN one.
const indexSql = (hidden: string) =>
  `SELECT ${POST_COLUMNS_OF_P} FROM posts p
  WHERE ${MATCHES} AND p.id + 0 < $2 AND NOT ${hidden}
  ORDER BY p.id + 0 DESC LIMIT $3`;

const PLAIN = inactiveSql("p.author");
const WALK = walkSql(PLAIN);
const WALK_FOR_VIEWER = walkSql(unavailableSql(actorIdSql("$5"), "p.author"));
const WINDOW = windowSql(PLAIN);
const WINDOW_FOR_VIEWER = windowSql(unavailableSql(actorIdSql("$5"), "p.author"));
const INDEX = indexSql(PLAIN);
const INDEX_FOR_VIEWER = indexSql(unavailableSql(actorIdSql("$4"), "p.author"));

type WalkRow = PostRow & { floor: number | null };

/**
 * The window's statement runs in a transaction with plain index scans off. Otherwise PostgreSQL
 * reads the window's ids in order through the primary key and tests every row (it counts the
 * test as nearly free): 0.35 µs a row, 21 ms for the 60,000-row window of a word in 0.1% of
 * posts, where the bitmaps ANDed take 2-3.5 ms (1M posts, 2026-11-28).
 */
const WINDOW_PLAN = "SET LOCAL enable_indexscan = off";

/** Searches posts. */
export class PgSearchView {
  readonly #sql: PgSql;
  readonly #firstWalk: number;
  readonly #way: SearchWay;

  /**
   * `firstWalk`: rows the first walk reads (default {@link FIRST_WALK}); `way`: how to go on
   * after it (default `auto`, the cheapest).
   */
  constructor(sql: PgSql, opts: { firstWalk?: number; way?: SearchWay } = {}) {
    this.#sql = sql;
    this.#firstWalk = opts.firstWalk ?? FIRST_WALK;
    this.#way = opts.way ?? "auto";
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
    let looked = 0; // rows walked or ids windowed so far
    let walk = this.#firstWalk;
    for (;;) {
      const found = await this.#walk(terms, before, take - rows.length, walk, viewer);
      const floor = found[0].floor;
      for (const { floor: _, ...row } of found) if (row.id !== null) rows.push(row);
      if (rows.length === take || floor === null) break;
      looked += walk;
      before = floor;
      let next = this.#next(rows.length, looked, take - rows.length, before);
      while (next.way === "window") {
        const lowest = Math.max(0, before - next.rows);
        rows.push(...await this.#window(terms, before, take - rows.length, lowest, viewer));
        looked += before - lowest;
        before = lowest;
        if (rows.length === take || lowest === 0) break;
        next = this.#next(rows.length, looked, take - rows.length, before);
      }
      if (next.way === "index") {
        rows.push(...await this.#index(terms, before, take - rows.length, viewer));
      }
      if (next.way !== "walk") break;
      walk = next.rows;
    }
    const more = rows.length > opts.limit;
    if (more) rows.length = opts.limit;
    return { rows, next: more ? rows[rows.length - 1].id : null };
  }

  /**
   * The cheapest way on for `rest` rows, `found` matches having been found in `looked` rows, with
   * about `below` rows under the cursor (ids), and how many rows it should walk or window. The
   * share of a few matches is a rough estimate: the index, whose cost grows with it, is costed
   * with a share two matches higher (2 found in 2,048 rows were 2,653 of 1M in the bench).
   */
  #next(
    found: number,
    looked: number,
    rest: number,
    below: number,
  ): { way: SearchWay; rows: number } {
    if (found === 0) return { way: this.#way === "auto" ? "index" : this.#way, rows: looked };
    const share = found / looked;
    const span = Math.min(Math.ceil((2 * rest) / share), Math.max(below, 1));
    const matches = share * below;
    const costs: [SearchWay, number][] = [
      ["walk", span * COST.walkRow],
      ["window", matches * COST.posting + span * COST.idInWindow + 2 * rest * COST.heapVisit],
      ["index", ((found + 2) / looked) * below * (COST.posting + COST.heapVisit)],
    ];
    const way = this.#way !== "auto"
      ? this.#way
      : costs.reduce((best, c) => (c[1] < best[1] ? c : best))[0];
    return { way, rows: span };
  }

  async #walk(
    terms: string[],
    before: number,
    need: number,
    walk: number,
    viewer: string | null,
  ): Promise<WalkRow[]> {
    return viewer === null
      ? await queryRows<WalkRow>(this.#sql, WALK, [terms, before, need, walk])
      : await queryRows<WalkRow>(this.#sql, WALK_FOR_VIEWER, [terms, before, need, walk, viewer]);
  }

  async #window(
    terms: string[],
    before: number,
    need: number,
    lowest: number,
    viewer: string | null,
  ): Promise<PostRow[]> {
    return await this.#sql.begin(async (tx) => {
      await tx.unsafe(WINDOW_PLAN);
      return viewer === null
        ? await queryRows<PostRow>(tx, WINDOW, [terms, before, need, lowest])
        : await queryRows<PostRow>(tx, WINDOW_FOR_VIEWER, [terms, before, need, lowest, viewer]);
    }) as PostRow[];
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
