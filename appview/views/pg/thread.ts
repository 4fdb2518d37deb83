/**
 * Single posts and threads on PostgreSQL (appview/views/thread.ts). The ancestors are one
 * recursive statement instead of SQLite's walk of up to 20 x 2 statements: each step finds the
 * parent by its key (the author's DID and the rkey read from the URI, then `posts_by_key`) and
 * requires the row's `uri` to equal the parent URI, which holds exactly when `postKeyOf` would
 * have found it (a post's `uri` is `at://<did>/app.social.feed.post/<rkey>` of its key).
 *
 * @module
 */

import { actorIdSql } from "../../db/schema.ts";
import { postKeyOf } from "../../db/post_key.ts";
import { POST_COLUMNS, type PostRow } from "../present.ts";
import { blockedSql, inactiveSql, unavailableSql } from "../safety.ts";
import { MAX_THREAD_DEPTH, MAX_THREAD_REPLIES } from "../thread.ts";
import { type PgPostHydrator, POST_COLUMNS_OF_P } from "./posts.ts";
import { type PgClient, queryRow, queryRows } from "./query.ts";

const ACTOR_1 = actorIdSql("$1");
const ACTOR_3 = actorIdSql("$3");

// `stop`: the post is unavailable to the viewer $3 (null: none), as SafetyView.unavailable
// answers it: its account is inactive, or (another account than the viewer's) either blocks the
// other.
const STOP = `(${inactiveSql("p.author")}
  OR (p.did IS DISTINCT FROM $3 AND ${blockedSql(ACTOR_3, "p.author")}))`;
// $1, $2 the key of the immediate parent; $4 the post's own URI (already seen).
const ANCESTORS = `WITH RECURSIVE chain (id, parent_uri, depth, seen, stop) AS (
    SELECT p.id, p.parent_uri, 1, ARRAY[$4::text, p.uri], ${STOP}
    FROM posts p WHERE p.author = ${ACTOR_1} AND p.rkey = $2
    UNION ALL
    SELECT p.id, p.parent_uri, c.depth + 1, c.seen || p.uri, ${STOP}
    FROM chain c
    JOIN actors a ON a.did = split_part(c.parent_uri, '/', 3)
    JOIN posts p ON p.author = a.id AND p.rkey = split_part(c.parent_uri, '/', 5)
      AND p.uri = c.parent_uri
    WHERE NOT c.stop AND c.depth < ${MAX_THREAD_DEPTH} AND c.parent_uri IS NOT NULL
      AND NOT c.parent_uri = ANY (c.seen))
  SELECT ${POST_COLUMNS_OF_P}, c.stop
  FROM chain c JOIN posts p ON p.id = c.id ORDER BY c.depth DESC`;
const REPLIES = `SELECT ${POST_COLUMNS} FROM posts WHERE parent_uri = $1
    AND NOT ${inactiveSql("author")}
  ORDER BY indexed_at, uri LIMIT ${MAX_THREAD_REPLIES}`;
const REPLIES_FOR_VIEWER = `SELECT ${POST_COLUMNS} FROM posts WHERE parent_uri = $1
    AND NOT ${unavailableSql(actorIdSql("$2"), "author")}
  ORDER BY indexed_at, uri LIMIT ${MAX_THREAD_REPLIES}`;
const VIEWER_STATE = `SELECT
  EXISTS (SELECT 1 FROM likes WHERE subject_author = ${ACTOR_1}
    AND subject_rkey = $2 AND actor = ${ACTOR_3}) AS liked,
  EXISTS (SELECT 1 FROM reposts WHERE subject_author = ${ACTOR_1}
    AND subject_rkey = $2 AND actor = ${ACTOR_3}) AS reposted`;

/** Reads thread context. */
export class PgThreadView {
  readonly #sql: PgClient;
  readonly #posts: PgPostHydrator;

  constructor(sql: PgClient, posts: PgPostHydrator) {
    this.#sql = sql;
    this.#posts = posts;
  }

  /** The post `uri`, or null when it is not indexed. */
  async post(uri: string): Promise<PostRow | null> {
    return await this.#posts.byUri(uri);
  }

  /**
   * The indexed ancestors of `post`, root-first (the last is the immediate parent), at most
   * {@link MAX_THREAD_DEPTH}. The walk stops at a parent that is not indexed, and never revisits
   * a post (hostile records can form a cycle). It also stops at a parent by an inactive account
   * or, with `viewerDid`, one the viewer blocks or is blocked by (`blocked` true; spec 4.2 rules
   * 10, 12).
   */
  async ancestors(
    post: PostRow,
    viewerDid: string | null = null,
  ): Promise<{ chain: PostRow[]; blocked: boolean }> {
    const parent = post.parent_uri === null || post.parent_uri === post.uri
      ? null
      : postKeyOf(post.parent_uri);
    if (parent === null) return { chain: [], blocked: false };
    const rows = await queryRows<PostRow & { stop: boolean }>(this.#sql, ANCESTORS, [
      parent.did,
      parent.rkey,
      viewerDid,
      post.uri,
    ]);
    // Root first: the stopping parent, if any, is the first row.
    const blocked = rows.length > 0 && rows[0].stop;
    return { chain: (blocked ? rows.slice(1) : rows).map(withoutStop), blocked };
  }

  /**
   * Direct replies of the post `uri`, oldest first, none by an inactive account; with
   * `viewerDid`, none by an account the viewer blocks or is blocked by (what hangs below such a
   * reply goes with it).
   */
  async replies(uri: string, viewerDid: string | null = null): Promise<PostRow[]> {
    return viewerDid === null
      ? await queryRows<PostRow>(this.#sql, REPLIES, [uri])
      : await queryRows<PostRow>(this.#sql, REPLIES_FOR_VIEWER, [uri, viewerDid]);
  }

  /** Whether `viewerDid` likes / reposts the post `uri`. */
  async viewerState(
    uri: string,
    viewerDid: string,
  ): Promise<{ liked: boolean; reposted: boolean }> {
    const key = postKeyOf(uri);
    if (key === null) return { liked: false, reposted: false };
    const row = await queryRow<{ liked: boolean; reposted: boolean }>(this.#sql, VIEWER_STATE, [
      key.did,
      key.rkey,
      viewerDid,
    ]);
    return { liked: row!.liked, reposted: row!.reposted };
  }
}

function withoutStop(row: PostRow & { stop: boolean }): PostRow {
  const { stop: _, ...post } = row;
  return post;
}
