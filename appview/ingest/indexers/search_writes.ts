/**
 * Writes to the full-text index of posts (`posts_fts`), deferred to the end of the write path's
 * transaction.
 *
 * Why deferred: FTS5 keeps the terms of rows inserted in a transaction in memory and writes
 * them out as one new segment at COMMIT. It writes them out early, as a small segment of its
 * own, whenever another statement opens a statement journal (an `INSERT ... SELECT` upsert, a
 * multi-row `UPDATE`, a `DELETE` of a post) and whenever a row older than the last one written
 * is deleted. With inserts interleaved with the other ops, that happened for about one op in
 * thirty: hundreds of tiny segments per transaction, each merged again, which made COMMIT and
 * the ops that triggered them several times slower (measured with the stream benchmark).
 * Queued here, the index sees one batch per transaction: deletes in ascending rowid order, then
 * inserts in ascending rowid order, so FTS5 writes a single segment.
 *
 * Only the net effect per rowid is written: a post inserted and deleted in the same
 * transaction never reaches the index; a post updated twice is indexed with its last text.
 *
 * @module
 */

import type { DatabaseSync, StatementSync } from "node:sqlite";

/** What the transaction did to one rowid of the index. */
interface Pending {
  /** The row was in the index before the transaction (the first change was a delete). */
  readonly existed: boolean;
  /** Text to index at the end; null when the row ends up absent. */
  text: string | null;
}

/** Queued `posts_fts` writes of the open transaction (one writer connection). */
export class SearchIndexWrites {
  readonly #insert: StatementSync;
  readonly #delete: StatementSync;
  /** By rowid (as a number: `lastInsertRowid` may be a bigint, ids read back are numbers). */
  readonly #pending = new Map<number, Pending>();

  constructor(db: DatabaseSync) {
    this.#insert = db.prepare("INSERT INTO posts_fts (rowid, text) VALUES (?, ?)");
    this.#delete = db.prepare("DELETE FROM posts_fts WHERE rowid = ?");
  }

  /** Queues indexing `text` as the text of post `rowid` (a new post, or after {@link remove}). */
  index(rowid: number | bigint, text: string): void {
    const id = Number(rowid);
    const entry = this.#pending.get(id);
    if (entry === undefined) this.#pending.set(id, { existed: false, text });
    else entry.text = text;
  }

  /** Queues removing post `rowid`, which is in the index or was queued by {@link index}. */
  remove(rowid: number | bigint): void {
    const id = Number(rowid);
    const entry = this.#pending.get(id);
    if (entry === undefined) this.#pending.set(id, { existed: true, text: null });
    else entry.text = null;
  }

  /**
   * Writes the queued changes (inside the caller's transaction) and empties the queue. On an
   * error the queue is emptied too; the caller rolls back.
   */
  flush(): void {
    if (this.#pending.size === 0) return;
    const byId = [...this.#pending].sort((a, b) => a[0] - b[0]);
    try {
      for (const [id, { existed }] of byId) if (existed) this.#delete.run(id);
      for (const [id, { text }] of byId) if (text !== null) this.#insert.run(id, text);
    } finally {
      this.#pending.clear();
    }
  }

  /** Drops the queued changes (their transaction or savepoint was rolled back). */
  discard(): void {
    this.#pending.clear();
  }
}
