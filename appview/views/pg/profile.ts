/**
 * Profiles on PostgreSQL (appview/views/profile.ts): one statement answers a profile, by DID or
 * by handle: the account's inactive flag, whether the viewer and the account block either way,
 * the cache row, the live post count when there is no row, and the newest posts (one row per
 * post, the profile's columns repeated), all read in one snapshot.
 *
 * @module
 */

import { actorIdSql } from "../../db/schema.ts";
import { isPlaceholderHandle } from "../../db/handles.ts";
import { isValidHandle, normalizeHandle } from "../../../shared/syntax.ts";
import {
  POST_COLUMNS,
  type PostRow,
  presentHandle,
  presentPost,
  type Profile,
} from "../present.ts";
import { PROFILE_POSTS, type ProfileOptions } from "../profile.ts";
import { blockedSql } from "../safety.ts";
import { type PgClient, qualify, queryRows } from "./query.ts";

const POST_FIELDS = POST_COLUMNS.split(",").map((c) => c.trim()) as (keyof PostRow)[];

interface ProfileStatementRow extends Partial<Record<keyof PostRow, unknown>> {
  subject: string | null;
  inactive: boolean;
  hide: boolean;
  has_row: boolean;
  r_handle: string | null;
  r_display_name: string | null;
  r_description: string | null;
  r_avatar_cid: string | null;
  r_banner_cid: string | null;
  r_post_count: number | null;
  r_follower_count: number | null;
  r_following_count: number | null;
  live_count: number | null;
}

// `subject` is the profile's DID (from $1: a DID, or a handle looked up as SQLite's COLLATE
// NOCASE does: handles are ASCII); $2 the viewer (null: none). SQLite sorts a NULL `updated_at`
// last in DESC, PostgreSQL first unless told.
const profileSql = (subject: string) =>
  `WITH d AS MATERIALIZED (SELECT ${subject} AS did),
    a AS MATERIALIZED (SELECT id FROM actors WHERE did = (SELECT did FROM d))
  SELECT d.did AS subject,
    EXISTS (SELECT 1 FROM inactive_actors WHERE actor = (SELECT id FROM a)) AS inactive,
    (d.did IS DISTINCT FROM $2 AND ${blockedSql(actorIdSql("$2"), "(SELECT id FROM a)")}) AS hide,
    r.did IS NOT NULL AS has_row, r.handle AS r_handle, r.display_name AS r_display_name,
    r.description AS r_description, r.avatar_cid AS r_avatar_cid, r.banner_cid AS r_banner_cid,
    r.post_count AS r_post_count, r.follower_count AS r_follower_count,
    r.following_count AS r_following_count,
    CASE WHEN r.did IS NULL
      THEN (SELECT count(*) FROM posts WHERE author = (SELECT id FROM a)) END AS live_count,
    ${qualify(POST_COLUMNS, "p")}
  FROM d LEFT JOIN profiles r ON r.did = d.did
  LEFT JOIN (SELECT ${POST_COLUMNS} FROM posts WHERE author = (SELECT id FROM a)
    ORDER BY indexed_at DESC, uri DESC LIMIT ${PROFILE_POSTS}) p ON true
  ORDER BY p.indexed_at DESC, p.uri DESC`;
const BY_DID = profileSql("$1::text");
const BY_HANDLE = profileSql(
  `(SELECT did FROM profiles WHERE lower(handle) = lower($1)
    ORDER BY updated_at DESC NULLS LAST LIMIT 1)`,
);

/** Reads profiles. */
export class PgProfileView {
  readonly #sql: PgClient;

  constructor(sql: PgClient) {
    this.#sql = sql;
  }

  /**
   * The profile whose handle is `handle` (any case); null when unknown or a placeholder. With
   * `opts.viewerDid`, without posts when the viewer and the account block either way.
   */
  async byHandle(handle: string, opts: ProfileOptions = {}): Promise<Profile | null> {
    const bare = handle.startsWith("@") ? handle.slice(1) : handle;
    if (isPlaceholderHandle(bare) || !isValidHandle(bare)) return null;
    return await this.#read(BY_HANDLE, normalizeHandle(bare), opts);
  }

  /**
   * The profile of `did`; null when the index knows nothing of it, or the account is inactive
   * (spec 4.2 rule 12: answered as unknown). `opts` as in byHandle.
   */
  async byDid(did: string, opts: ProfileOptions = {}): Promise<Profile | null> {
    return await this.#read(BY_DID, did, opts);
  }

  async #read(text: string, key: string, opts: ProfileOptions): Promise<Profile | null> {
    const rows = await queryRows<ProfileStatementRow>(this.#sql, text, [
      key,
      opts.viewerDid ?? null,
    ]);
    const head = rows[0];
    const did = head.subject;
    if (did === null || head.inactive) return null;
    const posts = head.id === null ? [] : rows.map(postOf);
    if (!head.has_row && posts.length === 0) return null;
    const row = head.has_row ? head : undefined;
    return {
      did,
      handle: presentHandle(row?.r_handle ?? posts[0]?.handle ?? null, did),
      posts: head.hide ? [] : posts.map(presentPost),
      followers: row?.r_follower_count ?? 0,
      following: row?.r_following_count ?? 0,
      display_name: row?.r_display_name ?? null,
      description: row?.r_description ?? null,
      avatar_cid: row?.r_avatar_cid ?? null,
      banner_cid: row?.r_banner_cid ?? null,
      // Spec 2.4: from the cache; a live count (not the slice length) when there is no row.
      post_count: row?.r_post_count ?? head.live_count ?? 0,
    };
  }
}

function postOf(row: ProfileStatementRow): PostRow {
  const post: Record<string, unknown> = {};
  for (const field of POST_FIELDS) post[field] = row[field];
  return post as unknown as PostRow;
}
