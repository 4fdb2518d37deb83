/**
 * Post hydration on PostgreSQL: the rows of a skeleton's ids with one `= ANY` statement, in the
 * skeleton's order (appview/views/posts.ts).
 *
 * @module
 */

import { actorIdSql } from "../../db/schema.ts";
import { postKeyOf } from "../../db/post_key.ts";
import { inIdOrder } from "../posts.ts";
import { POST_COLUMNS, type PostRow } from "../present.ts";
import { type PgClient, qualify, queryRow, queryRows } from "./query.ts";

/** {@link POST_COLUMNS} of the table alias `p`, for statements that join `posts p`. */
export const POST_COLUMNS_OF_P = qualify(POST_COLUMNS, "p");

const BY_IDS = `SELECT ${POST_COLUMNS} FROM posts WHERE id = ANY ($1::bigint[])`;
const BY_KEY = `SELECT ${POST_COLUMNS} FROM posts WHERE author = ${actorIdSql("$1")} AND rkey = $2`;

/** Reads post rows by id or URI. */
export class PgPostHydrator {
  readonly #sql: PgClient;

  constructor(sql: PgClient) {
    this.#sql = sql;
  }

  /** The rows of `ids`, in the order of `ids`; ids no longer indexed are left out. */
  async byIds(ids: readonly number[]): Promise<PostRow[]> {
    if (ids.length === 0) return [];
    return inIdOrder(ids, await queryRows<PostRow>(this.#sql, BY_IDS, [ids]));
  }

  /** The row of the post `uri`, or null when it is not indexed. */
  async byUri(uri: string): Promise<PostRow | null> {
    const key = postKeyOf(uri);
    if (key === null) return null;
    return (await queryRow<PostRow>(this.#sql, BY_KEY, [key.did, key.rkey])) ?? null;
  }
}
