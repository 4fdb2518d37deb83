/**
 * Blocks, mutes and inactive accounts on the read side (spec 4.2 rules 10-12). Filters are SQL
 * fragments evaluated per candidate row as `NOT EXISTS` seeks into `blocks_by_pair` (both
 * directions), the `mutes` primary key and the `inactive_actors` primary key, so a view keeps its
 * own index walk and its paging; a NULL viewer (no viewer given) matches no block or mute row, so
 * without a viewer only inactive accounts are hidden. Mutes (private, 4.2 rule 11) are stored and read
 * here too: written by `/api/mutes` only, never by the ingest path.
 *
 * @module
 */

import type { DatabaseSync, StatementSync } from "node:sqlite";
import { actorIdSql } from "../db/schema.ts";
import { type IdKey, TOP_TIME } from "./cursor.ts";
import { type ActorPage, actorPage, type ActorRow } from "./present.ts";

/** SQL, true when either of the accounts (interned id expressions) blocks the other. */
export function blockedSql(viewer: string, author: string): string {
  return `(EXISTS (SELECT 1 FROM blocks WHERE actor = ${viewer} AND subject = ${author})
    OR EXISTS (SELECT 1 FROM blocks WHERE actor = ${author} AND subject = ${viewer}))`;
}

/** SQL, true when `viewer` has muted `author` (interned id expressions). */
export function mutedSql(viewer: string, author: string): string {
  return `EXISTS (SELECT 1 FROM mutes WHERE actor = ${viewer} AND subject = ${author})`;
}

/** SQL, true when the account `author` (an interned id expression) is inactive (rule 12). */
export function inactiveSql(author: string): string {
  return `EXISTS (SELECT 1 FROM inactive_actors WHERE actor = ${author})`;
}

/** SQL, true when `author` is inactive or either account blocks the other (rules 10, 12). */
export function unavailableSql(viewer: string, author: string): string {
  return `(${inactiveSql(author)} OR ${blockedSql(viewer, author)})`;
}

/**
 * SQL, true when a block (either way) or a mute of `viewer` (an interned id expression) exists,
 * or any account is inactive.
 */
export function involvedSql(viewer: string): string {
  return `(EXISTS (SELECT 1 FROM blocks WHERE actor = ${viewer})
    OR EXISTS (SELECT 1 FROM blocks WHERE subject = ${viewer})
    OR EXISTS (SELECT 1 FROM mutes WHERE actor = ${viewer})
    OR EXISTS (SELECT 1 FROM inactive_actors))`;
}

/**
 * SQL, true when `author`'s content is hidden from `viewer` in the timeline and notifications:
 * inactive, blocked either way or muted.
 */
export function hiddenSql(viewer: string, author: string): string {
  return `(${unavailableSql(viewer, author)} OR ${mutedSql(viewer, author)})`;
}

/** Most accounts one member can mute. */
export const MAX_MUTES = 10_000;

/** A page of the accounts a member muted. */
export type MutePage = ActorPage;

/** Block checks and the mute list, with statements prepared once. */
export class SafetyView {
  readonly #blocked: StatementSync;
  readonly #inactive: StatementSync;
  readonly #intern: StatementSync;
  readonly #mute: StatementSync;
  readonly #unmute: StatementSync;
  readonly #muteCount: StatementSync;
  readonly #mutes: StatementSync;
  readonly #isMuted: StatementSync;

  constructor(db: DatabaseSync) {
    this.#blocked = db.prepare(
      `SELECT ${blockedSql(actorIdSql("?1"), actorIdSql("?2"))} AS v`,
    );
    this.#inactive = db.prepare(`SELECT ${inactiveSql(actorIdSql("?1"))} AS v`);
    this.#intern = db.prepare("INSERT OR IGNORE INTO actors (did) VALUES (?)");
    this.#mute = db.prepare(
      `INSERT INTO mutes (actor, subject, created_at)
       VALUES (${actorIdSql("?1")}, ${actorIdSql("?2")}, ?3) ON CONFLICT DO NOTHING`,
    );
    this.#unmute = db.prepare(
      `DELETE FROM mutes WHERE actor = ${actorIdSql("?1")} AND subject = ${actorIdSql("?2")}`,
    );
    this.#muteCount = db.prepare(
      `SELECT count(*) AS n FROM mutes WHERE actor = ${actorIdSql("?")}`,
    );
    this.#mutes = db.prepare(
      `SELECT x.did, a.handle, a.display_name, a.avatar_cid, m.created_at, m.subject
       FROM mutes m JOIN actors x ON x.id = m.subject LEFT JOIN profiles a ON a.did = x.did
       WHERE m.actor = ${actorIdSql("?1")} AND (m.created_at, m.subject) < (?2, ?3)
       ORDER BY m.created_at DESC, m.subject DESC LIMIT ?4`,
    );
    this.#isMuted = db.prepare(
      `SELECT ${mutedSql(actorIdSql("?1"), actorIdSql("?2"))} AS v`,
    );
  }

  /** Whether either account blocks the other; false when `viewerDid` is null. */
  blocked(viewerDid: string | null, otherDid: string): boolean {
    if (viewerDid === null || viewerDid === otherDid) return false;
    return (this.#blocked.get(viewerDid, otherDid) as { v: number }).v === 1;
  }

  /** Whether the account `did` is inactive (taken down, deactivated; spec 4.2 rule 12). */
  inactive(did: string): boolean {
    return (this.#inactive.get(did) as { v: number }).v === 1;
  }

  /**
   * Whether `did`'s content is unavailable to `viewerDid` (null: no viewer): the account is
   * inactive, or either blocks the other.
   */
  unavailable(viewerDid: string | null, did: string): boolean {
    return this.inactive(did) || this.blocked(viewerDid, did);
  }

  /**
   * Mutes `subjectDid` for `did` at `now`; true when newly muted, false when it already was.
   * Null when `did` has {@link MAX_MUTES} mutes already.
   */
  mute(did: string, subjectDid: string, now: string): boolean | null {
    if ((this.#muteCount.get(did) as { n: number }).n >= MAX_MUTES) return null;
    this.#intern.run(did);
    this.#intern.run(subjectDid);
    return this.#mute.run(did, subjectDid, now).changes === 1;
  }

  /** Whether `did` has muted `subjectDid` (one primary-key lookup). */
  muted(did: string, subjectDid: string): boolean {
    return (this.#isMuted.get(did, subjectDid) as { v: number }).v === 1;
  }

  /** Unmutes; true when `subjectDid` was muted. */
  unmute(did: string, subjectDid: string): boolean {
    return this.#unmute.run(did, subjectDid).changes === 1;
  }

  /** The accounts `did` muted, newest mute first. */
  mutes(did: string, opts: { limit: number; cursor: IdKey | null }): MutePage {
    const [time, last] = opts.cursor ?? [TOP_TIME, Number.MAX_SAFE_INTEGER];
    const rows = this.#mutes.all(did, time, last, opts.limit + 1) as unknown as (ActorRow & {
      created_at: string;
      subject: number;
    })[];
    return actorPage(rows, opts.limit, (end) => [end.created_at, end.subject]);
  }
}
