/**
 * `GET /api/search` (spec 4.2, public): `{posts, q, cursor}` (the `cursor`, for the next page,
 * extends the spec's `{posts, q}`).
 *
 * @module
 */

import { Hono } from "hono";
import { decodeRowId, nextCursor } from "../views/cursor.ts";
import { presentPost } from "../views/present.ts";
import type { AsyncViews } from "../db/store.ts";
import { invalidRequest } from "./errors.ts";
import { cursorParam, limitParam, viewerParam } from "./params.ts";

/** Longest query accepted. */
export const MAX_QUERY_LENGTH = 1_000;

/** Routes of search. */
export function searchRoutes(views: AsyncViews): Hono {
  const app = new Hono();
  app.get("/api/search", async (c) => {
    const q = c.req.query("q");
    if (q === undefined) throw invalidRequest("Missing required parameter: q");
    if (q.length > MAX_QUERY_LENGTH) {
      throw invalidRequest(`Invalid q: longer than ${MAX_QUERY_LENGTH} characters`);
    }
    const page = await views.search.search(q, {
      limit: limitParam(c),
      before: cursorParam(c, decodeRowId),
      viewerDid: viewerParam(c),
    });
    return c.json({
      posts: page.rows.map(presentPost),
      q,
      cursor: nextCursor(page.next),
    });
  });
  return app;
}
