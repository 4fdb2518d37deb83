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

/** CORS middleware for `origins` (`AppviewConfig.corsOrigins`; null means every origin). */
export function corsMiddleware(origins: readonly string[] | null): MiddlewareHandler {
  const allowed = origins === null ? null : new Set(origins);
  return cors({
    origin: allowed === null ? "*" : (origin) => (allowed.has(origin) ? origin : null),
    allowMethods: [...CORS_ALLOW_METHODS],
    allowHeaders: [...CORS_ALLOW_HEADERS],
    maxAge: CORS_MAX_AGE_SECONDS,
  });
}
