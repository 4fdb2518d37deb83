/**
 * Home timeline (spec 4.2 rules 1-2): the newest posts of the accounts the viewer follows, ordered
 * by (`indexed_at` desc, `uri` desc); the newest feed posts when the viewer follows nobody.
 *
 * Two skeleton strategies give the same list:
 * - per followee (spec 4.2 rule 1): the `limit`+1 newest posts of each followee below the cursor
 *   (index `posts_by_author`), merged and cut to `limit`+1. Correct because the global top N is a
 *   subset of the union of every followee's top N. Costs one index seek per followee, so it is the
 *   choice for viewers who follow few accounts.
 * - global scan: walk the global time index (`posts_by_time`) below the cursor and keep the posts
 *   whose author is followed, stopping at `limit`+1. The first `limit`+1 matches in global order
 *   are exactly the global top N, so it equals the per-followee merge; it reads about
 *   (`limit`+1) / (share of recent posts written by followees) rows, so it is the choice for
 *   viewers who follow many accounts. The walk is bounded; when it ends before filling the page
 *   (sparse followees, or the end of the list) the per-followee strategy answers instead.
 *
 * @module
 */

import type { DatabaseSync, StatementSync } from "node:sqlite";
import { COLLECTION_POST } from "../../shared/nsid.ts";
import { type TextKey, TOP_TIME } from "./cursor.ts";
import type { PostHydrator } from "./posts.ts";
import type { PostRow } from "./present.ts";

/** Skeleton strategy; `auto` picks per viewer by follow count. */
export type TimelineStrategy = "auto" | "per_followee" | "global_scan";

/** Follow count up to which `auto` merges per followee. */
export const PER_FOLLOWEE_MAX_FOLLOWS = 100;
/** The bounded global walk reads at most this many rows per row of the page. */
export const GLOBAL_SCAN_ROWS_PER_RESULT = 64;

/** One page of a timeline: rows in order and the key of the last one when more may follow. */
export interface TimelinePage {
  rows: PostRow[];
  next: TextKey | null;
}

interface SkeletonRow {
  id: number;
  indexed_at: string;
  uri: string;
}

/** Reads timelines with statements prepared once. */
export class TimelineView {
  readonly #posts: PostHydrator;
  readonly #hasFollows: StatementSync;
  readonly #followCount: StatementSync;
  readonly #perFollowee: StatementSync;
  readonly #globalScan: StatementSync;
  readonly #coldStart: StatementSync;
  readonly #scanRowsPerResult: number;

  /** `scanRowsPerResult` bounds the global walk (default {@link GLOBAL_SCAN_ROWS_PER_RESULT}). */
  constructor(db: DatabaseSync, posts: PostHydrator, opts: { scanRowsPerResult?: number } = {}) {
    this.#posts = posts;
    this.#scanRowsPerResult = opts.scanRowsPerResult ?? GLOBAL_SCAN_ROWS_PER_RESULT;
    this.#hasFollows = db.prepare("SELECT EXISTS (SELECT 1 FROM follows WHERE follower = ?) AS f");
    this.#followCount = db.prepare("SELECT following_count AS n FROM profiles WHERE did = ?");
    this.#perFollowee = db.prepare(
      `SELECT p.id, p.indexed_at, p.uri FROM follows f CROSS JOIN posts p
       WHERE f.follower = ?1 AND p.id IN (
         SELECT id FROM posts WHERE did = f.subject AND (indexed_at, uri) < (?2, ?3)
         ORDER BY indexed_at DESC, uri DESC LIMIT ?4)
       ORDER BY p.indexed_at DESC, p.uri DESC LIMIT ?4`,
    );
    this.#globalScan = db.prepare(
      `SELECT id, indexed_at, uri FROM (
         SELECT id, did, indexed_at, uri FROM posts INDEXED BY posts_by_time
         WHERE (indexed_at, uri) < (?2, ?3)
         ORDER BY indexed_at DESC, uri DESC LIMIT ?5)
       WHERE did IN (SELECT subject FROM follows WHERE follower = ?1)
       ORDER BY indexed_at DESC, uri DESC LIMIT ?4`,
    );
    this.#coldStart = db.prepare(
      `SELECT id, indexed_at, uri FROM posts INDEXED BY posts_by_time
       WHERE (indexed_at, uri) < (?1, ?2) AND collection = ?3
       ORDER BY indexed_at DESC, uri DESC LIMIT ?4`,
    );
  }

  /** The home timeline of `viewerDid`: `limit` posts below `cursor` (null: from the top). */
  home(
    viewerDid: string,
    opts: { limit: number; cursor: TextKey | null; strategy?: TimelineStrategy },
  ): TimelinePage {
    const [time, uri] = opts.cursor ?? [TOP_TIME, ""];
    const take = opts.limit + 1;
    let skeleton: SkeletonRow[];
    if (!(this.#hasFollows.get(viewerDid) as { f: number }).f) {
      skeleton = this.#coldStart.all(time, uri, COLLECTION_POST, take) as unknown as SkeletonRow[];
    } else {
      const strategy = opts.strategy ?? "auto";
      const perFollowee = strategy === "per_followee" ||
        (strategy === "auto" && this.#follows(viewerDid) <= PER_FOLLOWEE_MAX_FOLLOWS);
      skeleton = perFollowee ? [] : this.#scan(viewerDid, time, uri, take);
      if (skeleton.length < take) {
        skeleton = this.#perFollowee.all(viewerDid, time, uri, take) as unknown as SkeletonRow[];
      }
    }
    const more = skeleton.length > opts.limit;
    if (more) skeleton = skeleton.slice(0, opts.limit);
    const last = skeleton[skeleton.length - 1];
    return {
      rows: this.#posts.byIds(skeleton.map((s) => s.id)),
      next: more ? [last.indexed_at, last.uri] : null,
    };
  }

  #follows(viewerDid: string): number {
    const row = this.#followCount.get(viewerDid) as { n: number } | undefined;
    return row?.n ?? 0;
  }

  #scan(viewerDid: string, time: string, uri: string, take: number): SkeletonRow[] {
    return this.#globalScan.all(
      viewerDid,
      time,
      uri,
      take,
      Math.min(Number.MAX_SAFE_INTEGER, take * this.#scanRowsPerResult),
    ) as unknown as SkeletonRow[];
  }
}
