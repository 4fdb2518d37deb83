/**
 * Single posts and threads (spec 2.8, 4.2 rules 4-5).
 *
 * @module
 */

import { actorIdSql } from "../db/schema.ts";
import type { DatabaseSync, StatementSync } from "node:sqlite";
import type { PostHydrator } from "./posts.ts";
import { postKeyOf } from "../db/post_key.ts";
import { POST_COLUMNS, type PostRow } from "./present.ts";
import { inactiveSql, type SafetyView, unavailableSql } from "./safety.ts";

const ACTOR_1 = actorIdSql("?1");
const ACTOR_3 = actorIdSql("?3");

/** Spec 4.2 rule 5: ancestors loaded above the post. */
export const MAX_THREAD_DEPTH = 20;
/** Direct replies returned with a thread (oldest first). */
export const MAX_THREAD_REPLIES = 500;

/** Reads thread context with statements prepared once. */
export class ThreadView {
  readonly #posts: PostHydrator;
  readonly #replies: StatementSync;
  readonly #repliesForViewer: StatementSync;
  readonly #safety: SafetyView;
  readonly #liked: StatementSync;
  readonly #reposted: StatementSync;

  constructor(db: DatabaseSync, posts: PostHydrator, safety: SafetyView) {
    this.#posts = posts;
    this.#replies = db.prepare(
      `SELECT ${POST_COLUMNS} FROM posts WHERE parent_uri = ?
         AND NOT ${inactiveSql("author")}
       ORDER BY indexed_at, uri LIMIT ${MAX_THREAD_REPLIES}`,
    );
    this.#repliesForViewer = db.prepare(
      `SELECT ${POST_COLUMNS} FROM posts WHERE parent_uri = ?1
         AND NOT ${unavailableSql(actorIdSql("?2"), "author")}
       ORDER BY indexed_at, uri LIMIT ${MAX_THREAD_REPLIES}`,
    );
    this.#safety = safety;
    this.#liked = db.prepare(
      `SELECT EXISTS (SELECT 1 FROM likes WHERE subject_author = ${ACTOR_1}
         AND subject_rkey = ?2 AND actor = ${ACTOR_3}) AS v`,
    );
    this.#reposted = db.prepare(
      `SELECT EXISTS (SELECT 1 FROM reposts WHERE subject_author = ${ACTOR_1}
         AND subject_rkey = ?2 AND actor = ${ACTOR_3}) AS v`,
    );
  }

  /** The post `uri`, or null when it is not indexed. */
  post(uri: string): PostRow | null {
    return this.#posts.byUri(uri);
  }

  /**
   * The indexed ancestors of `post`, root-first (the last is the immediate parent), at most
   * {@link MAX_THREAD_DEPTH}. The walk stops at a parent that is not indexed, and never revisits
   * a post (hostile records can form a cycle). It also stops at a parent by an inactive account
   * or, with `viewerDid`, one the viewer blocks or is blocked by (`blocked` true; spec 4.2 rules
   * 10, 12).
   */
  ancestors(
    post: PostRow,
    viewerDid: string | null = null,
  ): { chain: PostRow[]; blocked: boolean } {
    const chain: PostRow[] = [];
    const seen = new Set<string>([post.uri]);
    let parentUri = post.parent_uri;
    let blocked = false;
    while (parentUri !== null && chain.length < MAX_THREAD_DEPTH && !seen.has(parentUri)) {
      const parent = this.#posts.byUri(parentUri);
      if (parent === null) break;
      if (this.#safety.unavailable(viewerDid, parent.did)) {
        blocked = true;
        break;
      }
      chain.push(parent);
      seen.add(parentUri);
      parentUri = parent.parent_uri;
    }
    return { chain: chain.reverse(), blocked };
  }

  /**
   * Direct replies of the post `uri`, oldest first, none by an inactive account; with
   * `viewerDid`, none by an account the viewer blocks or is blocked by (what hangs below such a
   * reply goes with it).
   */
  replies(uri: string, viewerDid: string | null = null): PostRow[] {
    const rows = viewerDid === null
      ? this.#replies.all(uri)
      : this.#repliesForViewer.all(uri, viewerDid);
    return rows as unknown as PostRow[];
  }

  /** Whether `viewerDid` likes / reposts the post `uri`. */
  viewerState(uri: string, viewerDid: string): { liked: boolean; reposted: boolean } {
    const key = postKeyOf(uri);
    if (key === null) return { liked: false, reposted: false };
    return {
      liked: (this.#liked.get(key.did, key.rkey, viewerDid) as { v: number }).v === 1,
      reposted: (this.#reposted.get(key.did, key.rkey, viewerDid) as { v: number }).v === 1,
    };
  }
}
