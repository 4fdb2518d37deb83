/**
 * `GET /api/profile/<handle>` and `GET /api/profile?did=` (spec 2.4, 4.2 rule 3, public). An
 * unknown or placeholder handle, or an unknown DID, answers 200 with the synthetic empty profile
 * (`did` is the empty string). With `viewerDid`, a profile of an account the viewer blocks or is
 * blocked by comes without posts (spec 4.2 rule 10).
 *
 * @module
 */

import { Hono } from "hono";
import { placeholderHandle } from "../db/handles.ts";
import { emptyProfile } from "../views/profile.ts";
import type { AsyncViews } from "../db/store.ts";
import { invalidRequest } from "./errors.ts";
import { didParam, echo, viewerParam } from "./params.ts";

/** Longest handle looked up (a valid handle has at most 253 characters). */
const MAX_HANDLE_PARAM = 256;

/** Routes of profiles. */
export function profileRoutes(views: AsyncViews): Hono {
  const app = new Hono();
  app.get("/api/profile", async (c) => {
    const did = didParam(c);
    const opts = { viewerDid: viewerParam(c) };
    return c.json(await views.profiles.byDid(did, opts) ?? emptyProfile(placeholderHandle(did)));
  });
  app.get("/api/profile/:handle", async (c) => {
    const handle = c.req.param("handle");
    if (handle.length > MAX_HANDLE_PARAM) throw invalidRequest(`Invalid handle: ${echo(handle)}`);
    const bare = handle.startsWith("@") ? handle.slice(1) : handle;
    const opts = { viewerDid: viewerParam(c) };
    return c.json(await views.profiles.byHandle(bare, opts) ?? emptyProfile(bare));
  });
  return app;
}
