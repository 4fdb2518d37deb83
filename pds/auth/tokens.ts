/**
 * Access and refresh tokens of the account host (spec 5.1): ES256, signed with the service key
 * derived from `PDS_JWT_SECRET`.
 *
 * - access: header `typ: at+jwt`, `scope: com.atproto.access` (`com.atproto.appPass` for a login
 *   with an app password), `aud` = the index's service DID, 1 hour;
 * - refresh: header `typ: refresh+jwt`, `scope: com.atproto.refresh`, `aud` = the account host's
 *   own DID, 90 days.
 *
 * Both carry `iss` (the account host's DID), `sub`, `iat`, `exp` and a random `jti`. Each kind is
 * checked by header type, scope and audience, so neither is accepted in place of the other.
 *
 * Verification failures are {@link TokenError}s with the reference PDS's wire names: `ExpiredToken`
 * for an expired (or revoked) token and `InvalidToken` for everything else, both answered with 400
 * so that atproto clients refresh by themselves (docs/protocol.md 1.3).
 *
 * @module
 */

import { type JwtClaims, JwtError, REASON_EXPIRED, signJwt, verifyJwt } from "../../shared/jwt.ts";
import { decodeJwtUnverified } from "../../shared/jwt.ts";
import type { PdsContext } from "../context.ts";

/** `scope` of access tokens. */
export const ACCESS_SCOPE = "com.atproto.access";
/** `scope` of access tokens of a login with an app password (docs/behaviour.md 4.1 rule 12). */
export const APP_PASS_SCOPE = "com.atproto.appPass";
/** `scope` of refresh tokens. */
export const REFRESH_SCOPE = "com.atproto.refresh";
/** Header `typ` of access tokens. */
export const ACCESS_TYP = "at+jwt";
/** Header `typ` of refresh tokens. */
export const REFRESH_TYP = "refresh+jwt";
/** Access token lifetime (spec 8). */
export const ACCESS_TTL_SECONDS = 60 * 60;
/** Refresh token lifetime (spec 8). */
export const REFRESH_TTL_SECONDS = 90 * 24 * 60 * 60;

/** Why a token was refused; `code` is the wire error name. */
export class TokenError extends Error {
  override readonly name = "TokenError";
  constructor(readonly code: "ExpiredToken" | "InvalidToken", message: string) {
    super(message);
  }
}

/** Verified claims of an access or refresh token. */
export interface VerifiedClaims extends JwtClaims {
  sub: string;
  exp: number;
  iat: number;
  jti: string;
}

/** Issues an access token for `did` (scope `com.atproto.appPass` for an app-password login). */
export function signAccessToken(
  ctx: PdsContext,
  did: string,
  opts: { appPassword?: boolean } = {},
): Promise<string> {
  return signToken(ctx, did, {
    aud: ctx.config.appviewServiceDid,
    ttlSeconds: ACCESS_TTL_SECONDS,
    jti: randomId(16),
    scope: opts.appPassword ? APP_PASS_SCOPE : ACCESS_SCOPE,
    typ: ACCESS_TYP,
  });
}

/** Issues a refresh token for `did` with the given `jti` (its KV record is the caller's). */
export function signRefreshToken(ctx: PdsContext, did: string, jti: string): Promise<string> {
  return signToken(ctx, did, {
    aud: ctx.config.serviceDid,
    ttlSeconds: REFRESH_TTL_SECONDS,
    jti,
    scope: REFRESH_SCOPE,
    typ: REFRESH_TYP,
  });
}

/** Signs a token of this account host for `did`, issued now. */
function signToken(
  ctx: PdsContext,
  did: string,
  opts: { aud: string; ttlSeconds: number; jti: string; scope: string; typ: string },
): Promise<string> {
  const iat = Math.floor(ctx.now() / 1000);
  const claims: JwtClaims = {
    iss: ctx.config.serviceDid,
    sub: did,
    aud: opts.aud,
    iat,
    exp: iat + opts.ttlSeconds,
    jti: opts.jti,
    scope: opts.scope,
  };
  return signJwt(claims, ctx.serviceKeys.signingKey, { typ: opts.typ });
}

/**
 * Verifies an access token: signature, expiry, `typ`, scope (full or app password), issuer,
 * audience, subject.
 */
export function verifyAccessToken(ctx: PdsContext, token: string): Promise<VerifiedClaims> {
  return verifyToken(ctx, token, {
    typ: ACCESS_TYP,
    scopes: [ACCESS_SCOPE, APP_PASS_SCOPE],
    aud: ctx.config.appviewServiceDid,
  });
}

/** Verifies a refresh token: signature, expiry, `typ`, scope, issuer, audience, subject. */
export function verifyRefreshToken(ctx: PdsContext, token: string): Promise<VerifiedClaims> {
  return verifyToken(ctx, token, {
    typ: REFRESH_TYP,
    scopes: [REFRESH_SCOPE],
    aud: ctx.config.serviceDid,
  });
}

async function verifyToken(
  ctx: PdsContext,
  token: string,
  want: { typ: string; scopes: string[]; aud: string },
): Promise<VerifiedClaims> {
  let claims: JwtClaims;
  try {
    claims = await verifyJwt(token, ctx.serviceKeys.verifyKey, {
      nowSeconds: Math.floor(ctx.now() / 1000),
    });
  } catch (err) {
    if (err instanceof JwtError) {
      throw new TokenError(
        err.reason === REASON_EXPIRED ? "ExpiredToken" : "InvalidToken",
        err.reason,
      );
    }
    throw err;
  }
  // The signature is ours, so the header is trustworthy now.
  const { header } = decodeJwtUnverified(token);
  if (header.typ !== want.typ) {
    throw new TokenError("InvalidToken", `Token type is not ${want.typ}: ${show(header.typ)}`);
  }
  if (typeof claims.scope !== "string" || !want.scopes.includes(claims.scope)) {
    throw new TokenError(
      "InvalidToken",
      `Token scope is not ${want.scopes.join(" or ")}: ${show(claims.scope)}`,
    );
  }
  if (claims.aud !== want.aud) {
    throw new TokenError("InvalidToken", `Token audience is not ${want.aud}: ${show(claims.aud)}`);
  }
  if (claims.iss !== ctx.config.serviceDid) {
    throw new TokenError(
      "InvalidToken",
      `Token issuer is not ${ctx.config.serviceDid}: ${show(claims.iss)}`,
    );
  }
  if (typeof claims.sub !== "string" || !claims.sub.startsWith("did:")) {
    throw new TokenError("InvalidToken", `Token subject is not a DID: ${show(claims.sub)}`);
  }
  if (typeof claims.jti !== "string" || claims.jti === "" || typeof claims.iat !== "number") {
    throw new TokenError("InvalidToken", "Token has no jti or iat");
  }
  return claims as VerifiedClaims;
}

/** A random URL-safe identifier of `bytes` random bytes (hex). */
export function randomId(bytes: number): string {
  const buf = crypto.getRandomValues(new Uint8Array(bytes));
  return Array.from(buf, (b) => b.toString(16).padStart(2, "0")).join("");
}

function show(value: unknown): string {
  if (value === undefined) return "(missing)";
  const s = typeof value === "string" ? value : JSON.stringify(value) ?? String(value);
  return JSON.stringify(s.length > 100 ? s.slice(0, 100) + "..." : s);
}
