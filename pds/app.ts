/**
 * The account host's HTTP application: mounts the XRPC routers and the well-known documents,
 * puts the context on every request (`c.var.ctx`) and maps every error to XRPC JSON.
 *
 * @module
 */

import { Hono } from "hono";
import { cors } from "hono/cors";
import type { PdsContext, PdsEnv } from "./context.ts";
import { handleNotFound, handleXrpcError, XrpcError } from "./xrpc/errors.ts";
import { identityRoutes, wellKnownRoutes } from "./xrpc/identity.ts";
import { serverRoutes } from "./xrpc/server.ts";
import { repoRoutes } from "./xrpc/repo.ts";
import { syncRoutes } from "./xrpc/sync.ts";
import { subscribeRoutes } from "./xrpc/subscribe.ts";

/**
 * Hard cap on any declared request body. Endpoints enforce their own, smaller limits while
 * reading (JSON procedures 1 MB, blobs 1 MiB); this only refuses absurd uploads up front.
 */
export const MAX_REQUEST_BYTES = 8 * 1024 * 1024;

/** Builds the account host's Hono app for `ctx`. */
export function createPdsApp(ctx: PdsContext): Hono<PdsEnv> {
  const app = new Hono<PdsEnv>();
  app.use("*", async (c, next) => {
    c.set("ctx", ctx);
    const length = c.req.header("content-length");
    if (length !== undefined && Number(length) > MAX_REQUEST_BYTES) {
      throw new XrpcError(
        413,
        "PayloadTooLarge",
        `Request body is larger than ${MAX_REQUEST_BYTES} bytes`,
      );
    }
    await next();
  });
  // Tokens travel as bearer headers, never cookies, so any origin may call the account host.
  const preflight = cors({ origin: "*", maxAge: 600 });
  app.use("*", async (c, next) => {
    if (c.req.method === "OPTIONS") return preflight(c, next);
    await next();
    // What cors() adds to any other answer, set on the handler's response as it is. cors()
    // writes it on c.res before the handler runs, and Hono then copies every response into a
    // new one around its body stream, so that each response body became a JavaScript stream
    // (CPU and garbage on every request, about a tenth of createRecord's main-thread time).
    // Set afterwards, it also reaches the responses handlers build themselves (blobs, CARs).
    if (c.res.status !== 101) c.res.headers.set("Access-Control-Allow-Origin", "*");
  });

  app.route("/", wellKnownRoutes(ctx));
  app.route("/", serverRoutes(ctx));
  app.route("/", identityRoutes(ctx));
  app.route("/", repoRoutes(ctx));
  app.route("/", syncRoutes(ctx));
  app.route("/", subscribeRoutes(ctx));

  app.onError(handleXrpcError(ctx.log));
  app.notFound(handleNotFound(app));
  return app;
}
