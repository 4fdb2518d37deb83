/**
 * Profiles (spec 2.4, 4.2 rule 3): the profile cache row, the author's newest posts (at most 50)
 * and the counters. By handle, the cache is consulted first with a case-insensitive match; an
 * unknown or placeholder handle gives no profile (the API answers the synthetic empty one).
 *
 * The cache is the only place a handle is looked up: every real handle stored on a post row was
 * copied from the author's profile row by the write path (`HandleOp`s set both, and a new post
 * takes the handle from the cache), so a post can never name a handle that the cache lacks, and a
 * scan of `posts` by handle (which has no index) could never find more.
 *
 * @module
 */

import { actorIdSql } from "../db/schema.ts";
import type { DatabaseSync, StatementSync } from "node:sqlite";
import { isPlaceholderHandle } from "../db/handles.ts";
import { isValidHandle, normalizeHandle } from "../../shared/syntax.ts";
import { POST_COLUMNS, type PostRow, presentHandle, presentPost, type Profile } from "./present.ts";
import { inactiveSql, type SafetyView } from "./safety.ts";

/** Spec part 8: posts in a profile response. */
export const PROFILE_POSTS = 50;

interface ProfileRow {
  did: string;
  handle: string | null;
  display_name: string | null;
  description: string | null;
  avatar_cid: string | null;
  banner_cid: string | null;
  post_count: number;
  follower_count: number;
  following_count: number;
}

/** Options of a profile read. */
export interface ProfileOptions {
  /**
   * The account reading (null or absent: nobody): when either blocks the other, the profile
   * comes without posts (spec 4.2 rule 10).
   */
  viewerDid?: string | null;
}

/** Reads profiles with statements prepared once. */
export class ProfileView {
  readonly #safety: SafetyView;
  readonly #byHandle: StatementSync;
  readonly #byDid: StatementSync;
  readonly #posts: StatementSync;
  readonly #postCount: StatementSync;
  readonly #inactive: StatementSync;

  constructor(db: DatabaseSync, safety: SafetyView) {
    this.#safety = safety;
    this.#byHandle = db.prepare(
      "SELECT did FROM profiles WHERE handle = ? COLLATE NOCASE ORDER BY updated_at DESC LIMIT 1",
    );
    this.#byDid = db.prepare(
      `SELECT did, handle, display_name, description, avatar_cid, banner_cid, post_count,
         follower_count, following_count FROM profiles WHERE did = ?`,
    );
    this.#posts = db.prepare(
      `SELECT ${POST_COLUMNS} FROM posts WHERE author = ${actorIdSql("?")}
       ORDER BY indexed_at DESC, uri DESC LIMIT ${PROFILE_POSTS}`,
    );
    this.#postCount = db.prepare(
      `SELECT count(*) AS n FROM posts WHERE author = ${actorIdSql("?")}`,
    );
    this.#inactive = db.prepare(`SELECT ${inactiveSql(actorIdSql("?"))} AS v`);
  }

  /**
   * The profile whose handle is `handle` (any case); null when unknown or a placeholder. With
   * `opts.viewerDid`, without posts when the viewer and the account block either way.
   */
  byHandle(handle: string, opts: ProfileOptions = {}): Profile | null {
    const bare = handle.startsWith("@") ? handle.slice(1) : handle;
    if (isPlaceholderHandle(bare) || !isValidHandle(bare)) return null;
    const row = this.#byHandle.get(normalizeHandle(bare)) as { did: string } | undefined;
    return row === undefined ? null : this.byDid(row.did, opts);
  }

  /**
   * The profile of `did`; null when the index knows nothing of it, or the account is inactive
   * (spec 4.2 rule 12: answered as unknown). `opts` as in byHandle.
   */
  byDid(did: string, opts: ProfileOptions = {}): Profile | null {
    if ((this.#inactive.get(did) as { v: number }).v === 1) return null;
    const row = this.#byDid.get(did) as ProfileRow | undefined;
    const posts = this.#posts.all(did) as unknown as PostRow[];
    if (row === undefined && posts.length === 0) return null;
    return {
      did,
      handle: presentHandle(row?.handle ?? posts[0]?.handle ?? null, did),
      posts: this.#safety.blocked(opts.viewerDid ?? null, did) ? [] : posts.map(presentPost),
      followers: row?.follower_count ?? 0,
      following: row?.following_count ?? 0,
      display_name: row?.display_name ?? null,
      description: row?.description ?? null,
      avatar_cid: row?.avatar_cid ?? null,
      banner_cid: row?.banner_cid ?? null,
      // Spec 2.4: from the cache; a live count (not the slice length) when there is no row.
      post_count: row?.post_count ?? (this.#postCount.get(did) as { n: number }).n,
    };
  }
}

/** Spec 4.2 rule 3: the synthetic empty profile of an unknown handle or DID. */
export function emptyProfile(handle: string): Profile {
  return {
    did: "",
    handle,
    posts: [],
    followers: 0,
    following: 0,
    display_name: null,
    description: null,
    avatar_cid: null,
    banner_cid: null,
    post_count: 0,
  };
}
