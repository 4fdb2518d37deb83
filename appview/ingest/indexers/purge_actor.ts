/**
 * A deleted account (spec 4.2 rule 12, 6.2 rule 7, issue 37: an `account_status` op with status
 * `deleted`) leaves the index: every row naming it goes, and every counter it moved elsewhere is
 * corrected, in the op's transaction:
 *
 * - its likes and reposts, each taking one off its subject post's counter (set-based: one UPDATE
 *   over the posts it touched, by their keys);
 * - its follows both ways, each taking one off the other account's follower or following count;
 * - its posts and their full-text rows, and the likes and reposts of its posts by others;
 * - notifications to and from it, blocks and mutes either way, its profile row and its
 *   `inactive_actors` row.
 *
 * Kept: its `actors` row (the interned id, which other connections may hold in their caches; no
 * row refers to it any more) and its `repo_revs` row (the last applied rev, so a rewound stream's
 * older commits of the account stay gated out). An account the index never saw, or one already
 * purged, changes nothing: a replay is a no-op.
 *
 * Notifications from the account are found by a scan (no index leads with their author: it would
 * cost every notification a further B-tree write); deletions are rare.
 *
 * @module
 */

import type { DatabaseSync, StatementSync } from "node:sqlite";
import type { ActorIds } from "./actors.ts";
import type { SearchIndexWrites } from "./search_writes.ts";

const counterFix = (table: "likes" | "reposts", counter: "like_count" | "repost_count") => `
UPDATE posts SET ${counter} = max(0, ${counter} - (
  SELECT count(*) FROM ${table} t
  WHERE t.actor = ?1 AND t.subject_author = posts.author AND t.subject_rkey = posts.rkey))
WHERE id IN (
  SELECT p.id FROM ${table} t JOIN posts p ON p.author = t.subject_author AND p.rkey = t.subject_rkey
  WHERE t.actor = ?1)`;

/** Removes every row of a deleted account; statements are prepared once. */
export class ActorPurge {
  readonly #actors: ActorIds;
  readonly #search: SearchIndexWrites;
  readonly #before: StatementSync[];
  readonly #posts: StatementSync;
  readonly #after: StatementSync[];
  readonly #profile: StatementSync;

  constructor(db: DatabaseSync, actors: ActorIds, search: SearchIndexWrites) {
    this.#actors = actors;
    this.#search = search;
    this.#before = [
      counterFix("likes", "like_count"),
      counterFix("reposts", "repost_count"),
      `UPDATE profiles SET follower_count = follower_count - 1
       WHERE follower_count > 0 AND did IN (
         SELECT a.did FROM follows f JOIN actors a ON a.id = f.subject
         WHERE f.follower = ?1 AND f.subject <> ?1)`,
      `UPDATE profiles SET following_count = following_count - 1
       WHERE following_count > 0 AND did IN (
         SELECT a.did FROM follows f JOIN actors a ON a.id = f.follower
         WHERE f.subject = ?1 AND f.follower <> ?1)`,
    ].map((sql) => db.prepare(sql));
    this.#posts = db.prepare("DELETE FROM posts WHERE author = ? RETURNING id");
    this.#after = [
      "DELETE FROM likes WHERE actor = ?1",
      "DELETE FROM likes WHERE subject_author = ?1",
      "DELETE FROM reposts WHERE actor = ?1",
      "DELETE FROM reposts WHERE subject_author = ?1",
      "DELETE FROM follows WHERE follower = ?1",
      "DELETE FROM follows WHERE subject = ?1",
      "DELETE FROM notifications WHERE recipient = ?1",
      "DELETE FROM notifications WHERE author = ?1",
      "DELETE FROM blocks WHERE actor = ?1",
      "DELETE FROM blocks WHERE subject = ?1",
      "DELETE FROM mutes WHERE actor = ?1",
      "DELETE FROM mutes WHERE subject = ?1",
      "DELETE FROM inactive_actors WHERE actor = ?1",
    ].map((sql) => db.prepare(sql));
    this.#profile = db.prepare("DELETE FROM profiles WHERE did = ?");
  }

  /** Removes every row of `did` (module comment). Call inside the op's transaction. */
  purge(did: string): void {
    this.#profile.run(did);
    const id = this.#actors.find(did);
    if (id === null) return;
    for (const statement of this.#before) statement.run(id);
    for (const row of this.#posts.all(id) as { id: number }[]) this.#search.remove(row.id);
    for (const statement of this.#after) statement.run(id);
  }
}
