/**
 * Full-text search on PostgreSQL (appview/views/search.ts; behaviour 10.9): the GIN index
 * `posts_search` over the normalised post text (appview/db/pg/schema.ts), matched against the
 * words `searchTerms` keeps (each a phrase of its tokens, ANDed), newest first by `posts.id`
 * below the cursor, filtered and hydrated in the same statement.
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

// $1 the words, $2 the cursor (row id), $3 the limit, $4 the viewer.
const matchSql = (hidden: string) =>
  `SELECT ${POST_COLUMNS_OF_P} FROM posts p
  WHERE ${SEARCH_VECTOR_SQL} @@ ${SEARCH_QUERY_SQL("$1")} AND p.id < $2
    AND NOT ${hidden}
  ORDER BY p.id DESC LIMIT $3`;
const MATCH = matchSql(inactiveSql("p.author"));
const MATCH_FOR_VIEWER = matchSql(unavailableSql(actorIdSql("$4"), "p.author"));

/** Searches posts. */
export class PgSearchView {
  readonly #sql: PgClient;

  constructor(sql: PgClient) {
    this.#sql = sql;
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
    const before = opts.before ?? Number.MAX_SAFE_INTEGER;
    const rows = opts.viewerDid
      ? await queryRows<PostRow>(this.#sql, MATCH_FOR_VIEWER, [
        terms,
        before,
        opts.limit + 1,
        opts.viewerDid,
      ])
      : await queryRows<PostRow>(this.#sql, MATCH, [terms, before, opts.limit + 1]);
    const more = rows.length > opts.limit;
    if (more) rows.length = opts.limit;
    return { rows, next: more ? rows[rows.length - 1].id : null };
  }
}
