/**
 * The account host's HTTP application: mounts the XRPC routers and the well-known documents,
 * puts the context on every request (`c.var.ctx`) and maps every error to XRPC JSON.
 *
 * @module
 */

import { Hono } from "hono";
import type { PdsContext, PdsEnv } from "./context.ts";
import { corsMiddleware } from "./cors.ts";
import { handleNotFound, handleXrpcError, XrpcError } from "./xrpc/errors.ts";
import { healthRoutes } from "./xrpc/health.ts";
import { identityRoutes, wellKnownRoutes } from "./xrpc/identity.ts";
import { serverRoutes } from "./xrpc/server.ts";
import { accountSecurityRoutes } from "./xrpc/account_security.ts";
import { moderationRoutes } from "./xrpc/moderation.ts";
import { recordTakedownRoutes } from "./xrpc/record_takedowns.ts";
import { repoRoutes } from "./xrpc/repo.ts";
import { syncRoutes } from "./xrpc/sync.ts";
import { accountStateRoutes } from "./xrpc/account_state.ts";
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
  app.use("*", corsMiddleware(ctx.config.corsOrigins));

  app.route("/", wellKnownRoutes(ctx));
  app.route("/", serverRoutes(ctx));
  app.route("/", accountSecurityRoutes(ctx));
  app.route("/", identityRoutes(ctx));
  app.route("/", moderationRoutes(ctx));
  app.route("/", recordTakedownRoutes(ctx));
  app.route("/", repoRoutes(ctx));
  app.route("/", syncRoutes(ctx));
  app.route("/", accountStateRoutes(ctx));
  app.route("/", subscribeRoutes(ctx));
  app.route("/", healthRoutes(ctx));

  app.onError(handleXrpcError(ctx.log));
  app.notFound(handleNotFound(app));
  return app;
}
