/**
 * Notifications on PostgreSQL (appview/views/notifications.ts): the list as one hydrated
 * statement, and the unread count as one statement that picks the covered count or the filtered
 * one by the same test as SQLite (PostgreSQL runs only the `CASE` branch it takes).
 *
 * @module
 */

import { actorIdSql } from "../../db/schema.ts";
import { type IdKey, TOP_TIME } from "../cursor.ts";
import type { NotificationPage } from "../notifications.ts";
import type { NotificationRow } from "../present.ts";
import { hiddenSql, involvedSql } from "../safety.ts";
import { execute, type PgClient, queryRow, queryRows } from "./query.ts";

const RECIPIENT = actorIdSql("$1");

const LIST = `SELECT n.id, n.kind, n.author_did, a.handle AS author_handle,
    a.display_name AS author_display_name, a.avatar_cid AS author_avatar_cid,
    n.subject_uri, s.text AS subject_text, n.created_at, n.indexed_at, n.read_at
  FROM notifications n
  LEFT JOIN profiles a ON a.did = n.author_did
  LEFT JOIN posts s ON s.author = n.subject_author AND s.rkey = n.subject_rkey
  WHERE n.recipient = ${RECIPIENT} AND (n.indexed_at, n.id) < ($2, $3)
    AND NOT ${hiddenSql("n.recipient", "n.author")}
  ORDER BY n.indexed_at DESC, n.id DESC LIMIT $4`;
const UNREAD = `SELECT CASE WHEN ${involvedSql(RECIPIENT)}
    THEN (SELECT count(*) FROM notifications
      WHERE recipient = ${RECIPIENT} AND read_at IS NULL
        AND NOT ${hiddenSql("recipient", "author")})
    ELSE (SELECT count(*) FROM notifications
      WHERE recipient = ${RECIPIENT} AND read_at IS NULL) END::int AS n`;
const SEEN_UP_TO = `UPDATE notifications SET read_at = $2
  WHERE recipient = ${RECIPIENT} AND read_at IS NULL AND indexed_at <= $3`;
const SEEN_ALL = `UPDATE notifications SET read_at = $2
  WHERE recipient = ${RECIPIENT} AND read_at IS NULL`;

/** Reads and marks notifications. */
export class PgNotificationView {
  readonly #sql: PgClient;

  constructor(sql: PgClient) {
    this.#sql = sql;
  }

  /** `limit` notifications of `did` below `cursor` (null: from the newest). */
  async list(
    did: string,
    opts: { limit: number; cursor: IdKey | null },
  ): Promise<NotificationPage> {
    const [time, id] = opts.cursor ?? [TOP_TIME, 0];
    const rows = await queryRows<NotificationRow>(this.#sql, LIST, [did, time, id, opts.limit + 1]);
    const more = rows.length > opts.limit;
    if (more) rows.length = opts.limit;
    const last = rows[rows.length - 1];
    return { rows, next: more ? [last.indexed_at, last.id] : null };
  }

  /** Unread notifications of `did`. */
  async unreadCount(did: string): Promise<number> {
    return (await queryRow<{ n: number }>(this.#sql, UNREAD, [did]))!.n;
  }

  /**
   * Spec 3.1, 4.2 rule 7: marks the unread notifications of `did` indexed at or before `seenAt`
   * (all unread ones when null) as read at `now`; returns how many rows changed.
   */
  async markSeen(did: string, seenAt: string | null, now: string): Promise<number> {
    return seenAt === null
      ? await execute(this.#sql, SEEN_ALL, [did, now])
      : await execute(this.#sql, SEEN_UP_TO, [did, now, seenAt]);
  }
}
