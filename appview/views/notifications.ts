/**
 * Notifications of a recipient (spec 2.7, 3.1, 4.2 rules 6-7): newest first by (`indexed_at`,
 * `id`), hydrated in the same statement with the author's profile (handle, display name, avatar)
 * and the subject post's text; the unread count; and marking as read. Notifications by accounts
 * the recipient blocks, is blocked by or has muted, and by inactive accounts, are left out of the
 * list and the count (spec 4.2 rules 10-12), not deleted: unblocking, unmuting or reactivating
 * brings them back.
 *
 * @module
 */

import { actorIdSql } from "../db/schema.ts";
import type { DatabaseSync, StatementSync } from "node:sqlite";
import { type IdKey, TOP_TIME } from "./cursor.ts";
import type { NotificationRow } from "./present.ts";
import { hiddenSql, involvedSql } from "./safety.ts";

/** One page of notifications. */
export interface NotificationPage {
  rows: NotificationRow[];
  next: IdKey | null;
}

/** Reads and marks notifications with statements prepared once. */
export class NotificationView {
  readonly #list: StatementSync;
  readonly #count: StatementSync;
  readonly #countFiltered: StatementSync;
  readonly #involved: StatementSync;
  readonly #seenUpTo: StatementSync;
  readonly #seenAll: StatementSync;

  constructor(db: DatabaseSync) {
    this.#list = db.prepare(
      `SELECT n.id, n.kind, n.author_did, a.handle AS author_handle,
         a.display_name AS author_display_name, a.avatar_cid AS author_avatar_cid,
         n.subject_uri, s.text AS subject_text, n.created_at, n.indexed_at, n.read_at
       FROM notifications n
       LEFT JOIN profiles a ON a.did = n.author_did
       LEFT JOIN posts s ON s.author = n.subject_author AND s.rkey = n.subject_rkey
       WHERE n.recipient = ${actorIdSql("?1")} AND (n.indexed_at, n.id) < (?2, ?3)
         AND NOT ${hiddenSql("n.recipient", "n.author")}
       ORDER BY n.indexed_at DESC, n.id DESC LIMIT ?4`,
    );
    // The count is covered by `notifications_by_recipient`; the filtered one reads each unread
    // row's author, so it runs only for a member some block or mute concerns, or while any
    // account is inactive (spec 4.2 rule 12).
    this.#count = db.prepare(
      `SELECT count(*) AS n FROM notifications
       WHERE recipient = ${actorIdSql("?1")} AND read_at IS NULL`,
    );
    this.#countFiltered = db.prepare(
      `SELECT count(*) AS n FROM notifications
       WHERE recipient = ${actorIdSql("?1")} AND read_at IS NULL
         AND NOT ${hiddenSql("recipient", "author")}`,
    );
    this.#involved = db.prepare(`SELECT ${involvedSql(actorIdSql("?1"))} AS v`);
    this.#seenUpTo = db.prepare(
      `UPDATE notifications SET read_at = ?2
       WHERE recipient = ${actorIdSql("?1")} AND read_at IS NULL AND indexed_at <= ?3`,
    );
    this.#seenAll = db.prepare(
      `UPDATE notifications SET read_at = ?2
       WHERE recipient = ${actorIdSql("?1")} AND read_at IS NULL`,
    );
  }

  /** `limit` notifications of `did` below `cursor` (null: from the newest). */
  list(did: string, opts: { limit: number; cursor: IdKey | null }): NotificationPage {
    const [time, id] = opts.cursor ?? [TOP_TIME, 0];
    const rows = this.#list.all(did, time, id, opts.limit + 1) as unknown as NotificationRow[];
    const more = rows.length > opts.limit;
    if (more) rows.length = opts.limit;
    const last = rows[rows.length - 1];
    return { rows, next: more ? [last.indexed_at, last.id] : null };
  }

  /** Unread notifications of `did`. */
  unreadCount(did: string): number {
    const involved = (this.#involved.get(did) as { v: number }).v === 1;
    return ((involved ? this.#countFiltered : this.#count).get(did) as { n: number }).n;
  }

  /**
   * Spec 3.1, 4.2 rule 7: marks the unread notifications of `did` indexed at or before `seenAt`
   * (all unread ones when null) as read at `now`; returns how many rows changed.
   */
  markSeen(did: string, seenAt: string | null, now: string): number {
    const result = seenAt === null
      ? this.#seenAll.run(did, now)
      : this.#seenUpTo.run(did, now, seenAt);
    return Number(result.changes);
  }
}
