/**
 * Interned DIDs (schema version 5): the integer `actors.id` that stands for a DID in the randomly
 * keyed indexes of posts, likes, reposts, follows and notifications.
 *
 * Ids are assigned once and never change or disappear (no row of `actors` is ever deleted), so a
 * mapping read from the database stays true in every process. The cache in front of it is
 * per writer: an id assigned inside the open transaction is kept aside until that transaction
 * commits, so a rollback (of the transaction, or of one op's savepoint) cannot leave an id in the
 * cache that the database no longer has, and that SQLite would then give to another DID.
 *
 * @module
 */

import type { DatabaseSync, StatementSync } from "node:sqlite";

/** Cached DIDs before the cache is emptied (about 100 bytes each). */
export const ACTOR_CACHE_MAX = 200_000;

/** DID to `actors.id`, through a bounded cache. */
export class ActorIds {
  readonly #find: StatementSync;
  readonly #insert: StatementSync;
  #committed = new Map<string, number>();
  readonly #pending = new Map<string, number>();
  /** The DIDs of `#pending`, in order of assignment (for {@link undoTo}). */
  readonly #pendingOrder: string[] = [];

  constructor(db: DatabaseSync) {
    this.#find = db.prepare("SELECT id FROM actors WHERE did = ?");
    this.#insert = db.prepare("INSERT INTO actors (did) VALUES (?)");
  }

  /** The id of `did`, assigned now when it has none. Call inside a write transaction. */
  idOf(did: string): number {
    const known = this.find(did);
    if (known !== null) return known;
    // The connection's last rowid rather than RETURNING, which made SQLite build a result table
    // per insert: about 32 against 5.5 µs per new DID in the stream bench.
    const id = Number(this.#insert.run(did).lastInsertRowid);
    this.#pending.set(did, id);
    this.#pendingOrder.push(did);
    return id;
  }

  /** The id of `did`, or null when it has none (nothing to delete then: no row names it). */
  find(did: string): number | null {
    const cached = this.#committed.get(did) ?? this.#pending.get(did);
    if (cached !== undefined) return cached;
    const row = this.#find.get(did) as { id: number } | undefined;
    if (row === undefined) return null;
    this.#remember(did, row.id);
    return row.id;
  }

  /** A mark to {@link undoTo} when a savepoint taken now is rolled back. */
  mark(): number {
    return this.#pendingOrder.length;
  }

  /** The savepoint taken at `mark` rolled back: forget the ids assigned since. */
  undoTo(mark: number): void {
    for (const did of this.#pendingOrder.splice(mark)) this.#pending.delete(did);
  }

  /** The transaction that assigned the pending ids committed: they are now safe to keep. */
  commit(): void {
    for (const [did, id] of this.#pending) this.#remember(did, id);
    this.rollback();
  }

  /** The transaction rolled back: the ids it assigned no longer exist. */
  rollback(): void {
    this.#pending.clear();
    this.#pendingOrder.length = 0;
  }

  #remember(did: string, id: number): void {
    if (this.#committed.size >= ACTOR_CACHE_MAX) this.#committed = new Map();
    this.#committed.set(did, id);
  }
}
