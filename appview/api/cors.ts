/**
 * CORS of the index's HTTP API (spec 5.3 `APPVIEW_CORS_ORIGINS`): the middleware of
 * `runtime/cors.ts` with the request headers a browser client of the index sends.
 *
 * @module
 */

import type { MiddlewareHandler } from "hono";
import { corsMiddleware as corsFor } from "../../runtime/cors.ts";

/** Request headers a browser client may send. */
export const CORS_ALLOW_HEADERS: readonly string[] = ["Authorization", "Content-Type"];

/** CORS middleware for `origins` (`AppviewConfig.corsOrigins`; null means every origin). */
export function corsMiddleware(origins: readonly string[] | null): MiddlewareHandler {
  return corsFor(origins, { allowHeaders: CORS_ALLOW_HEADERS });
}
