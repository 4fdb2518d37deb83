/**
 * `GET /api/timeline/home` (spec 4.2, private): `{posts, cursor}`.
 *
 * @module
 */

import { Hono } from "hono";
import type { AuthEnv } from "../auth/verifier.ts";
import { decodeTextKey, nextCursor } from "../views/cursor.ts";
import { presentPost } from "../views/present.ts";
import type { AsyncViews } from "../db/store.ts";
import { cursorParam, limitParam } from "./params.ts";
import { type PrivateGuard, subjectParam } from "./private_guard.ts";

/** Routes of the home timeline. */
export function timelineRoutes(views: AsyncViews, guard: PrivateGuard): Hono<AuthEnv> {
  const app = new Hono<AuthEnv>();
  app.get("/api/timeline/home", guard.middleware, async (c) => {
    const did = subjectParam(c, guard);
    const page = await views.timeline.home(did, {
      limit: limitParam(c),
      cursor: cursorParam(c, decodeTextKey),
    });
    return c.json({
      posts: page.rows.map(presentPost),
      cursor: nextCursor(page.next),
    });
  });
  return app;
}
