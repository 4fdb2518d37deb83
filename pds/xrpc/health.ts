/**
 * `GET /xrpc/_health`, as the reference account host serves it: 200 `{"version": ...}` when the
 * store answers a read, else 503 `{"version": ..., "error": "Service Unavailable"}` (logged). For
 * container health checks and load balancers; no authentication, never cached.
 *
 * @module
 */

import { Hono } from "hono";
import { SERVICE_VERSION } from "../../shared/version.ts";
import type { PdsContext, PdsEnv } from "../context.ts";
import { seqHeadKey } from "../store/keys.ts";

/** Path of the health route (not an NSID: the reference host's name for it). */
export const HEALTH_PATH = "/xrpc/_health";

/** Routes of the health check. */
export function healthRoutes(ctx: PdsContext): Hono<PdsEnv> {
  const app = new Hono<PdsEnv>();
  app.get(HEALTH_PATH, async (c) => {
    c.header("Cache-Control", "no-store");
    try {
      // One small read of the key every commit writes: the store is open and answers.
      await ctx.kv.get(seqHeadKey());
    } catch (err) {
      ctx.log.error("health check failed", { err });
      return c.json({ version: SERVICE_VERSION, error: "Service Unavailable" }, 503);
    }
    return c.json({ version: SERVICE_VERSION });
  });
  return app;
}
