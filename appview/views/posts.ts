/**
 * Post hydration: the second step of every post pipeline (skeleton -> hydrate -> present). A
 * skeleton is a list of post ids in the order to serve; hydration reads their rows with one
 * prepared statement and keeps that order.
 *
 * @module
 */

import { actorIdSql } from "../db/schema.ts";
import type { DatabaseSync, StatementSync } from "node:sqlite";
import { postKeyOf } from "../db/post_key.ts";
import { POST_COLUMNS, type PostRow } from "./present.ts";

/** Reads post rows by id or URI with statements prepared once. */
export class PostHydrator {
  readonly #byIds: StatementSync;
  readonly #byKey: StatementSync;

  constructor(db: DatabaseSync) {
    this.#byIds = db.prepare(
      `SELECT ${POST_COLUMNS} FROM posts WHERE id IN (SELECT value FROM json_each(?))`,
    );
    this.#byKey = db.prepare(
      `SELECT ${POST_COLUMNS} FROM posts
       WHERE author = ${actorIdSql("?")} AND rkey = ?`,
    );
  }

  /** The rows of `ids`, in the order of `ids`; ids no longer indexed are left out. */
  byIds(ids: readonly number[]): PostRow[] {
    if (ids.length === 0) return [];
    const rows = this.#byIds.all(JSON.stringify(ids)) as unknown as PostRow[];
    return rows.length <= 1 ? rows : inIdOrder(ids, rows);
  }

  /** The row of the post `uri`, or null when it is not indexed. */
  byUri(uri: string): PostRow | null {
    const key = postKeyOf(uri);
    if (key === null) return null;
    return (this.#byKey.get(key.did, key.rkey) as PostRow | undefined) ?? null;
  }
}

/** `rows` in the order of `ids` (a row per id at most; ids without a row left out). */
export function inIdOrder(ids: readonly number[], rows: readonly PostRow[]): PostRow[] {
  const byId = new Map<number, PostRow>();
  for (const row of rows) byId.set(row.id, row);
  const out: PostRow[] = [];
  for (const id of ids) {
    const row = byId.get(id);
    if (row !== undefined) out.push(row);
  }
  return out;
}
