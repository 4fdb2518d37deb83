/**
 * Account status (spec 4.2 rule 12, issue 37): an inactive account (taken down, deactivated, ...)
 * has one row in `inactive_actors`, keyed by its interned id, which the read side seeks per
 * candidate row (`NOT EXISTS`, `views/safety.ts`) to hide its content from every view. Nothing
 * else changes (posts, follows, counters and notifications stay), so an active status, which
 * deletes the row, brings everything back.
 *
 * - Inactive upserts the row (a new status replaces the old); the same op again changes nothing.
 * - Active deletes it; an account with no row is a no-op.
 * - `deleted` is different: the account is gone for good, so every row of it goes and the counters
 *   it moved are corrected (`purge_actor.ts`); the same op again changes nothing.
 *
 * @module
 */

import type { DatabaseSync, StatementSync } from "node:sqlite";
import type { AccountStatusOp } from "../../../shared/ops.ts";
import type { ActorIds } from "./actors.ts";
import { ActorPurge } from "./purge_actor.ts";
import type { SearchIndexWrites } from "./search_writes.ts";

/** The `#account` status of a deleted account (atproto `com.atproto.sync.subscribeRepos`). */
export const DELETED_STATUS = "deleted";

/** Writes account status ops; statements are prepared once. */
export class AccountStatusIndexer {
  readonly #upsert: StatementSync;
  readonly #delete: StatementSync;
  readonly #actors: ActorIds;
  readonly #purge: ActorPurge;

  constructor(db: DatabaseSync, actors: ActorIds, search: SearchIndexWrites) {
    this.#actors = actors;
    this.#purge = new ActorPurge(db, actors, search);
    this.#upsert = db.prepare(
      `INSERT INTO inactive_actors (actor, status, updated_at) VALUES (?, ?, ?)
       ON CONFLICT (actor) DO UPDATE SET status = excluded.status, updated_at = excluded.updated_at
       WHERE status IS NOT excluded.status`,
    );
    this.#delete = db.prepare("DELETE FROM inactive_actors WHERE actor = ?");
  }

  /** Applies `op` at `now`. */
  apply(op: AccountStatusOp, now: string): void {
    if (op.active) {
      const id = this.#actors.find(op.did);
      if (id !== null) this.#delete.run(id);
      return;
    }
    if (op.status === DELETED_STATUS) {
      this.#purge.purge(op.did);
      return;
    }
    this.#upsert.run(this.#actors.idOf(op.did), op.status, now);
  }
}
