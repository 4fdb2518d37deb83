/**
 * Indexes blocks (`app.social.graph.block`, spec 2.14): one row per block record, keyed by
 * (blocker, rkey) so a delete event (did, rkey) resolves to its row. The read side hides each
 * account's content from the other while any row names the pair (spec 4.2 rule 10); nothing
 * else changes (follows, counters and notifications stay, so unblocking brings everything back).
 *
 * - Create and update upsert the row; applying the same record again changes nothing.
 * - A block of one's own DID is refused (it would hide the member's content from themselves).
 * - Delete is one statement by (blocker, rkey); a stale rkey is a no-op.
 *
 * @module
 */

import type { DatabaseSync, StatementSync } from "node:sqlite";
import type { ActorIds } from "./actors.ts";
import type { CollectionIndexer, PutInput, RemoveInput } from "../types.ts";

/** The block indexer; statements are prepared once. */
export class BlockIndexer implements CollectionIndexer {
  readonly #upsert: StatementSync;
  readonly #delete: StatementSync;
  readonly #actors: ActorIds;

  constructor(db: DatabaseSync, actors: ActorIds) {
    this.#actors = actors;
    this.#upsert = db.prepare(
      `INSERT INTO blocks (actor, rkey, subject, created_at, indexed_at) VALUES (?, ?, ?, ?, ?)
       ON CONFLICT (actor, rkey) DO UPDATE SET subject = excluded.subject,
         created_at = excluded.created_at
       WHERE subject IS NOT excluded.subject OR created_at IS NOT excluded.created_at`,
    );
    this.#delete = db.prepare("DELETE FROM blocks WHERE actor = ? AND rkey = ?");
  }

  put({ op, value, now }: PutInput): string | null {
    const subject = value.subject;
    const createdAt = value.createdAt;
    if (typeof subject !== "string" || typeof createdAt !== "string") {
      return "Record has no subject";
    }
    if (subject === op.did) return `Record blocks its own author: ${subject}`;
    const blocker = this.#actors.idOf(op.did);
    this.#upsert.run(blocker, op.rkey, this.#actors.idOf(subject), createdAt, now);
    return null;
  }

  remove({ op }: RemoveInput): void {
    const blocker = this.#actors.find(op.did);
    if (blocker !== null) this.#delete.run(blocker, op.rkey);
  }
}
