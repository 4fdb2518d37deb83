/**
 * Followers and following lists on PostgreSQL (appview/views/graph.ts): the same statement, one
 * round trip per page.
 *
 * @module
 */

import { actorIdSql } from "../../db/schema.ts";
import { TOP_TIME } from "../cursor.ts";
import type { GraphOptions } from "../graph.ts";
import { type ActorPage, actorPage, type ActorRow } from "../present.ts";
import { unavailableSql } from "../safety.ts";
import { type PgClient, queryRows } from "./query.ts";

type GraphRow = ActorRow & { indexed_at: string; actor: number };

function listSql(self: string, other: string): string {
  return `SELECT x.did, a.handle, a.display_name, a.avatar_cid, f.indexed_at, f.${other} AS actor
    FROM follows f JOIN actors x ON x.id = f.${other} LEFT JOIN profiles a ON a.did = x.did
    WHERE f.${self} = ${actorIdSql("$1")}
      AND (f.indexed_at, f.${other}) < ($2, $3)
      AND NOT ${unavailableSql(actorIdSql("$5"), `f.${other}`)}
    ORDER BY f.indexed_at DESC, f.${other} DESC LIMIT $4`;
}

const FOLLOWERS = listSql("subject", "follower");
const FOLLOWING = listSql("follower", "subject");

/** Reads the follow graph. */
export class PgGraphView {
  readonly #sql: PgClient;

  constructor(sql: PgClient) {
    this.#sql = sql;
  }

  /**
   * Accounts following `did`, none inactive (spec 4.2 rule 12); with `viewerDid`, none the viewer
   * blocks or is blocked by.
   */
  async followers(did: string, opts: GraphOptions): Promise<ActorPage> {
    return await this.#page(FOLLOWERS, did, opts);
  }

  /** Accounts `did` follows; left out as in {@link followers}. */
  async following(did: string, opts: GraphOptions): Promise<ActorPage> {
    return await this.#page(FOLLOWING, did, opts);
  }

  async #page(text: string, did: string, opts: GraphOptions): Promise<ActorPage> {
    const [time, last] = opts.cursor ?? [TOP_TIME, Number.MAX_SAFE_INTEGER];
    const viewer = opts.viewerDid ?? null;
    const rows = await queryRows<GraphRow>(this.#sql, text, [
      did,
      time,
      last,
      opts.limit + 1,
      viewer,
    ]);
    return actorPage(rows, opts.limit, (end) => [end.indexed_at, end.actor]);
  }
}
