/**
 * Access-token middleware of the account host. `requireAccess()` reads `Authorization: Bearer`,
 * verifies the token (ES256 signature with the service key, expiry, `typ: at+jwt`, scope
 * `com.atproto.access`, the issued audience) and sets `c.var.auth = {did}`.
 *
 * Errors follow the reference PDS so that atproto clients refresh by themselves: no header 401
 * `AuthMissing`; expired 400 `ExpiredToken`; anything else 400 `InvalidToken`.
 *
 * Verified tokens are cached until their `exp` (per context, bounded), so a repeated token costs
 * a map lookup instead of an ECDSA verification on the write path.
 *
 * @module
 */

import type { Context, MiddlewareHandler } from "hono";
import type { PdsContext, PdsEnv } from "../context.ts";
import { XrpcError } from "../xrpc/errors.ts";
import { TokenError, verifyAccessToken } from "./tokens.ts";
import { refuseInactiveAccount } from "../xrpc/account_state.ts";

const CACHE_LIMIT = 10_000;

/**
 * Returns the bearer token of the request; throws 401 `AuthMissing` when there is none and 400
 * `InvalidToken` for another scheme.
 */
export function readBearerToken(c: Context): string {
  const header = c.req.header("authorization");
  if (header === undefined || header.trim() === "") {
    throw new XrpcError(401, "AuthMissing", "Authorization header with a bearer token is required");
  }
  const match = /^(\S+)\s+(\S+)\s*$/.exec(header.trim());
  if (!match || match[1].toLowerCase() !== "bearer") {
    throw new XrpcError(400, "InvalidToken", "Authorization scheme must be Bearer");
  }
  return match[2];
}

/**
 * Hono middleware requiring a valid access token. `ctx` defaults to the context that
 * `createPdsApp` puts on every request (`c.var.ctx`).
 */
export function requireAccess(ctx?: PdsContext): MiddlewareHandler<PdsEnv> {
  return async function requireAccessMiddleware(c, next) {
    const pds = ctx ?? c.get("ctx");
    const token = readBearerToken(c);
    const did = await checkAccessToken(pds, token);
    await refuseInactiveAccount(pds, did, c.req.path);
    c.set("auth", { did });
    c.header("Cache-Control", "private");
    c.header("Vary", "Authorization");
    await next();
  };
}

/** Verifies an access token (cached) and returns its subject DID; throws `XrpcError`. */
export async function checkAccessToken(ctx: PdsContext, token: string): Promise<string> {
  const cache = ctx.accessTokens;
  const now = ctx.now();
  const hit = cache.get(token);
  if (hit !== undefined && now < hit.expMs) return hit.did;
  try {
    const claims = await verifyAccessToken(ctx, token);
    if (cache.size >= CACHE_LIMIT) cache.clear();
    cache.set(token, { did: claims.sub, expMs: claims.exp * 1000 });
    return claims.sub;
  } catch (err) {
    if (hit !== undefined) cache.delete(token);
    if (err instanceof TokenError) throw new XrpcError(400, err.code, err.message);
    throw err;
  }
}
