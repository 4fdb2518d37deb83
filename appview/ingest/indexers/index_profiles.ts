/**
 * Profile cache writes: profile records (`app.social.actor.profile`, rkey `self`), handle ops,
 * and the exact post/follower/following counters kept on the profile row.
 *
 * Profile rows are never deleted: a row may exist only to hold counters or a handle
 * (`has_record = 0`). Deleting the profile record "removes the cached profile" (spec 6.3) by
 * clearing the record fields and `has_record`; counters and handle stay (they do not come from
 * the record, and recomputing them would scan other tables).
 *
 * @module
 */

import type { DatabaseSync, StatementSync } from "node:sqlite";
import type { HandleOp } from "../../../shared/ops.ts";
import { PROFILE_RKEY } from "../../../shared/nsid.ts";
import { actorIdSql, PLACEHOLDER_HANDLE_SQL } from "../../db/schema.ts";
import { placeholderHandle } from "../../db/handles.ts";
import type { CollectionIndexer, PutInput, RemoveInput } from "../types.ts";

/** A counter column of `profiles`. */
export type ProfileCounter = "post_count" | "follower_count" | "following_count";

/** Increments and decrements the profile counters (creating the row on first increment). */
export class ProfileCounters {
  readonly #inc: Record<ProfileCounter, StatementSync>;
  readonly #dec: Record<ProfileCounter, StatementSync>;

  constructor(db: DatabaseSync) {
    const prep = (col: ProfileCounter) => ({
      inc: db.prepare(
        `INSERT INTO profiles (did, ${col}) VALUES (?, 1)
         ON CONFLICT (did) DO UPDATE SET ${col} = ${col} + 1`,
      ),
      dec: db.prepare(`UPDATE profiles SET ${col} = ${col} - 1 WHERE did = ? AND ${col} > 0`),
    });
    const post = prep("post_count");
    const follower = prep("follower_count");
    const following = prep("following_count");
    this.#inc = {
      post_count: post.inc,
      follower_count: follower.inc,
      following_count: following.inc,
    };
    this.#dec = {
      post_count: post.dec,
      follower_count: follower.dec,
      following_count: following.dec,
    };
  }

  increment(did: string, counter: ProfileCounter): void {
    this.#inc[counter].run(did);
  }

  decrement(did: string, counter: ProfileCounter): void {
    this.#dec[counter].run(did);
  }
}

const UPSERT_PROFILE = `
INSERT INTO profiles (did, handle, display_name, description, avatar_cid, banner_cid,
  has_record, updated_at)
SELECT ?1, CASE WHEN h GLOB 'did:*' THEN NULL ELSE h END, ?2, ?3, ?4, ?5, 1, ?6
FROM (SELECT (SELECT handle FROM posts WHERE author = ${actorIdSql("?1")}
  ORDER BY indexed_at DESC, uri DESC LIMIT 1) AS h)
WHERE true
ON CONFLICT (did) DO UPDATE SET
  handle = coalesce(profiles.handle, excluded.handle),
  display_name = excluded.display_name, description = excluded.description,
  avatar_cid = excluded.avatar_cid, banner_cid = excluded.banner_cid,
  has_record = 1, updated_at = excluded.updated_at
WHERE profiles.has_record = 0
  OR profiles.display_name IS NOT excluded.display_name
  OR profiles.description IS NOT excluded.description
  OR profiles.avatar_cid IS NOT excluded.avatar_cid
  OR profiles.banner_cid IS NOT excluded.banner_cid
  OR (profiles.handle IS NULL AND excluded.handle IS NOT NULL)`;

/** Indexes `app.social.actor.profile` records into the profile cache. */
export class ProfileIndexer implements CollectionIndexer {
  readonly #upsert: StatementSync;
  readonly #fillPostAvatars: StatementSync;
  readonly #clear: StatementSync;

  constructor(db: DatabaseSync) {
    this.#upsert = db.prepare(UPSERT_PROFILE);
    // Posts indexed before the profile record get its avatar; never set to null (spec 2.1).
    this.#fillPostAvatars = db.prepare(
      `UPDATE posts SET avatar_cid = ?2
       WHERE author = ${actorIdSql("?1")} AND avatar_cid IS NOT ?2`,
    );
    this.#clear = db.prepare(
      `UPDATE profiles SET display_name = NULL, description = NULL, avatar_cid = NULL,
         banner_cid = NULL, has_record = 0, updated_at = ?2
       WHERE did = ?1 AND has_record = 1`,
    );
  }

  put({ op, value, now }: PutInput): string | null {
    if (op.rkey !== PROFILE_RKEY) return `Profile record key is not ${PROFILE_RKEY}: ${op.rkey}`;
    const avatar = blobCid(value.avatar);
    const displayName = typeof value.displayName === "string" ? value.displayName : null;
    const description = typeof value.description === "string" ? value.description : null;
    this.#upsert.run(op.did, displayName, description, avatar, blobCid(value.banner), now);
    if (avatar !== null) this.#fillPostAvatars.run(op.did, avatar);
    return null;
  }

  remove({ op, now }: RemoveInput): void {
    if (op.rkey === PROFILE_RKEY) this.#clear.run(op.did, now);
  }
}

/** CID string of a blob reference in lex JSON form (`{ref: {$link}}`), or null. */
export function blobCid(blob: unknown): string | null {
  if (typeof blob !== "object" || blob === null) return null;
  const ref = (blob as { ref?: unknown }).ref;
  if (typeof ref === "string") return ref;
  if (typeof ref !== "object" || ref === null) return null;
  const link = (ref as { $link?: unknown }).$link;
  return typeof link === "string" ? link : null;
}

/**
 * Applies {@link HandleOp}s: the profile row's handle and the denormalised handle of the DID's
 * posts (clearing `handle_attempted_at`, spec 4.3 rule 1). A handle now claimed by this DID is
 * taken from any other profile that still held it; that DID's posts fall back to placeholders
 * until handle sync resolves it again. A null handle clears the handle (posts get placeholders).
 */
export class HandleIndexer {
  readonly #upsert: StatementSync;
  readonly #clearProfile: StatementSync;
  readonly #takeOver: StatementSync;
  readonly #heldByOther: StatementSync;
  readonly #setPosts: StatementSync;
  readonly #resetPosts: StatementSync;

  constructor(db: DatabaseSync) {
    this.#upsert = db.prepare(
      `INSERT INTO profiles (did, handle, updated_at) VALUES (?1, ?2, ?3)
       ON CONFLICT (did) DO UPDATE SET handle = excluded.handle, updated_at = excluded.updated_at
       WHERE profiles.handle IS NOT excluded.handle`,
    );
    this.#clearProfile = db.prepare(
      "UPDATE profiles SET handle = NULL, updated_at = ?2 WHERE did = ?1 AND handle IS NOT NULL",
    );
    this.#takeOver = db.prepare(
      `UPDATE profiles SET handle = NULL, updated_at = ?3
       WHERE handle = ?2 COLLATE NOCASE AND did <> ?1 RETURNING did`,
    );
    this.#heldByOther = db.prepare(
      "SELECT did FROM profiles WHERE handle = ?2 COLLATE NOCASE AND did <> ?1 LIMIT 1",
    );
    this.#setPosts = db.prepare(
      `UPDATE posts SET handle = ?2, handle_attempted_at = NULL
       WHERE author = ${actorIdSql("?1")} AND handle <> ?2`,
    );
    this.#resetPosts = db.prepare(
      `UPDATE posts SET handle = ?2
       WHERE author = ${actorIdSql("?1")} AND NOT (${PLACEHOLDER_HANDLE_SQL})`,
    );
  }

  /**
   * Applies one handle op (the handle was validated and lower-cased by the caller). Returns
   * the DID holding the handle when the op was refused: a handle already held by another DID
   * moves only on an authoritative op (the account host's own word); a claim from a DID
   * document or the public stream cannot take it, so a foreign DID cannot hijack a local
   * user's handle.
   */
  apply(op: HandleOp, now: string): string | null {
    if (op.handle === null) {
      this.#clearProfile.run(op.did, now);
      this.#resetPosts.run(op.did, placeholderHandle(op.did));
      return null;
    }
    if (op.authoritative !== true) {
      const holder = this.#heldByOther.get(op.did, op.handle) as { did: string } | undefined;
      if (holder !== undefined) return holder.did;
    }
    const previous = this.#takeOver.all(op.did, op.handle, now) as { did: string }[];
    for (const row of previous) this.#resetPosts.run(row.did, placeholderHandle(row.did));
    this.#upsert.run(op.did, op.handle, now);
    this.#setPosts.run(op.did, op.handle);
    return null;
  }
}
