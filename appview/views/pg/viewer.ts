/**
 * The viewer's own likes, reposts, follows and blocks on PostgreSQL (appview/views/viewer.ts):
 * every post and account of a request in one statement, the lists passed as arrays, each entry
 * still one index seek (`likes_by_subject`, `reposts_by_subject`, the follows key,
 * `blocks_by_pair`).
 *
 * @module
 */

import type { ViewerState } from "../../../shared/client_types.ts";
import {
  COLLECTION_BLOCK,
  COLLECTION_FOLLOW,
  COLLECTION_LIKE,
  COLLECTION_REPOST,
} from "../../../shared/nsid.ts";
import { postKeyOf } from "../../db/post_key.ts";
import type { ViewerQuery } from "../viewer.ts";
import { type PgClient, queryRows } from "./query.ts";

// $1 viewer DID; $2, $3, $4 post URIs and their (DID, rkey); $5 actor DIDs. An actor may like a
// post twice (two records), or block an account twice: the newest record (highest TID) is named.
const interaction = (kind: string, table: string) =>
  `SELECT '${kind}' AS kind, s.uri AS key, r.rkey FROM v CROSS JOIN s CROSS JOIN LATERAL (
     SELECT rkey FROM ${table} WHERE subject_author = s.author AND subject_rkey = s.rkey
       AND actor = v.id ORDER BY rkey DESC LIMIT 1) r`;
const RECORDS = `WITH v AS (SELECT id FROM actors WHERE did = $1),
  s AS (SELECT k.uri, a.id AS author, k.rkey
    FROM unnest($2::text[], $3::text[], $4::text[]) AS k (uri, did, rkey)
    JOIN actors a ON a.did = k.did),
  d AS (SELECT a.did, a.id FROM actors a WHERE a.did = ANY ($5::text[]))
  ${interaction("like", "likes")}
  UNION ALL ${interaction("repost", "reposts")}
  UNION ALL SELECT 'block', d.did, r.rkey FROM v CROSS JOIN d CROSS JOIN LATERAL (
    SELECT rkey FROM blocks WHERE actor = v.id AND subject = d.id ORDER BY rkey DESC LIMIT 1) r
  UNION ALL SELECT 'follow', d.did, f.rkey FROM v CROSS JOIN d
    JOIN follows f ON f.follower = v.id AND f.subject = d.id`;

type RecordRow = { kind: "like" | "repost" | "block" | "follow"; key: string; rkey: string | null };

/** Reads the viewer's records. */
export class PgViewerView {
  readonly #sql: PgClient;

  constructor(sql: PgClient) {
    this.#sql = sql;
  }

  /**
   * The like and repost records of `viewerDid` for the posts `query.uris`, and its follow
   * and block records of `query.actors`; a post or actor is absent when there is none. A URI that
   * names no post (not `at://<did>/app.social.feed.post/<rkey>`) is absent too.
   */
  async records(viewerDid: string, query: ViewerQuery): Promise<ViewerState> {
    const uris: string[] = [];
    const dids: string[] = [];
    const rkeys: string[] = [];
    for (const uri of new Set(query.uris)) {
      const post = postKeyOf(uri);
      if (post === null) continue;
      uris.push(uri);
      dids.push(post.did);
      rkeys.push(post.rkey);
    }
    const actors = [...new Set(query.actors)];
    const found = uris.length === 0 && actors.length === 0
      ? []
      : await queryRows<RecordRow>(this.#sql, RECORDS, [viewerDid, uris, dids, rkeys, actors]);
    const byKind = {
      like: new Map<string, string | null>(),
      repost: new Map<string, string | null>(),
      block: new Map<string, string | null>(),
      follow: new Map<string, string | null>(),
    };
    for (const row of found) byKind[row.kind].set(row.key, row.rkey);
    const uriOf = (collection: string, rkey: string) => `at://${viewerDid}/${collection}/${rkey}`;
    // Entries in the order asked, as the SQLite view gives them; fromEntries defines own
    // properties, whatever the key.
    const named = (keys: string[], kind: RecordRow["kind"], collection: string) => {
      const out = new Map<string, string>();
      for (const key of keys) {
        const rkey = byKind[kind].get(key);
        if (typeof rkey === "string") out.set(key, uriOf(collection, rkey));
      }
      return Object.fromEntries(out);
    };
    const follows = new Map<string, string | null>();
    for (const did of actors) {
      const rkey = byKind.follow.get(did);
      if (rkey === undefined) continue;
      // Rows from before follows stored their record key have none: followed, not undoable.
      follows.set(did, rkey === null ? null : uriOf(COLLECTION_FOLLOW, rkey));
    }
    return {
      likes: named(uris, "like", COLLECTION_LIKE),
      reposts: named(uris, "repost", COLLECTION_REPOST),
      follows: Object.fromEntries(follows),
      blocks: named(actors, "block", COLLECTION_BLOCK),
    };
  }
}
