/**
 * Indexes follows (`app.social.graph.follow`, spec 2.11): identity (follower, subject), with the
 * record key stored so a delete event (did, rkey) resolves to the row. Follower and following
 * counts on the profile rows move only when a row is really inserted or deleted, so they stay
 * exact however often an op is redelivered.
 *
 * - A second follow record for the same subject adds no row; the newest rkey is kept.
 * - Create or update with an rkey that held another subject first removes that row (a record key
 *   names one record at a time).
 * - Delete is one statement: `DELETE ... WHERE follower = ? AND rkey = ? RETURNING subject`;
 *   finding nothing (stale rkey, already deleted, an old row without rkey) is a no-op.
 * - The `follow` notification (subject null) goes to the followed DID; unfollow keeps it.
 *
 * @module
 */

import type { DatabaseSync, StatementSync } from "node:sqlite";
import type { ActorIds } from "./actors.ts";
import type { ProfileCounters } from "./index_profiles.ts";
import type { Notifier } from "./notify.ts";
import type { CollectionIndexer, PutInput, RemoveInput } from "../types.ts";

/** The follow indexer; statements are prepared once. */
export class FollowIndexer implements CollectionIndexer {
  readonly #insert: StatementSync;
  readonly #setRkey: StatementSync;
  readonly #deleteOther: StatementSync;
  readonly #deleteByRkey: StatementSync;
  readonly #counters: ProfileCounters;
  readonly #notifier: Notifier;
  readonly #actors: ActorIds;

  constructor(
    db: DatabaseSync,
    actors: ActorIds,
    counters: ProfileCounters,
    notifier: Notifier,
  ) {
    this.#actors = actors;
    this.#insert = db.prepare(
      `INSERT INTO follows (follower, subject, rkey, created_at, indexed_at)
       VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`, // the PK or the (follower, rkey) key
    );
    this.#setRkey = db.prepare(
      "UPDATE follows SET rkey = ?3 WHERE follower = ?1 AND subject = ?2 AND rkey IS NOT ?3",
    );
    this.#deleteOther = db.prepare(
      `DELETE FROM follows WHERE follower = ?1 AND rkey = ?2 AND subject <> ?3
       RETURNING (SELECT did FROM actors WHERE id = subject) AS subject`,
    );
    this.#deleteByRkey = db.prepare(
      `DELETE FROM follows WHERE follower = ? AND rkey = ?
       RETURNING (SELECT did FROM actors WHERE id = subject) AS subject`,
    );
    this.#counters = counters;
    this.#notifier = notifier;
  }

  put({ op, uri, value, now }: PutInput): string | null {
    const subject = value.subject;
    const createdAt = value.createdAt;
    if (typeof subject !== "string" || typeof createdAt !== "string") {
      return "Record has no subject";
    }
    const follower = this.#actors.idOf(op.did);
    const followed = this.#actors.idOf(subject);
    if (!this.#insertRow(follower, followed, op.rkey, createdAt, now)) {
      // A known follow (keep the newest rkey), or the rkey named another subject: free the key
      // and retry once.
      const moved = this.#deleteOther.get(follower, op.rkey, followed) as
        | { subject: string }
        | undefined;
      if (moved !== undefined) this.#uncount(op.did, moved.subject);
      if (moved === undefined || !this.#insertRow(follower, followed, op.rkey, createdAt, now)) {
        this.#setRkey.run(follower, followed, op.rkey);
        return null;
      }
    }
    // Notify before counting: the follower-count row this follow creates must not make the
    // subject "already known" (spec 3.1) by itself.
    this.#notifier.notify({
      kind: "follow",
      recipientDid: subject,
      recipientId: followed,
      authorDid: op.did,
      authorId: follower,
      subject: null,
      recordUri: uri,
      createdAt,
      indexedAt: now,
    });
    this.#counters.increment(op.did, "following_count");
    this.#counters.increment(subject, "follower_count");
    return null;
  }

  remove({ op }: RemoveInput): void {
    const follower = this.#actors.find(op.did);
    if (follower === null) return;
    const row = this.#deleteByRkey.get(follower, op.rkey) as { subject: string } | undefined;
    if (row !== undefined) this.#uncount(op.did, row.subject);
  }

  #insertRow(follower: number, subject: number, rkey: string, createdAt: string, now: string) {
    return this.#insert.run(follower, subject, rkey, createdAt, now).changes === 1;
  }

  #uncount(follower: string, subject: string): void {
    this.#counters.decrement(follower, "following_count");
    this.#counters.decrement(subject, "follower_count");
  }
}
