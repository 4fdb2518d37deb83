/**
 * CORS of both servers' HTTP APIs (`PDS_CORS_ORIGINS`, `APPVIEW_CORS_ORIGINS`).
 *
 * With a list of origins, only those origins are echoed back (`Vary: Origin`); any other origin
 * gets no `Access-Control-Allow-Origin` and the browser blocks the response. Unset (null): every
 * origin, `Access-Control-Allow-Origin: *` (the startup logs a warning). Preflight requests
 * (`OPTIONS`) are answered 204 with the allowed methods and headers before routing. Allowed
 * origins may read `Retry-After` (not a CORS-safelisted header), so a browser client can say when
 * to try again after a 429.
 *
 * @module
 */

import type { MiddlewareHandler } from "hono";
import { cors } from "hono/cors";

/** Methods of both APIs (queries are GET, procedures POST). */
export const CORS_ALLOW_METHODS: readonly string[] = ["GET", "POST", "OPTIONS"];
/** Response headers beyond the safelisted ones that a cross-origin caller may read. */
const EXPOSE_HEADERS = "Retry-After";
/** How long a browser may cache a preflight answer, seconds. */
export const CORS_MAX_AGE_SECONDS = 600;

/**
 * CORS middleware for `origins` (null means every origin), allowing the request headers
 * `allowHeaders`. Preflights go to Hono's `cors()`; on every other request the header is set on
 * the handler's response as it is, after it ran. (`cors()` writes it on `c.res` before the
 * handler runs, and Hono then copies every response into a new one around its body stream, so
 * that each response body became a JavaScript stream: CPU and garbage on every request, about a
 * tenth of createRecord's main-thread time.) Set afterwards, it also reaches the responses
 * handlers build themselves (blobs, CARs). A WebSocket upgrade (101) is left untouched.
 */
export function corsMiddleware(
  origins: readonly string[] | null,
  opts: { allowHeaders: readonly string[] },
): MiddlewareHandler {
  const allowed = origins === null ? null : new Set(origins);
  const preflight = cors({
    origin: allowed === null ? "*" : (origin) => (allowed.has(origin) ? origin : null),
    allowMethods: [...CORS_ALLOW_METHODS],
    allowHeaders: [...opts.allowHeaders],
    maxAge: CORS_MAX_AGE_SECONDS,
  });
  return async function corsHeaders(c, next) {
    if (c.req.method === "OPTIONS") return preflight(c, next);
    await next();
    if (c.res.status === 101) return;
    const headers = c.res.headers;
    if (allowed === null) {
      headers.set("Access-Control-Allow-Origin", "*");
      headers.set("Access-Control-Expose-Headers", EXPOSE_HEADERS);
      return;
    }
    const origin = c.req.header("origin");
    if (origin !== undefined && allowed.has(origin)) {
      headers.set("Access-Control-Allow-Origin", origin);
      headers.set("Access-Control-Expose-Headers", EXPOSE_HEADERS);
    }
    headers.append("Vary", "Origin");
  };
}
