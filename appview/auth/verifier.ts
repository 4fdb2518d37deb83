/**
 * Bearer-token authentication of the index's private endpoints (spec 5.2, part 7).
 *
 * `TokenVerifier` checks, in order: the ES256 signature against the account host's key, `exp`
 * with 30 s of leeway, `scope`, then `aud`. Verified tokens are cached under a SHA-256 hash of the
 * token until `exp` so a repeated token costs a hash and a map lookup, not an ECDSA verify
 * (docs/behaviour.md 12). `requireViewer` is the Hono middleware for the private endpoints;
 * `checkSubject` is the handler's check that the token subject equals the requested `did`.
 *
 * @module
 */

import { createHash } from "node:crypto";
import type { Context, MiddlewareHandler } from "hono";
import { JwtError, REASON_BAD_SIGNATURE, verifyJwt } from "../../shared/jwt.ts";
import type { Logger } from "../../shared/log.ts";
import { ApiError } from "../api/errors.ts";
import type { AppviewConfig } from "../config.ts";
import { KeyUnavailableError, PdsKeySource } from "./key_source.ts";

/** Spec part 8: clock-skew leeway on `exp`. */
export const EXP_LEEWAY_SECONDS = 30;
/** The scope of a full login's access tokens (spec 5.1). */
export const ACCESS_SCOPE = "com.atproto.access";
/** The scope of an app password's access tokens (spec 4.1 rule 12): a third-party client. */
export const APP_PASS_SCOPE = "com.atproto.appPass";
/** The scopes accepted on private endpoints (spec 5.2 rule 2). */
export const ACCEPTED_SCOPES: readonly string[] = Object.freeze([ACCESS_SCOPE, APP_PASS_SCOPE]);
/** Default bound on the verified-token cache. */
export const MAX_CACHED_TOKENS = 10_000;

/** Message of 401 `AuthMissing` (spec part 7). */
export const AUTH_MISSING_MESSAGE = "Bearer authorization header is missing";
/** Message of 403 `Forbidden` (spec part 7). */
export const FORBIDDEN_MESSAGE = "Token subject does not match the requested did";

/** Hono environment of routes behind {@link requireViewer}. */
export interface AuthEnv {
  Variables: { viewerDid: string };
}

/** What a verified access token says. */
export interface VerifiedToken {
  /** The token subject (the user's DID). */
  readonly sub: string;
  /** Expiry, seconds since the epoch. */
  readonly exp: number;
}

/** Options of {@link TokenVerifier}. */
export interface TokenVerifierOptions {
  /** The index's service DID; tokens must carry it as `aud`. */
  serviceDid: string;
  /** False: `APPVIEW_AUTH_REQUIRED=false`, no token is read at all. */
  authRequired: boolean;
  keySource: PdsKeySource;
  log: Logger;
  /** Injectable clock in milliseconds, for tests. Default: `Date.now`. */
  now?: () => number;
  maxCachedTokens?: number;
}

/** Verifies access tokens and caches the verified ones. */
export class TokenVerifier {
  readonly authRequired: boolean;
  readonly keySource: PdsKeySource;
  #serviceDid: string;
  #log: Logger;
  #now: () => number;
  #maxCached: number;
  /** Token hash -> verified token, in insertion order (oldest first). */
  #cache = new Map<string, VerifiedToken>();

  constructor(opts: TokenVerifierOptions) {
    this.authRequired = opts.authRequired;
    this.keySource = opts.keySource;
    this.#serviceDid = opts.serviceDid;
    this.#log = opts.log;
    this.#now = opts.now ?? Date.now;
    this.#maxCached = opts.maxCachedTokens ?? MAX_CACHED_TOKENS;
    // A token verified by the old key must be checked again against the new one.
    opts.keySource.onKeyChange(() => this.#cache.clear());
  }

  /** Number of verified tokens currently cached. */
  get cachedTokens(): number {
    return this.#cache.size;
  }

  /**
   * Verifies the value of an `Authorization` header.
   *
   * @throws {ApiError} 401 `AuthMissing`, 401 `TokenInvalid` or 503 `AuthUnavailable`
   */
  verifyHeader(header: string | undefined | null): Promise<VerifiedToken> {
    return this.verifyToken(bearerToken(header));
  }

  /**
   * Verifies an access token (spec 5.2 rule 2).
   *
   * @throws {ApiError} 401 `TokenInvalid` with the reason, or 503 `AuthUnavailable`
   */
  async verifyToken(token: string): Promise<VerifiedToken> {
    const hit = this.lookupCached(token);
    if (hit !== null) return hit;
    const nowSeconds = this.#now() / 1000;
    const verified = await this.#verifyUncached(token, nowSeconds);
    this.#remember(hashToken(token), verified, nowSeconds);
    return verified;
  }

  /**
   * The cached verification of `token` when it is cached and not expired (synchronous: the hot
   * path of repeated tokens costs a hash and a map lookup), else null.
   */
  lookupCached(token: string): VerifiedToken | null {
    if (this.#cache.size === 0) return null;
    const hash = hashToken(token);
    const hit = this.#cache.get(hash);
    if (hit === undefined) return null;
    if (this.#now() / 1000 < hit.exp + EXP_LEEWAY_SECONDS) return hit;
    this.#cache.delete(hash);
    return null;
  }

  async #verifyUncached(token: string, nowSeconds: number): Promise<VerifiedToken> {
    let key;
    try {
      key = await this.keySource.getKey();
    } catch (err) {
      throw unavailable(err, this.#log);
    }
    const opts = { nowSeconds, leewaySeconds: EXP_LEEWAY_SECONDS };
    let claims;
    try {
      claims = await verifyJwt(token, key.cryptoKey, opts);
    } catch (err) {
      if (!(err instanceof JwtError)) throw err;
      if (err.reason !== REASON_BAD_SIGNATURE) throw tokenInvalid(err.reason);
      // Spec 5.2 rule 6: maybe the account host rotated its key; retry once with a new one.
      const fresh = await this.keySource.refreshAfterFailure(key);
      if (fresh === null) throw tokenInvalid(err.reason);
      try {
        claims = await verifyJwt(token, fresh.cryptoKey, opts);
      } catch (retryErr) {
        if (retryErr instanceof JwtError) throw tokenInvalid(retryErr.reason);
        throw retryErr;
      }
    }
    if (typeof claims.scope !== "string" || !ACCEPTED_SCOPES.includes(claims.scope)) {
      throw tokenInvalid(
        `Token scope is not ${ACCEPTED_SCOPES.join(" or ")}: ${describe(claims.scope)}`,
      );
    }
    if (claims.aud !== this.#serviceDid) {
      throw tokenInvalid(`Token audience is not ${this.#serviceDid}: ${describe(claims.aud)}`);
    }
    if (typeof claims.sub !== "string" || claims.sub === "") {
      throw tokenInvalid(`Token subject is not a DID: ${describe(claims.sub)}`);
    }
    return Object.freeze({ sub: claims.sub, exp: claims.exp as number });
  }

  #remember(hash: string, verified: VerifiedToken, nowSeconds: number): void {
    if (this.#cache.size >= this.#maxCached) {
      // Drop expired entries from the oldest end, then the oldest if still full.
      for (const [k, v] of this.#cache) {
        if (this.#cache.size < this.#maxCached && nowSeconds < v.exp + EXP_LEEWAY_SECONDS) break;
        this.#cache.delete(k);
      }
    }
    this.#cache.set(hash, verified);
  }
}

/** Builds the verifier (and its key source) of the index from its configuration. */
export function createTokenVerifier(
  config: Pick<AppviewConfig, "serviceDid" | "pdsUrl" | "authRequired">,
  opts: { log: Logger; fetch?: typeof fetch; now?: () => number },
): TokenVerifier {
  const keySource = new PdsKeySource({
    pdsUrl: config.pdsUrl,
    log: opts.log,
    fetch: opts.fetch,
    now: opts.now,
  });
  return new TokenVerifier({
    serviceDid: config.serviceDid,
    authRequired: config.authRequired,
    keySource,
    log: opts.log,
    now: opts.now,
  });
}

/** Contexts that passed {@link requireViewer} with authentication switched off. */
const AUTH_OFF = new WeakSet<Context>();

/**
 * Middleware of the private endpoints (spec 5.2): verifies the bearer token and sets
 * `viewerDid` to its subject. With authentication off it reads no token and sets nothing.
 */
export function requireViewer(verifier: TokenVerifier): MiddlewareHandler<AuthEnv> {
  return async function requireViewer(c, next) {
    if (!verifier.authRequired) {
      AUTH_OFF.add(c);
      return await next();
    }
    const token = bearerToken(c.req.header("authorization"));
    const verified = verifier.lookupCached(token) ?? await verifier.verifyToken(token);
    c.set("viewerDid", verified.sub);
    await next();
  };
}

/**
 * The handler's subject check (spec 5.2 rule 3): the token's `sub` must equal `did` exactly.
 * Skipped when authentication is off. Fails closed when the route has no {@link requireViewer}.
 *
 * @throws {ApiError} 403 `Forbidden` when the subject differs
 */
// deno-lint-ignore no-explicit-any
export function checkSubject(c: Context<any>, did: string): void {
  const viewer: unknown = c.get("viewerDid");
  if (typeof viewer === "string") {
    if (viewer !== did) throw new ApiError(403, "Forbidden", FORBIDDEN_MESSAGE);
    return;
  }
  if (AUTH_OFF.has(c)) return;
  throw new Error("checkSubject called on a route without requireViewer");
}

/**
 * The token of an `Authorization: Bearer <token>` header; the scheme is case-insensitive.
 *
 * @throws {ApiError} 401 `AuthMissing` for a missing header, another scheme or no/empty token
 */
export function bearerToken(header: string | undefined | null): string {
  const match = header == null ? null : /^bearer +(\S+) *$/i.exec(header);
  if (match === null) throw new ApiError(401, "AuthMissing", AUTH_MISSING_MESSAGE);
  return match[1];
}

/** Cache key: the token itself is never kept in memory longer than the request. */
function hashToken(token: string): string {
  return createHash("sha256").update(token).digest("base64");
}

function tokenInvalid(reason: string): ApiError {
  return new ApiError(401, "TokenInvalid", reason);
}

function unavailable(err: unknown, log: Logger): ApiError {
  if (!(err instanceof KeyUnavailableError)) throw err;
  log.warn("account host key unavailable; answering 503", { reason: err.message });
  return new ApiError(503, "AuthUnavailable", `Account host key is unavailable: ${err.message}`);
}

function describe(value: unknown): string {
  if (value === undefined) return "(missing)";
  const s = typeof value === "string" ? value : JSON.stringify(value) ?? String(value);
  return s.length > 128 ? s.slice(0, 128) + "..." : s;
}
