/**
 * The index's HTTP application: `nosniff` on every response, CORS, the error mapping, a body
 * bound, the query API of spec 4.2 (the private endpoints behind `requireViewer`), the push
 * endpoint and `/healthz`.
 *
 * The views are the store's (`db/store.ts`): a request awaits its view calls; on SQLite each runs
 * statements prepared once per store.
 *
 * @module
 */

import { Hono, type MiddlewareHandler } from "hono";
import { limitBody } from "./api/body_limit.ts";
import { corsMiddleware } from "./api/cors.ts";
import { ApiError, onApiError } from "./api/errors.ts";
import { graphRoutes } from "./api/graph.ts";
import { healthRoutes } from "./api/health.ts";
import { ingestRoutes } from "./api/ingest.ts";
import { echo } from "./api/params.ts";
import { muteRoutes } from "./api/mutes.ts";
import { notificationRoutes } from "./api/notifications.ts";
import { privateGuard } from "./api/private_guard.ts";
import { profileRoutes } from "./api/profile.ts";
import { searchRoutes } from "./api/search.ts";
import { threadRoutes } from "./api/thread.ts";
import { timelineRoutes } from "./api/timeline.ts";
import { webRoutes, type WebRoutesOptions } from "./api/web.ts";
import { viewerRoutes } from "./api/viewer.ts";
import type { TokenVerifier } from "./auth/verifier.ts";
import type { AppviewContext } from "./context.ts";

/** Largest request body of the query API (the `seen` payload is well under 1 KiB). */
export const MAX_API_BODY_BYTES = 16 * 1024;

/** Options of {@link createAppviewApp}. */
export interface AppviewAppOptions {
  /** Verifier of the private endpoints; null when none is configured (see `privateGuard`). */
  verifier: TokenVerifier | null;
  /** The web app to serve at `/` (issue 35); absent: none (the API alone, as in most tests). */
  web?: WebRoutesOptions;
}

/** Builds the index's Hono application over `ctx`. */
export function createAppviewApp(ctx: AppviewContext, opts: AppviewAppOptions): Hono {
  const views = ctx.store.views;
  const guard = privateGuard(opts.verifier, ctx.config.authRequired);
  const app = new Hono();
  app.onError(onApiError(ctx.log));
  app.use("*", noSniff());
  app.use("*", corsMiddleware(ctx.config.corsOrigins));
  app.use(
    "/api/*",
    limitBody(
      MAX_API_BODY_BYTES,
      () =>
        new ApiError(
          413,
          "PayloadTooLarge",
          `Request body is larger than ${MAX_API_BODY_BYTES} bytes`,
        ),
    ),
  );
  app.route("/", timelineRoutes(views, guard));
  app.route("/", notificationRoutes(ctx, views, guard));
  app.route("/", muteRoutes(ctx, views, guard));
  app.route("/", profileRoutes(views));
  app.route("/", searchRoutes(views));
  app.route("/", threadRoutes(views));
  app.route("/", graphRoutes(views));
  app.route("/", viewerRoutes(views));
  app.route("/", ingestRoutes(ctx));
  app.route("/", healthRoutes(ctx));
  if (opts.web) app.route("/", webRoutes(opts.web));
  const allowedOn = routeMethods(app);
  app.notFound((c) => {
    const allowed = allowedOn(c.req.path);
    if (allowed.length === 0) {
      return c.json(
        { error: "NotFound", message: `No route: ${c.req.method} ${echo(c.req.path)}` },
        404,
      );
    }
    c.header("Allow", allowed.join(", "));
    return c.json({
      error: "MethodNotAllowed",
      message: `Method ${echo(c.req.method)} is not allowed on ${echo(c.req.path)}; use ${
        allowed.join(" or ")
      }`,
    }, 405);
  });
  return app;
}

/**
 * `X-Content-Type-Options: nosniff` on every response (errors, preflights and the web app's
 * files included): a browser never reads a JSON answer that echoes user input, or an asset, as
 * HTML or script. Set on the response as it is, after the handler (see `corsMiddleware`).
 */
function noSniff(): MiddlewareHandler {
  return async function noSniff(c, next) {
    await next();
    if (c.res.status !== 101) c.res.headers.set("X-Content-Type-Options", "nosniff");
  };
}

/** For a path, the methods some route of `app` answers it with (none: no such path). */
function routeMethods(app: Hono): (path: string) => string[] {
  const routes = app.routes
    .filter((r) => r.method !== "ALL")
    .map((r) => ({
      method: r.method,
      pattern: patternOf(r.path),
    }));
  return (path) => [...new Set(routes.filter((r) => r.pattern.test(path)).map((r) => r.method))];
}

/** A Hono route path as a RegExp: `:name` one segment; a trailing `/*` also matches nothing. */
function patternOf(path: string): RegExp {
  const escaped = path.replace(/[.+?^${}()|[\]\\]/g, "\\$&").replace(/:[^/]+/g, "[^/]+");
  return new RegExp(`^${escaped.replace(/\/\*$/, "(?:/.*)?").replace(/\*/g, ".*")}$`);
}
