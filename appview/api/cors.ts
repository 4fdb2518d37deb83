/**
 * CORS of the index's HTTP API (spec 5.3 `APPVIEW_CORS_ORIGINS`).
 *
 * With a list of origins, only those origins are echoed back (`Vary: Origin`); any other origin
 * gets no `Access-Control-Allow-Origin` and the browser blocks the response. Unset (null): every
 * origin, `Access-Control-Allow-Origin: *` (the startup logs a warning). Preflight requests
 * (`OPTIONS`) are answered 204 with the allowed methods and headers before routing.
 *
 * @module
 */

import type { MiddlewareHandler } from "hono";
import { cors } from "hono/cors";

/** Methods of the query API. */
export const CORS_ALLOW_METHODS: readonly string[] = ["GET", "POST", "OPTIONS"];
/** Request headers a browser client may send. */
export const CORS_ALLOW_HEADERS: readonly string[] = ["Authorization", "Content-Type"];
/** How long a browser may cache a preflight answer, seconds. */
export const CORS_MAX_AGE_SECONDS = 600;

/**
 * CORS middleware for `origins` (`AppviewConfig.corsOrigins`; null means every origin).
 * Preflights go to Hono's `cors()`; on every other request the same headers are set on the
 * handler's response as it is, after it ran. (`cors()` writes them on `c.res` before the handler,
 * and Hono then copies each response into a new one around its body stream: every response body
 * became a JavaScript stream, CPU and garbage on every request.)
 */
export function corsMiddleware(origins: readonly string[] | null): MiddlewareHandler {
  const allowed = origins === null ? null : new Set(origins);
  const preflight = cors({
    origin: allowed === null ? "*" : (origin) => (allowed.has(origin) ? origin : null),
    allowMethods: [...CORS_ALLOW_METHODS],
    allowHeaders: [...CORS_ALLOW_HEADERS],
    maxAge: CORS_MAX_AGE_SECONDS,
  });
  return async (c, next) => {
    if (c.req.method === "OPTIONS") return preflight(c, next);
    await next();
    if (c.res.status === 101) return;
    const headers = c.res.headers;
    if (allowed === null) {
      headers.set("Access-Control-Allow-Origin", "*");
      return;
    }
    const origin = c.req.header("origin");
    if (origin !== undefined && allowed.has(origin)) {
      headers.set("Access-Control-Allow-Origin", origin);
    }
    headers.append("Vary", "Origin");
  };
}
