/**
 * Notifications (spec 2.7, 3.1, 4.2 rules 6-7, private):
 * - `GET /api/notifications` (`did`, `cursor`, `limit`): `{notifications, cursor}`;
 * - `GET /api/notifications/count` (`did`): `{count}` (unread);
 * - `POST /api/notifications/seen` (JSON `{did, seenAt}`, `seenAt` a datetime or null):
 *   `{ok: true, updated}`.
 *
 * @module
 */

import { Hono } from "hono";
import { isValidDatetime } from "../../shared/syntax.ts";
import type { AuthEnv } from "../auth/verifier.ts";
import { decodeIdKey, nextCursor } from "../views/cursor.ts";
import { presentNotification } from "../views/present.ts";
import type { AsyncViews } from "../db/store.ts";
import type { AppviewContext } from "../context.ts";
import { invalidRequest } from "./errors.ts";
import { checkDid, cursorParam, echo, limitParam, readJson } from "./params.ts";
import { type PrivateGuard, subjectParam } from "./private_guard.ts";

/** Routes of notifications. */
export function notificationRoutes(
  ctx: AppviewContext,
  views: AsyncViews,
  guard: PrivateGuard,
): Hono<AuthEnv> {
  const app = new Hono<AuthEnv>();
  app.get("/api/notifications", guard.middleware, async (c) => {
    const did = subjectParam(c, guard);
    const page = await views.notifications.list(did, {
      limit: limitParam(c),
      cursor: cursorParam(c, decodeIdKey),
    });
    return c.json({
      notifications: page.rows.map(presentNotification),
      cursor: nextCursor(page.next),
    });
  });
  app.get("/api/notifications/count", guard.middleware, async (c) => {
    const did = subjectParam(c, guard);
    return c.json({ count: await views.notifications.unreadCount(did) });
  });
  app.post("/api/notifications/seen", guard.middleware, async (c) => {
    const { did, seenAt } = parseSeenBody(await readJson(c.req.raw));
    guard.checkSubject(c, did);
    const updated = await views.notifications.markSeen(did, seenAt, ctx.now().toISOString());
    return c.json({ ok: true, updated });
  });
  return app;
}

/** The `seen` payload: `did` and `seenAt` (normalised to the `indexed_at` form, or null). */
function parseSeenBody(body: unknown): { did: string; seenAt: string | null } {
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    throw invalidRequest("Request body is not a JSON object");
  }
  const { did, seenAt } = body as { did?: unknown; seenAt?: unknown };
  if (did === undefined) throw invalidRequest("Missing required parameter: did");
  if (typeof did !== "string") throw invalidRequest(`Invalid did: ${echo(JSON.stringify(did))}`);
  checkDid(did);
  if (seenAt === undefined) throw invalidRequest("Missing required parameter: seenAt");
  if (seenAt === null) return { did, seenAt: null };
  if (typeof seenAt !== "string" || !isValidDatetime(seenAt)) {
    throw invalidRequest(`Invalid seenAt: ${echo(String(JSON.stringify(seenAt)))}`);
  }
  // `indexed_at` values are `toISOString()` text; compare in that form (millisecond precision,
  // so a sub-millisecond `seenAt` still covers the notification it echoes).
  const ms = Date.parse(seenAt);
  if (Number.isNaN(ms)) throw invalidRequest(`Invalid seenAt: ${echo(seenAt)}`);
  // Past year 9999 toISOString() writes "+010000-...", which sorts before every stored time
  // and would mark nothing: such a seenAt covers everything, as the latest four-digit time does.
  return { did, seenAt: new Date(Math.min(ms, LATEST_ISO_MS)).toISOString() };
}

const LATEST_ISO_MS = Date.parse("9999-12-31T23:59:59.999Z");
