/**
 * Notification emission (spec 3.1, 6.5): one prepared `INSERT OR IGNORE ... SELECT ... WHERE`
 * that decides everything inside SQLite, in the caller's transaction (the same one as the
 * like/repost counter change):
 * - never to oneself (actor equals recipient);
 * - only to a recipient already known to the index (spec 3.1: "has a profile row or a post
 *   row"), as it was before the op being applied: callers notify before any counter update
 *   that could create the recipient's profile row, so being followed does not by itself make a
 *   DID known, while an account that has followed, posted or been named by a handle event is;
 * - at most one per (recipient, kind, author, subject): the unique index `notifications_dedupe`
 *   makes an unlike + relike (or a redelivered commit) create nothing new.
 *
 * @module
 */

import type { DatabaseSync, StatementSync } from "node:sqlite";

/** Notification kinds the write path emits (spec 2.7). */
export type NotificationKind = "like" | "repost" | "follow" | "reply";

const INSERT_NOTIFICATION = `
INSERT OR IGNORE INTO notifications
  (recipient_did, kind, author_did, subject_uri, record_uri, created_at, indexed_at)
SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7
WHERE ?1 <> ?3 AND (
  EXISTS (SELECT 1 FROM posts WHERE did = ?1)
  OR EXISTS (SELECT 1 FROM profiles WHERE did = ?1)
)`;

/** One notification to emit. */
export interface NotificationInput {
  kind: NotificationKind;
  recipientDid: string;
  authorDid: string;
  /** The liked/reposted post, the reply's own URI, or null for a follow. */
  subjectUri: string | null;
  /** URI of the record that caused it. */
  recordUri: string;
  /** The record's `createdAt`. */
  createdAt: string;
  /** Indexing time (ISO 8601). */
  indexedAt: string;
}

/** Emits notifications through one prepared statement. */
export class Notifier {
  readonly #insert: StatementSync;

  constructor(db: DatabaseSync) {
    this.#insert = db.prepare(INSERT_NOTIFICATION);
  }

  /** Creates the notification when the rules allow it; returns whether a row was created. */
  notify(n: NotificationInput): boolean {
    const result = this.#insert.run(
      n.recipientDid,
      n.kind,
      n.authorDid,
      n.subjectUri,
      n.recordUri,
      n.createdAt,
      n.indexedAt,
    );
    return result.changes === 1;
  }
}

/**
 * Returns the DID authority of a record URI (`at://<did>/...`), or null when the authority is not
 * a DID (a handle authority cannot name a recipient without a lookup). The URI was validated.
 */
export function didOfUri(uri: string): string | null {
  if (!uri.startsWith("at://did:")) return null;
  const end = uri.indexOf("/", 5);
  return end === -1 ? uri.slice(5) : uri.slice(5, end);
}
