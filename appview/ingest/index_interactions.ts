/**
 * Indexes likes and reposts (`app.social.feed.like`, `app.social.feed.repost`): one row per
 * record, identity (did, rkey), and the exact denormalised counter on the subject post.
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
import { didOfUri, type NotificationKind, type Notifier } from "./notify.ts";
import { type CollectionIndexer, type PutInput, type RemoveInput, strongRef } from "./types.ts";

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

  constructor(db: DatabaseSync, kind: InteractionKind, notifier: Notifier) {
    const { table, counter } = kind;
    this.#kind = kind;
    this.#insert = db.prepare(
      `INSERT OR IGNORE INTO ${table} (did, rkey, subject_uri, subject_cid, created_at,
         indexed_at) VALUES (?, ?, ?, ?, ?, ?)`,
    );
    this.#delete = db.prepare(
      `DELETE FROM ${table} WHERE did = ? AND rkey = ? RETURNING subject_uri`,
    );
    this.#increment = db.prepare(`UPDATE posts SET ${counter} = ${counter} + 1 WHERE uri = ?`);
    this.#decrement = db.prepare(
      `UPDATE posts SET ${counter} = ${counter} - 1 WHERE uri = ? AND ${counter} > 0`,
    );
    this.#notifier = notifier;
  }

  put(input: PutInput): string | null {
    const { op, uri, value, now } = input;
    const subject = strongRef(value.subject);
    const createdAt = value.createdAt;
    if (subject === null || typeof createdAt !== "string") return "Record has no subject";
    // An update may point elsewhere: drop the old row (and its count) before inserting.
    if (op.action === "update") this.remove(input);
    const inserted = this.#insert.run(op.did, op.rkey, subject.uri, subject.cid, createdAt, now);
    if (inserted.changes !== 1) return null;
    this.#increment.run(subject.uri);
    const recipient = didOfUri(subject.uri);
    if (recipient !== null) {
      this.#notifier.notify({
        kind: this.#kind.notification,
        recipientDid: recipient,
        authorDid: op.did,
        subjectUri: subject.uri,
        recordUri: uri,
        createdAt,
        indexedAt: now,
      });
    }
    return null;
  }

  remove({ op }: { op: RemoveInput["op"] }): void {
    const row = this.#delete.get(op.did, op.rkey) as { subject_uri: string } | undefined;
    if (row !== undefined) this.#decrement.run(row.subject_uri);
  }
}
