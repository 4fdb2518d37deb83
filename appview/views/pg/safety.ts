/**
 * Blocks, mutes and inactive accounts on PostgreSQL (spec 4.2 rules 10-12): the filters are the
 * SQLite views' SQL fragments (appview/views/safety.ts), which are plain SQL that PostgreSQL runs
 * as the same `NOT EXISTS` index probes; this class answers the single checks and keeps the mute
 * list.
 *
 * @module
 */

import { actorIdSql } from "../../db/schema.ts";
import { type IdKey, TOP_TIME } from "../cursor.ts";
import { type ActorPage, actorPage, type ActorRow } from "../present.ts";
import { blockedSql, inactiveSql, MAX_MUTES, mutedSql, type MutePage } from "../safety.ts";
import { execute, type PgClient, queryRow, queryRows } from "./query.ts";

const ACTOR_1 = actorIdSql("$1");
const ACTOR_2 = actorIdSql("$2");

const BLOCKED = `SELECT ${blockedSql(ACTOR_1, ACTOR_2)} AS v`;
const INACTIVE = `SELECT ${inactiveSql(ACTOR_1)} AS v`;
const UNAVAILABLE = `SELECT ${inactiveSql(ACTOR_2)} OR ${blockedSql(ACTOR_1, ACTOR_2)} AS v`;
// The mute count, and both accounts interned (in DID order, so two of these never wait on each
// other) only while under the limit: data-modifying CTEs run even though nothing reads them.
const COUNT_AND_INTERN = `WITH n AS (SELECT count(*)::int AS n FROM mutes WHERE actor = ${ACTOR_1}),
  interned AS (INSERT INTO actors (did)
    SELECT d FROM unnest($2::text[]) AS d WHERE (SELECT n FROM n) < $3 ORDER BY d
    ON CONFLICT DO NOTHING)
  SELECT n FROM n`;
const MUTE = `INSERT INTO mutes (actor, subject, created_at)
  VALUES (${ACTOR_1}, ${ACTOR_2}, $3) ON CONFLICT DO NOTHING`;
const UNMUTE = `DELETE FROM mutes WHERE actor = ${ACTOR_1} AND subject = ${ACTOR_2}`;
const MUTES = `SELECT x.did, a.handle, a.display_name, a.avatar_cid, m.created_at, m.subject
  FROM mutes m JOIN actors x ON x.id = m.subject LEFT JOIN profiles a ON a.did = x.did
  WHERE m.actor = ${ACTOR_1} AND (m.created_at, m.subject) < ($2, $3)
  ORDER BY m.created_at DESC, m.subject DESC LIMIT $4`;
const IS_MUTED = `SELECT ${mutedSql(ACTOR_1, ACTOR_2)} AS v`;

/** Block checks and the mute list (appview/views/safety.ts `SafetyView`). */
export class PgSafetyView {
  readonly #sql: PgClient;

  constructor(sql: PgClient) {
    this.#sql = sql;
  }

  /** Whether either account blocks the other; false when `viewerDid` is null. */
  async blocked(viewerDid: string | null, otherDid: string): Promise<boolean> {
    if (viewerDid === null || viewerDid === otherDid) return false;
    return await this.#flag(BLOCKED, [viewerDid, otherDid]);
  }

  /** Whether the account `did` is inactive (taken down, deactivated; spec 4.2 rule 12). */
  async inactive(did: string): Promise<boolean> {
    return await this.#flag(INACTIVE, [did]);
  }

  /**
   * Whether `did`'s content is unavailable to `viewerDid` (null: no viewer): the account is
   * inactive, or either blocks the other. One statement.
   */
  async unavailable(viewerDid: string | null, did: string): Promise<boolean> {
    if (viewerDid === null || viewerDid === did) return await this.inactive(did);
    return await this.#flag(UNAVAILABLE, [viewerDid, did]);
  }

  /**
   * Mutes `subjectDid` for `did` at `now`; true when newly muted, false when it already was.
   * Null when `did` has {@link MAX_MUTES} mutes already.
   */
  async mute(did: string, subjectDid: string, now: string): Promise<boolean | null> {
    const dids = [...new Set([did, subjectDid])].sort();
    const counted = await queryRow<{ n: number }>(this.#sql, COUNT_AND_INTERN, [
      did,
      dids,
      MAX_MUTES,
    ]);
    if (counted!.n >= MAX_MUTES) return null;
    return await execute(this.#sql, MUTE, [did, subjectDid, now]) === 1;
  }

  /** Whether `did` has muted `subjectDid` (one primary-key lookup). */
  async muted(did: string, subjectDid: string): Promise<boolean> {
    return await this.#flag(IS_MUTED, [did, subjectDid]);
  }

  /** Unmutes; true when `subjectDid` was muted. */
  async unmute(did: string, subjectDid: string): Promise<boolean> {
    return await execute(this.#sql, UNMUTE, [did, subjectDid]) === 1;
  }

  /** The accounts `did` muted, newest mute first. */
  async mutes(did: string, opts: { limit: number; cursor: IdKey | null }): Promise<MutePage> {
    const [time, last] = opts.cursor ?? [TOP_TIME, Number.MAX_SAFE_INTEGER];
    const rows = await queryRows<ActorRow & { created_at: string; subject: number }>(
      this.#sql,
      MUTES,
      [did, time, last, opts.limit + 1],
    );
    return actorPage(rows, opts.limit, (end) => [end.created_at, end.subject]) satisfies ActorPage;
  }

  async #flag(text: string, params: unknown[]): Promise<boolean> {
    return (await queryRow<{ v: boolean }>(this.#sql, text, params))!.v;
  }
}
