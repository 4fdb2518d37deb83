/**
 * Followers and following lists (spec 2.6, 4.2 rule 8): actor cards, newest follow first, paged
 * by (follow `indexed_at`, DID).
 *
 * @module
 */

import { actorIdSql } from "../db/schema.ts";
import type { DatabaseSync, StatementSync } from "node:sqlite";
import { type IdKey, TOP_TIME } from "./cursor.ts";
import { type ActorPage, actorPage, type ActorRow } from "./present.ts";
import { unavailableSql } from "./safety.ts";

/** One page of actor rows. */
type GraphRow = ActorRow & { indexed_at: string; actor: number };

/** Paging and the optional viewer of a list (spec 4.2 rule 10). */
export interface GraphOptions {
  limit: number;
  cursor: IdKey | null;
  viewerDid?: string | null;
}

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
           AND NOT ${unavailableSql(actorIdSql("?5"), `f.${other}`)}
         ORDER BY f.indexed_at DESC, f.${other} DESC LIMIT ?4`,
      );
    this.#followers = list("subject", "follower");
    this.#following = list("follower", "subject");
  }

  /**
   * Accounts following `did`, none inactive (spec 4.2 rule 12); with `viewerDid`, none the viewer
   * blocks or is blocked by.
   */
  followers(did: string, opts: GraphOptions): ActorPage {
    return page(this.#followers, did, opts);
  }

  /** Accounts `did` follows; left out as in {@link followers}. */
  following(did: string, opts: GraphOptions): ActorPage {
    return page(this.#following, did, opts);
  }
}

function page(
  stmt: StatementSync,
  did: string,
  opts: GraphOptions,
): ActorPage {
  // The tiebreak is the actor's interned id (schema version 5).
  const [time, last] = opts.cursor ?? [TOP_TIME, Number.MAX_SAFE_INTEGER];
  const viewer = opts.viewerDid ?? null;
  const rows = stmt.all(did, time, last, opts.limit + 1, viewer) as unknown as GraphRow[];
  return actorPage(rows, opts.limit, (end) => [end.indexed_at, end.actor]);
}
