/**
 * `GET /api/followers` and `GET /api/following` (spec 2.6, 4.2 rule 8, public):
 * `{profiles: [ActorProfile], cursor}`, newest follow first.
 *
 * @module
 */

import { Hono } from "hono";
import { decodeIdKey, nextCursor } from "../views/cursor.ts";
import type { ActorPage } from "../views/present.ts";
import { presentActor } from "../views/present.ts";
import type { AsyncViews } from "../db/store.ts";
import { cursorParam, didParam, limitParam, viewerParam } from "./params.ts";

/** Routes of the follow graph. */
export function graphRoutes(views: AsyncViews): Hono {
  const app = new Hono();
  for (const list of ["followers", "following"] as const) {
    app.get(`/api/${list}`, async (c) => {
      const did = didParam(c);
      const opts = {
        limit: limitParam(c),
        cursor: cursorParam(c, decodeIdKey),
        viewerDid: viewerParam(c),
      };
      const page: ActorPage = await views.graph[list](did, opts);
      return c.json({
        profiles: page.rows.map(presentActor),
        cursor: nextCursor(page.next),
      });
    });
  }
  return app;
}
