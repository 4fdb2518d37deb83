/**
 * CORS of the account host (`PDS_CORS_ORIGINS`): the middleware of `runtime/cors.ts` with the
 * request headers of atproto clients. Tokens travel as bearer headers, never cookies, so the
 * list only narrows which web apps may call it from a browser.
 *
 * @module
 */

import type { MiddlewareHandler } from "hono";
import { corsMiddleware as corsFor } from "../runtime/cors.ts";

/**
 * Request headers a browser client may send: bearer tokens and JSON bodies, and the atproto
 * headers off-the-shelf clients (`@atproto/api`) add to every call.
 */
export const CORS_ALLOW_HEADERS: readonly string[] = [
  "Authorization",
  "Content-Type",
  "atproto-accept-labelers",
  "atproto-proxy",
];

/** Warning logged once at startup when `PDS_CORS_ORIGINS` is unset. */
export const WARN_CORS_UNSET =
  "PDS_CORS_ORIGINS is not set: every web origin may call the account host";

/** CORS middleware for `origins` (`PdsConfig.corsOrigins`; null means every origin). */
export function corsMiddleware(origins: readonly string[] | null): MiddlewareHandler {
  return corsFor(origins, { allowHeaders: CORS_ALLOW_HEADERS });
}
