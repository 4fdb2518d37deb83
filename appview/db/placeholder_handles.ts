/**
 * The rows handle sync works on (`workers/handle_sync.ts`; spec 1.5, 4.3 rule 1): the authors of
 * posts whose handle is still the placeholder, and the time a resolution was last attempted for
 * them (`posts.handle_attempted_at`). Served by the partial index `posts_unknown_handle` (author,
 * handle_attempted_at); the worker walks authors in order of their interned id.
 *
 * @module
 */

import type { DatabaseSync, StatementSync } from "node:sqlite";
import { actorIdSql, PLACEHOLDER_HANDLE_SQL } from "./schema.ts";

/** An author due for a resolution: its interned id (the walk's key) and its DID. */
export interface DueAuthor {
  author: number;
  did: string;
}

/** Handle sync's statements, prepared once. */
export class PlaceholderHandles {
  readonly #db: DatabaseSync;
  readonly #selectAfter: StatementSync;
  readonly #selectUpTo: StatementSync;
  readonly #markAttempt: StatementSync;

  constructor(db: DatabaseSync) {
    this.#db = db;
    const select = (range: string) =>
      db.prepare(
        `SELECT author, min(did) AS did FROM posts
         WHERE ${PLACEHOLDER_HANDLE_SQL} AND ${range}
           AND (handle_attempted_at IS NULL OR handle_attempted_at <= ?2)
         GROUP BY author ORDER BY author LIMIT ?3`,
      );
    this.#selectAfter = select("author > ?1");
    this.#selectUpTo = select("author <= ?1");
    this.#markAttempt = db.prepare(
      `UPDATE posts SET handle_attempted_at = ?2
       WHERE author = ${actorIdSql("?1")} AND ${PLACEHOLDER_HANDLE_SQL}`,
    );
  }

  /**
   * Up to `limit` authors whose id is above `after` (or, with `wrapped`, at most `after`) and
   * none of whose placeholder rows was attempted after `cutoff`, in id order.
   */
  due(after: number, cutoff: string, limit: number, wrapped = false): DueAuthor[] {
    const stmt = wrapped ? this.#selectUpTo : this.#selectAfter;
    return stmt.all(after, cutoff, limit) as unknown as DueAuthor[];
  }

  /** Records `at` as the attempt time of every placeholder row of `dids`, in one transaction. */
  markAttempted(dids: readonly string[], at: string): void {
    this.#db.exec("BEGIN IMMEDIATE");
    try {
      for (const did of dids) this.#markAttempt.run(did, at);
      this.#db.exec("COMMIT");
    } catch (e) {
      if (this.#db.isTransaction) this.#db.exec("ROLLBACK");
      throw e;
    }
  }
}
