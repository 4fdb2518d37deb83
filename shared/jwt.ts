/**
 * ES256 JSON Web Tokens for account host sessions (spec 5.1, 5.2), over `jose`.
 *
 * Only `alg: ES256` is accepted; `none`, HMAC and every other algorithm are refused before any
 * key is touched. The signature is checked by `jose` (`compactVerify` restricted to ES256); the
 * time claims are checked here, so every failure carries one of this module's reasons.
 * Scope, audience and subject checks belong to the caller.
 *
 * @module
 */

import { base64url, compactVerify, errors, SignJWT } from "jose";
import { p256 } from "@noble/curves/nist.js";
import type { P256KeyPair } from "./keys.ts";

/** Claims of the tokens this service issues (spec 5.1); other members pass through. */
export interface JwtClaims {
  /** Issuer: the account host's DID. */
  iss?: string;
  /** Subject: the user's DID. */
  sub?: string;
  /** Audience: the index's service DID for access tokens. */
  aud?: string;
  /** Issued at, seconds since the Unix epoch. */
  iat?: number;
  /** Expiry, seconds since the Unix epoch (required by {@link verifyJwt}). */
  exp?: number;
  /** Token id (refresh tokens use it for rotation). */
  jti?: string;
  /** `com.atproto.access` or `com.atproto.refresh`. */
  scope?: string;
  /** Any other claim, passed through untouched. */
  [k: string]: unknown;
}

/** Reason: the token is not a well-formed compact JWS with JSON header and claims. */
export const REASON_MALFORMED = "Token is malformed";
/** Reason: the ES256 signature does not verify against the key. */
export const REASON_BAD_SIGNATURE = "Token signature is invalid";
/** Reason: `exp` is missing or not a number (tokens without expiry are refused). */
export const REASON_NO_EXPIRY = "Token has no expiration";
/** Reason: `exp` plus the leeway is not after the current time. */
export const REASON_EXPIRED = "Token has expired";
/** Reason: `nbf` minus the leeway is after the current time. */
export const REASON_NOT_YET_VALID = "Token is not yet valid";
const REASON_ALG_PREFIX = "Token algorithm is not ES256: ";

/** Upper bound on an accepted token, far above any token this service issues. */
const MAX_TOKEN_LENGTH = 16 * 1024;
const SEGMENT_RE = /^[A-Za-z0-9_-]*$/;
/** An ES256 signature is always 64 bytes, i.e. 86 unpadded base64url characters. */
const ES256_SIGNATURE_CHARS = 86;
const ALG = "ES256";
const EC_PARAMS = { name: "ECDSA", namedCurve: "P-256" } as const;

/**
 * Thrown when a token is refused. `reason` is a fixed, log-safe sentence (it never contains the
 * token); it equals `message`.
 */
export class JwtError extends Error {
  /** Always `"JwtError"`. */
  override readonly name = "JwtError";
  /** Why the token was refused, e.g. "Token has expired". */
  readonly reason: string;

  /** Creates an error whose message is `reason`. */
  constructor(reason: string) {
    super(reason);
    this.reason = reason;
  }
}

/** Imports a P-256 key pair as a non-extractable WebCrypto ECDSA signing key. */
export async function importSigningKey(keyPair: P256KeyPair): Promise<CryptoKey> {
  const jwk = { ...publicJwk(keyPair.publicKey), d: base64url.encode(keyPair.privateKey) };
  return await crypto.subtle.importKey("jwk", jwk, EC_PARAMS, false, ["sign"]);
}

/**
 * Imports a P-256 public key (65-byte uncompressed, or 33-byte compressed) as a WebCrypto ECDSA
 * verification key.
 */
export async function importVerifyKey(publicKey: Uint8Array): Promise<CryptoKey> {
  return await crypto.subtle.importKey("jwk", publicJwk(publicKey), EC_PARAMS, true, ["verify"]);
}

/**
 * Signs `claims` as a compact ES256 JWT with header `{alg: "ES256", typ}`.
 *
 * @example
 * ```ts
 * const key = await importSigningKey(deriveP256KeyPair("secret", "jwt"));
 * const token = await signJwt({ sub: "did:plc:abc", exp: 2000000000 }, key, { typ: "at+jwt" });
 * ```
 */
export function signJwt(
  claims: JwtClaims,
  key: CryptoKey,
  opts: { typ?: string } = {},
): Promise<string> {
  const header = opts.typ === undefined ? { alg: ALG } : { alg: ALG, typ: opts.typ };
  return new SignJWT(claims).setProtectedHeader(header).sign(key);
}

/**
 * Verifies an ES256 token: algorithm first, then the signature, then `exp` (required) and `nbf`
 * with `leewaySeconds` of clock skew. A token is expired when `now >= exp + leeway`.
 *
 * @param opts.nowSeconds current time in seconds (default: the system clock)
 * @param opts.leewaySeconds allowed clock skew in seconds (default 0)
 * @throws {JwtError} with reason "Token is malformed", "Token algorithm is not ES256: <alg>",
 *   "Token signature is invalid", "Token has no expiration", "Token has expired" or
 *   "Token is not yet valid"
 */
export async function verifyJwt(
  token: string,
  key: CryptoKey,
  opts: { nowSeconds?: number; leewaySeconds?: number } = {},
): Promise<JwtClaims> {
  const { header } = splitAndDecode(token);
  if (header.alg !== ALG) throw new JwtError(REASON_ALG_PREFIX + describeAlg(header.alg));
  if (token.length - token.lastIndexOf(".") - 1 !== ES256_SIGNATURE_CHARS) {
    throw new JwtError(REASON_MALFORMED);
  }
  let payload: Uint8Array;
  try {
    ({ payload } = await compactVerify(token, key, { algorithms: [ALG] }));
  } catch (err) {
    if (err instanceof errors.JWSSignatureVerificationFailed) {
      throw new JwtError(REASON_BAD_SIGNATURE);
    }
    throw new JwtError(REASON_MALFORMED);
  }
  const claims = parseJsonObject(payload) as JwtClaims;
  const now = opts.nowSeconds ?? Date.now() / 1000;
  const leeway = opts.leewaySeconds ?? 0;
  if (typeof claims.exp !== "number" || !Number.isFinite(claims.exp)) {
    throw new JwtError(REASON_NO_EXPIRY);
  }
  if (now >= claims.exp + leeway) throw new JwtError(REASON_EXPIRED);
  if (claims.nbf !== undefined) {
    if (typeof claims.nbf !== "number") throw new JwtError(REASON_MALFORMED);
    if (now < claims.nbf - leeway) throw new JwtError(REASON_NOT_YET_VALID);
  }
  return claims;
}

/**
 * Decodes a token's header and claims without checking the signature or any claim. Use only to
 * route a token (for example to pick a key); never trust the result.
 *
 * @throws {JwtError} "Token is malformed" when the token is not three base64url segments with
 *   JSON object header and claims
 */
export function decodeJwtUnverified(
  token: string,
): { header: Record<string, unknown>; claims: JwtClaims } {
  const { header, payloadSegment } = splitAndDecode(token);
  return { header, claims: parseJsonObject(decodeSegment(payloadSegment)) as JwtClaims };
}

function splitAndDecode(
  token: string,
): { header: Record<string, unknown>; payloadSegment: string } {
  if (typeof token !== "string" || token.length > MAX_TOKEN_LENGTH) {
    throw new JwtError(REASON_MALFORMED);
  }
  const parts = token.split(".");
  if (parts.length !== 3 || parts[0] === "" || parts[1] === "") {
    throw new JwtError(REASON_MALFORMED);
  }
  if (!parts.every((p) => SEGMENT_RE.test(p))) throw new JwtError(REASON_MALFORMED);
  const header = parseJsonObject(decodeSegment(parts[0]));
  return { header, payloadSegment: parts[1] };
}

function decodeSegment(segment: string): Uint8Array {
  try {
    return base64url.decode(segment);
  } catch {
    throw new JwtError(REASON_MALFORMED);
  }
}

function parseJsonObject(bytes: Uint8Array): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes));
  } catch {
    throw new JwtError(REASON_MALFORMED);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new JwtError(REASON_MALFORMED);
  }
  return value as Record<string, unknown>;
}

function describeAlg(alg: unknown): string {
  if (alg === undefined) return "(missing)";
  const s = typeof alg === "string" ? alg : JSON.stringify(alg) ?? String(alg);
  return s.length > 32 ? s.slice(0, 32) + "..." : s;
}

function publicJwk(publicKey: Uint8Array): JsonWebKey {
  let point: Uint8Array;
  try {
    point = p256.Point.fromBytes(publicKey).toBytes(false);
  } catch {
    throw new TypeError("Public key is not a P-256 point");
  }
  return {
    kty: "EC",
    crv: "P-256",
    x: base64url.encode(point.subarray(1, 33)),
    y: base64url.encode(point.subarray(33, 65)),
  };
}
