/**
 * Home timeline (spec 4.2 rules 1-2): the newest posts of the accounts the viewer follows, ordered
 * by (`indexed_at` desc, `uri` desc); the newest feed posts when the viewer follows nobody.
 *
 * Two skeleton strategies give the same list:
 * - per followee (spec 4.2 rule 1), a threshold merge: first the newest `indexed_at` below the
 *   cursor of every followee (one covering seek each in `posts_by_author`, F rows); with T the
 *   `take`-th largest of these heads (`take` = `limit`+1), every post of the global top `take` has
 *   `indexed_at >= T` (the `take` followees whose head is >= T give `take` such posts), and only
 *   followees whose head is >= T can have one. So it reads the posts in [T, cursor) of those
 *   followees only (at most `take` each, usually about `take` followees), and sorts that small
 *   set. Costs F seeks plus about `take` short range reads, whatever the followees' post volume.
 * - global scan: walk the global time index (`posts_by_time`, covering: it carries `did`) below
 *   the cursor and keep the posts whose author is followed, stopping at `take`. The first `take`
 *   matches in global order are exactly the global top `take`; it reads about
 *   `take` / (share of recent posts written by followees) rows, so it is the choice for viewers
 *   who follow many accounts. The walk is bounded (`take` x {@link GLOBAL_SCAN_ROWS_PER_RESULT}
 *   rows): when the bound ends it before the page is full (followees who rarely post), the
 *   matches found are kept and the threshold merge supplies the rest strictly below the last row
 *   walked; when the index ends first, the page is complete as it is.
 *
 * Both, and the cold start, leave out the posts of inactive accounts and of accounts the viewer
 * blocks, is blocked by or has muted (spec 4.2 rules 10-12): followees are filtered before the merge, rows of the walks as
 * they are read (`NOT EXISTS` seeks, `safety.ts`).
 *
 * @module
 */

import type { DatabaseSync, StatementSync } from "node:sqlite";
import { COLLECTION_POST } from "../../shared/nsid.ts";
import { type TextKey, TOP_TIME } from "./cursor.ts";
import type { PostHydrator } from "./posts.ts";
import type { PostRow } from "./present.ts";
import { hiddenSql } from "./safety.ts";

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
  readonly #actorId: StatementSync;
  readonly #hasFollows: StatementSync;
  readonly #followCount: StatementSync;
  readonly #heads: StatementSync;
  readonly #authorWindow: StatementSync;
  readonly #globalScan: StatementSync;
  readonly #scanFloor: StatementSync;
  readonly #coldStart: StatementSync;
  readonly #scanRowsPerResult: number;

  /** `scanRowsPerResult` bounds the global walk (default {@link GLOBAL_SCAN_ROWS_PER_RESULT}). */
  constructor(db: DatabaseSync, posts: PostHydrator, opts: { scanRowsPerResult?: number } = {}) {
    this.#posts = posts;
    this.#scanRowsPerResult = opts.scanRowsPerResult ?? GLOBAL_SCAN_ROWS_PER_RESULT;
    this.#actorId = db.prepare("SELECT id FROM actors WHERE did = ?");
    this.#hasFollows = db.prepare("SELECT EXISTS (SELECT 1 FROM follows WHERE follower = ?) AS f");
    this.#followCount = db.prepare("SELECT following_count AS n FROM profiles WHERE did = ?");
    // The followees whose newest post below the cursor is at or after T, the ?4-th newest such
    // head ('' when fewer followees have one: then every followee with a post qualifies).
    this.#heads = db.prepare(
      `WITH heads AS MATERIALIZED (
         SELECT f.subject AS author, (
           SELECT indexed_at FROM posts INDEXED BY posts_by_author
           WHERE author = f.subject AND (indexed_at, uri) < (?2, ?3)
           ORDER BY indexed_at DESC, uri DESC LIMIT 1) AS t
         FROM follows f WHERE f.follower = ?1 AND NOT ${hiddenSql("?1", "f.subject")}),
       floor AS MATERIALIZED (SELECT ifnull((SELECT t FROM heads WHERE t IS NOT NULL
         ORDER BY t DESC LIMIT 1 OFFSET ?4 - 1), '') AS t)
       SELECT heads.author, floor.t AS floor FROM floor CROSS JOIN heads WHERE heads.t >= floor.t`,
    );
    this.#authorWindow = db.prepare(
      `SELECT id, indexed_at, uri FROM posts INDEXED BY posts_by_author
       WHERE author = ?1 AND indexed_at >= ?4 AND (indexed_at, uri) < (?2, ?3)
       ORDER BY indexed_at DESC, uri DESC LIMIT ?5`,
    );
    this.#globalScan = db.prepare(
      `SELECT id, indexed_at, uri FROM (
         SELECT id, author, indexed_at, uri FROM posts INDEXED BY posts_by_time
         WHERE (indexed_at, uri) < (?2, ?3)
         ORDER BY indexed_at DESC, uri DESC LIMIT ?5)
       WHERE EXISTS (SELECT 1 FROM follows WHERE follower = ?1 AND subject = author)
         AND NOT ${hiddenSql("?1", "author")}
       ORDER BY indexed_at DESC, uri DESC LIMIT ?4`,
    );
    // The last row the bounded walk read: the ?3-th row below the cursor (none: the walk read
    // every row below the cursor).
    this.#scanFloor = db.prepare(
      `SELECT indexed_at, uri FROM posts INDEXED BY posts_by_time
       WHERE (indexed_at, uri) < (?1, ?2)
       ORDER BY indexed_at DESC, uri DESC LIMIT 1 OFFSET ?3 - 1`,
    );
    this.#coldStart = db.prepare(
      `SELECT id, indexed_at, uri FROM posts INDEXED BY posts_by_time
       WHERE (indexed_at, uri) < (?1, ?2) AND collection = ?3
         AND NOT ${hiddenSql("?5", "author")}
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
    const viewer = (this.#actorId.get(viewerDid) as { id: number } | undefined)?.id;
    if (viewer === undefined || !(this.#hasFollows.get(viewer) as { f: number }).f) {
      skeleton = this.#coldStart.all(
        time,
        uri,
        COLLECTION_POST,
        take,
        viewer ?? null,
      ) as unknown as SkeletonRow[];
    } else {
      const strategy = opts.strategy ?? "auto";
      const perFollowee = strategy === "per_followee" ||
        (strategy === "auto" && this.#follows(viewerDid) <= PER_FOLLOWEE_MAX_FOLLOWS);
      skeleton = perFollowee
        ? this.#merge(viewer, time, uri, take)
        : this.#scan(viewer, time, uri, take);
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

  /** The bounded global walk, completed below its last row by the threshold merge. */
  #scan(viewer: number, time: string, uri: string, take: number): SkeletonRow[] {
    const bound = Math.min(Number.MAX_SAFE_INTEGER, take * this.#scanRowsPerResult);
    const found = this.#globalScan.all(
      viewer,
      time,
      uri,
      take,
      bound,
    ) as unknown as SkeletonRow[];
    if (found.length >= take) return found;
    const floor = this.#scanFloor.get(time, uri, bound) as
      | { indexed_at: string; uri: string }
      | undefined;
    if (floor === undefined) return found; // the walk read every row below the cursor
    return found.concat(this.#merge(viewer, floor.indexed_at, floor.uri, take - found.length));
  }

  /** The `take` newest followee posts below (`time`, `uri`), by the threshold merge. */
  #merge(viewer: number, time: string, uri: string, take: number): SkeletonRow[] {
    const heads = this.#heads.all(viewer, time, uri, take) as { author: number; floor: string }[];
    if (heads.length === 0) return [];
    const floor = heads[0].floor;
    let rows: SkeletonRow[] = [];
    for (const { author } of heads) {
      const own = this.#authorWindow.all(
        author,
        time,
        uri,
        floor,
        take,
      ) as unknown as SkeletonRow[];
      rows = rows.concat(own);
    }
    rows.sort(byKeyDesc);
    if (rows.length > take) rows.length = take;
    return rows;
  }
}

function byKeyDesc(a: SkeletonRow, b: SkeletonRow): number {
  if (a.indexed_at !== b.indexed_at) return a.indexed_at < b.indexed_at ? 1 : -1;
  return a.uri < b.uri ? 1 : a.uri > b.uri ? -1 : 0;
}
