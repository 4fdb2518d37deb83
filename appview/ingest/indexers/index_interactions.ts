/**
 * Indexes likes and reposts (`app.social.feed.like`, `app.social.feed.repost`): one row per
 * record, identity (did, rkey), and the exact denormalised counter on the subject post.
 *
 * The subject must be a post URI with a DID authority (`at://did:.../app.social.feed.post/...`):
 * the row is keyed by the post's (author id, rkey), like the post itself; any other subject is
 * skipped as an invalid record (it could neither count towards a post nor notify anyone).
 *
 * The counter moves only when a row really changed: INSERT OR IGNORE, then +1 only if a row was
 * inserted; DELETE ... RETURNING, then -1 only if a row was deleted. A like of a post not indexed
 * yet is kept; the post's counter starts from the stored likes when it arrives (index_posts.ts).
 * The notification (spec 6.5) goes to the author of the subject post, created in the same
 * transaction as the counter change; deleting the like keeps it (unlike + relike: one row).
 *
 * @module
 */

import type { DatabaseSync, StatementSync } from "node:sqlite";
import type { ActorIds } from "./actors.ts";
import { postKeyOf } from "../../db/post_key.ts";
import type { NotificationKind, Notifier } from "./notify.ts";
import { type CollectionIndexer, type PutInput, type RemoveInput, strongRef } from "../types.ts";

/** Which of the two interaction tables an indexer writes. */
export interface InteractionKind {
  readonly table: "likes" | "reposts";
  readonly counter: "like_count" | "repost_count";
  readonly notification: NotificationKind;
}

/** Likes: `likes` table, `posts.like_count`, `like` notifications. */
export const LIKE_KIND: InteractionKind = Object.freeze({
  table: "likes",
  counter: "like_count",
  notification: "like",
});

/** Reposts: `reposts` table, `posts.repost_count`, `repost` notifications. */
export const REPOST_KIND: InteractionKind = Object.freeze({
  table: "reposts",
  counter: "repost_count",
  notification: "repost",
});

/** The like or repost indexer; statements are prepared once. */
export class InteractionIndexer implements CollectionIndexer {
  readonly #kind: InteractionKind;
  readonly #insert: StatementSync;
  readonly #delete: StatementSync;
  readonly #increment: StatementSync;
  readonly #decrement: StatementSync;
  readonly #notifier: Notifier;
  readonly #actors: ActorIds;

  constructor(db: DatabaseSync, kind: InteractionKind, actors: ActorIds, notifier: Notifier) {
    const { table, counter } = kind;
    this.#kind = kind;
    this.#actors = actors;
    this.#insert = db.prepare(
      `INSERT OR IGNORE INTO ${table} (actor, rkey, subject_author, subject_rkey, subject_cid,
         created_at, indexed_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
    );
    this.#delete = db.prepare(
      `DELETE FROM ${table} WHERE actor = ? AND rkey = ? RETURNING subject_author, subject_rkey`,
    );
    this.#increment = db.prepare(
      `UPDATE posts SET ${counter} = ${counter} + 1 WHERE author = ? AND rkey = ?`,
    );
    this.#decrement = db.prepare(
      `UPDATE posts SET ${counter} = ${counter} - 1 WHERE author = ? AND rkey = ? AND ${counter} > 0`,
    );
    this.#notifier = notifier;
  }

  put(input: PutInput): string | null {
    const { op, uri, value, now } = input;
    const subject = strongRef(value.subject);
    const createdAt = value.createdAt;
    if (subject === null || typeof createdAt !== "string") return "Record has no subject";
    const post = postKeyOf(subject.uri);
    if (post === null) return `Subject is not a post URI with a DID: ${subject.uri}`;
    // An update may point elsewhere: drop the old row (and its count) before inserting.
    if (op.action === "update") this.remove(input);
    const actor = this.#actors.idOf(op.did);
    const author = this.#actors.idOf(post.did);
    const inserted = this.#insert.run(
      actor,
      op.rkey,
      author,
      post.rkey,
      subject.cid,
      createdAt,
      now,
    );
    if (inserted.changes !== 1) return null;
    this.#increment.run(author, post.rkey);
    this.#notifier.notify({
      kind: this.#kind.notification,
      recipientDid: post.did,
      recipientId: author,
      authorDid: op.did,
      authorId: actor,
      subject: { uri: subject.uri, rkey: post.rkey },
      recordUri: uri,
      createdAt,
      indexedAt: now,
    });
    return null;
  }

  remove({ op }: { op: RemoveInput["op"] }): void {
    const actor = this.#actors.find(op.did);
    if (actor === null) return;
    const row = this.#delete.get(actor, op.rkey) as
      | { subject_author: number; subject_rkey: string }
      | undefined;
    if (row !== undefined) this.#decrement.run(row.subject_author, row.subject_rkey);
  }
}
