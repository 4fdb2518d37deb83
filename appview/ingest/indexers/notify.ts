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
 *   makes an unlike + relike (or a redelivered commit) create nothing new. The subject is keyed
 *   by its record key alone: a like's subject is always a post of the recipient, a reply's
 *   subject a post of its author, so (recipient, kind, author, rkey) names one subject.
 *
 * @module
 */

import type { DatabaseSync, StatementSync } from "node:sqlite";

/** Notification kinds the write path emits (spec 2.7). */
export type NotificationKind = "like" | "repost" | "follow" | "reply";

// ?1 recipient id, ?2 kind, ?3 author id, ?4 author DID, ?5 subject URI, ?6 subject author id,
// ?7 subject rkey, ?8 record URI, ?9 created, ?10 indexed, ?11 recipient DID.
const INSERT_NOTIFICATION = `
INSERT OR IGNORE INTO notifications (recipient, kind, author, author_did, subject_uri,
  subject_author, subject_rkey, record_uri, created_at, indexed_at)
SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10
WHERE ?1 <> ?3 AND (
  EXISTS (SELECT 1 FROM profiles WHERE did = ?11)
  OR EXISTS (SELECT 1 FROM posts WHERE author = ?1)
)`;

/** One notification to emit. */
export interface NotificationInput {
  kind: NotificationKind;
  recipientDid: string;
  /** Interned id of `recipientDid` (the caller resolved it for its own rows). */
  recipientId: number;
  authorDid: string;
  /** Interned id of `authorDid`. */
  authorId: number;
  /**
   * The liked/reposted post (the recipient's), the reply itself (the author's), or null for a
   * follow. A post URI with a DID authority (the caller checked).
   */
  subject: { uri: string; rkey: string } | null;
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
    const { recipientId: recipient, authorId: author, subject } = n;
    const result = this.#insert.run(
      recipient,
      n.kind,
      author,
      n.authorDid,
      subject === null ? null : subject.uri,
      // Spec 2.7: a like's or repost's subject is the recipient's post; a reply's, the reply.
      subject === null ? null : n.kind === "reply" ? author : recipient,
      subject === null ? null : subject.rkey,
      n.recordUri,
      n.createdAt,
      n.indexedAt,
      n.recipientDid,
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
