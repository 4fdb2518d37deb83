/**
 * The viewer's own likes, reposts, follows and blocks of given posts and accounts, as record URIs,
 * so a client can show them and delete the records to undo them (`GET /api/viewer`).
 *
 * Every lookup is one index seek: likes and reposts by (subject_author, subject_rkey, actor) in
 * `likes_by_subject` / `reposts_by_subject` (which also hold the rkey, the table's key), follows
 * by their primary key (follower, subject), blocks by `blocks_by_pair` (actor, subject).
 *
 * @module
 */

import type { DatabaseSync, StatementSync } from "node:sqlite";
import type { ViewerState } from "../../shared/client_types.ts";
import {
  COLLECTION_BLOCK,
  COLLECTION_FOLLOW,
  COLLECTION_LIKE,
  COLLECTION_REPOST,
} from "../../shared/nsid.ts";
import { actorIdSql } from "../db/schema.ts";
import { postKeyOf } from "../db/post_key.ts";

/** What to look up for a viewer: post URIs and actor DIDs. */
export interface ViewerQuery {
  readonly uris: readonly string[];
  readonly actors: readonly string[];
}

/** Reads the viewer's records with statements prepared once. */
export class ViewerView {
  readonly #actorId: StatementSync;
  readonly #like: StatementSync;
  readonly #repost: StatementSync;
  readonly #follow: StatementSync;
  readonly #block: StatementSync;

  constructor(db: DatabaseSync) {
    this.#actorId = db.prepare("SELECT id FROM actors WHERE did = ?");
    // An actor may like a post twice (two records); the newest record (highest TID) is named.
    const interaction = (table: string) =>
      db.prepare(
        `SELECT rkey FROM ${table} WHERE subject_author = ${actorIdSql("?1")}
           AND subject_rkey = ?2 AND actor = ?3 ORDER BY rkey DESC LIMIT 1`,
      );
    this.#like = interaction("likes");
    this.#repost = interaction("reposts");
    this.#follow = db.prepare(
      `SELECT rkey FROM follows WHERE follower = ?1 AND subject = ${actorIdSql("?2")}`,
    );
    // Two block records of one account: the newest is named (deleting it leaves the other).
    this.#block = db.prepare(
      `SELECT rkey FROM blocks WHERE actor = ?1 AND subject = ${actorIdSql("?2")}
         ORDER BY rkey DESC LIMIT 1`,
    );
  }

  /**
   * The like and repost records of `viewerDid` for the posts `query.uris`, and its follow
   * and block records of `query.actors`; a post or actor is absent when there is none. A URI that names
   * no post (not `at://<did>/app.social.feed.post/<rkey>`) is absent too.
   */
  records(viewerDid: string, query: ViewerQuery): ViewerState {
    const likes = new Map<string, string>();
    const reposts = new Map<string, string>();
    const follows = new Map<string, string | null>();
    const blocks = new Map<string, string>();
    const viewer = this.#actorId.get(viewerDid) as { id: number } | undefined;
    if (viewer !== undefined) {
      const uriOf = (collection: string, rkey: string) => `at://${viewerDid}/${collection}/${rkey}`;
      for (const uri of new Set(query.uris)) {
        const post = postKeyOf(uri);
        if (post === null) continue;
        const like = this.#like.get(post.did, post.rkey, viewer.id) as RkeyRow | undefined;
        if (like !== undefined) likes.set(uri, uriOf(COLLECTION_LIKE, like.rkey));
        const repost = this.#repost.get(post.did, post.rkey, viewer.id) as RkeyRow | undefined;
        if (repost !== undefined) reposts.set(uri, uriOf(COLLECTION_REPOST, repost.rkey));
      }
      for (const did of new Set(query.actors)) {
        const block = this.#block.get(viewer.id, did) as RkeyRow | undefined;
        if (block !== undefined) blocks.set(did, uriOf(COLLECTION_BLOCK, block.rkey));
        const follow = this.#follow.get(viewer.id, did) as { rkey: string | null } | undefined;
        if (follow === undefined) continue;
        // Rows from before follows stored their record key have none: followed, not undoable.
        follows.set(did, follow.rkey === null ? null : uriOf(COLLECTION_FOLLOW, follow.rkey));
      }
    }
    // fromEntries defines own properties, whatever the key.
    return {
      likes: Object.fromEntries(likes),
      reposts: Object.fromEntries(reposts),
      follows: Object.fromEntries(follows),
      blocks: Object.fromEntries(blocks),
    };
  }
}

type RkeyRow = { rkey: string };
