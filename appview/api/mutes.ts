/**
 * Mutes (spec 4.2 rule 11, private; issue 37): a member's own list of accounts whose posts and
 * notifications leave their timeline and notifications. Not a record: it lives in the index only.
 * - `GET /api/mutes` (`did`, `cursor`, `limit`): `{profiles: [ActorProfile], cursor}`, newest
 *   mute first;
 * - `POST /api/mutes` (JSON `{did, subject}`): `{ok: true, muted}` (`muted` false when it
 *   already was);
 * - `GET /api/mutes/<subject DID>` (`did`): `{muted}`, whether the member muted that account (what
 *   a profile's Mute button shows, without paging the list);
 * - `DELETE /api/mutes/<subject DID>` (`did`): `{ok: true, removed}`.
 *
 * @module
 */

import { Hono } from "hono";
import type { AuthEnv } from "../auth/verifier.ts";
import type { AppviewContext } from "../context.ts";
import { decodeIdKey, nextCursor } from "../views/cursor.ts";
import { presentActor } from "../views/present.ts";
import { MAX_MUTES } from "../views/safety.ts";
import type { AsyncViews } from "../db/store.ts";
import { invalidRequest } from "./errors.ts";
import { checkDid, cursorParam, echo, limitParam, readJson } from "./params.ts";
import { type PrivateGuard, subjectParam } from "./private_guard.ts";

/** Routes of mutes. */
export function muteRoutes(
  ctx: AppviewContext,
  views: AsyncViews,
  guard: PrivateGuard,
): Hono<AuthEnv> {
  const app = new Hono<AuthEnv>();
  app.get("/api/mutes", guard.middleware, async (c) => {
    const did = subjectParam(c, guard);
    const page = await views.safety.mutes(did, {
      limit: limitParam(c),
      cursor: cursorParam(c, decodeIdKey),
    });
    return c.json({ profiles: page.rows.map(presentActor), cursor: nextCursor(page.next) });
  });
  app.post("/api/mutes", guard.middleware, async (c) => {
    const { did, subject } = parseMuteBody(await readJson(c.req.raw));
    guard.checkSubject(c, did);
    const muted = await views.safety.mute(did, subject, ctx.now().toISOString());
    if (muted === null) {
      throw invalidRequest(`Mute list is full: at most ${MAX_MUTES} accounts`);
    }
    return c.json({ ok: true, muted });
  });
  app.get("/api/mutes/:subject", guard.middleware, async (c) => {
    const did = subjectParam(c, guard);
    const subject = checkDid(c.req.param("subject"), "subject");
    return c.json({ muted: await views.safety.muted(did, subject) });
  });
  app.delete("/api/mutes/:subject", guard.middleware, async (c) => {
    const did = subjectParam(c, guard);
    const subject = checkDid(c.req.param("subject"), "subject");
    return c.json({ ok: true, removed: await views.safety.unmute(did, subject) });
  });
  return app;
}

/** The mute payload: `did` (the member) and `subject` (the muted account), distinct DIDs. */
function parseMuteBody(body: unknown): { did: string; subject: string } {
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    throw invalidRequest("Request body is not a JSON object");
  }
  const fields = body as { did?: unknown; subject?: unknown };
  const out: Record<"did" | "subject", string> = { did: "", subject: "" };
  for (const name of ["did", "subject"] as const) {
    const value = fields[name];
    if (value === undefined) throw invalidRequest(`Missing required parameter: ${name}`);
    if (typeof value !== "string") {
      throw invalidRequest(`Invalid ${name}: ${echo(String(JSON.stringify(value)))}`);
    }
    out[name] = checkDid(value, name);
  }
  if (out.did === out.subject) throw invalidRequest(`Invalid subject: ${echo(out.subject)} is did`);
  return out;
}
