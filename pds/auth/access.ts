/**
 * Access-token middleware of the account host. `requireAccess()` reads `Authorization: Bearer`,
 * verifies the token (ES256 signature with the service key, expiry, `typ: at+jwt`, scope
 * `com.atproto.access` or `com.atproto.appPass`, the issued audience) and sets
 * `c.var.auth = {did, appPassword}`. `requireAccess(ctx, {full: true})` guards the methods an
 * app password may not call (docs/behaviour.md 4.1 rule 12): its tokens get 400 `InvalidToken`
 * `Bad token scope`, as on the reference host.
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
import type { AuthInfo, PdsContext, PdsEnv } from "../context.ts";
import { XrpcError } from "../xrpc/errors.ts";
import { APP_PASS_SCOPE, TokenError, verifyAccessToken } from "./tokens.ts";
import { refuseInactiveAccount } from "../xrpc/account_checks.ts";

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
 * Hono middleware requiring a valid access token; with `full`, one of a login with the account's
 * password (not an app password). `ctx` defaults to the context that `createPdsApp` puts on every
 * request (`c.var.ctx`).
 */
export function requireAccess(
  ctx?: PdsContext,
  opts: { full?: boolean } = {},
): MiddlewareHandler<PdsEnv> {
  return async function requireAccessMiddleware(c, next) {
    const pds = ctx ?? c.get("ctx");
    const token = readBearerToken(c);
    const auth = await checkAccessToken(pds, token);
    if (opts.full && auth.appPassword) {
      throw new XrpcError(400, "InvalidToken", "Bad token scope");
    }
    await refuseInactiveAccount(pds, auth.did, c.req.path);
    c.set("auth", auth);
    c.header("Cache-Control", "private");
    c.header("Vary", "Authorization");
    await next();
  };
}

/**
 * Verifies an access token (cached) and returns its subject DID and whether it is an app
 * password's; throws `XrpcError`.
 */
export async function checkAccessToken(ctx: PdsContext, token: string): Promise<AuthInfo> {
  const cache = ctx.accessTokens;
  const now = ctx.now();
  const hit = cache.get(token);
  if (hit !== undefined && now < hit.expMs) return { did: hit.did, appPassword: hit.appPassword };
  try {
    const claims = await verifyAccessToken(ctx, token);
    const appPassword = claims.scope === APP_PASS_SCOPE;
    if (cache.size >= CACHE_LIMIT) cache.clear();
    cache.set(token, { did: claims.sub, expMs: claims.exp * 1000, appPassword });
    return { did: claims.sub, appPassword };
  } catch (err) {
    if (hit !== undefined) cache.delete(token);
    if (err instanceof TokenError) throw new XrpcError(400, err.code, err.message);
    throw err;
  }
}
