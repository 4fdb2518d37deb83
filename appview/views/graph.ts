/**
 * Followers and following lists (spec 2.6, 4.2 rule 8): actor cards, newest follow first, paged
 * by (follow `indexed_at`, DID).
 *
 * @module
 */

import { actorIdSql } from "../db/schema.ts";
import type { DatabaseSync, StatementSync } from "node:sqlite";
import { type IdKey, TOP_TIME } from "./cursor.ts";
import type { ActorRow } from "./present.ts";

/** One page of actor rows. */
export interface ActorPage {
  rows: ActorRow[];
  next: IdKey | null;
}

type GraphRow = ActorRow & { indexed_at: string; actor: number };

/** Reads the follow graph with statements prepared once. */
export class GraphView {
  readonly #followers: StatementSync;
  readonly #following: StatementSync;

  constructor(db: DatabaseSync) {
    const list = (self: string, other: string) =>
      db.prepare(
        `SELECT x.did, a.handle, a.display_name, a.avatar_cid, f.indexed_at, f.${other} AS actor
         FROM follows f JOIN actors x ON x.id = f.${other} LEFT JOIN profiles a ON a.did = x.did
         WHERE f.${self} = ${actorIdSql("?1")}
           AND (f.indexed_at, f.${other}) < (?2, ?3)
         ORDER BY f.indexed_at DESC, f.${other} DESC LIMIT ?4`,
      );
    this.#followers = list("subject", "follower");
    this.#following = list("follower", "subject");
  }

  /** Accounts following `did`. */
  followers(did: string, opts: { limit: number; cursor: IdKey | null }): ActorPage {
    return page(this.#followers, did, opts);
  }

  /** Accounts `did` follows. */
  following(did: string, opts: { limit: number; cursor: IdKey | null }): ActorPage {
    return page(this.#following, did, opts);
  }
}

function page(
  stmt: StatementSync,
  did: string,
  opts: { limit: number; cursor: IdKey | null },
): ActorPage {
  // The tiebreak is the actor's interned id (schema version 5).
  const [time, last] = opts.cursor ?? [TOP_TIME, Number.MAX_SAFE_INTEGER];
  const rows = stmt.all(did, time, last, opts.limit + 1) as unknown as GraphRow[];
  const more = rows.length > opts.limit;
  if (more) rows.length = opts.limit;
  const end = rows[rows.length - 1];
  return {
    rows: rows.map(({ did, handle, display_name, avatar_cid }) => ({
      did,
      handle,
      display_name,
      avatar_cid,
    })),
    next: more ? [end.indexed_at, end.actor] : null,
  };
}
