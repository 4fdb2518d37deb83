/**
 * P-256 key pairs, deterministic key derivation and compact low-S ECDSA signatures
 * (docs/protocol.md 7: commit signatures are 64-byte `r||s`, low-S, DER invalid).
 *
 * @module
 */

import { p256 } from "@noble/curves/nist.js";
import { hkdf } from "@noble/hashes/hkdf.js";
import { sha256 } from "@noble/hashes/sha2.js";

/** A P-256 key pair as raw bytes. */
export interface P256KeyPair {
  /** 32-byte big-endian private scalar in [1, n-1]. */
  privateKey: Uint8Array;
  /** 65-byte uncompressed public point `04||x||y`. */
  publicKey: Uint8Array;
}

/** Length of a compact `r||s` signature. */
export const COMPACT_SIGNATURE_LENGTH = 64;

const SIGN_OPTS = { prehash: true, lowS: true, format: "compact" } as const;
const CURVE_ORDER: bigint = p256.Point.Fn.ORDER;
/** HKDF salt: fixed, so one secret gives one key per `info` forever. */
const HKDF_SALT = new TextEncoder().encode("app.social/p256-key-derivation/v1");
/** 48 bytes = 128 bits more than the order, so the reduction bias is negligible (FIPS 186-5 A.2.1). */
const DERIVED_BYTES = 48;

/**
 * Derives a P-256 key pair deterministically from a secret with HKDF-SHA256. The same
 * `secret` and `info` always give the same key; different `info` strings give independent keys.
 * The 48-byte HKDF output is mapped to a scalar in [1, n-1] as `(x mod (n-1)) + 1`.
 *
 * @example
 * ```ts
 * const a = deriveP256KeyPair("server secret", "jwt-signing");
 * const b = deriveP256KeyPair("server secret", "jwt-signing");
 * // a.privateKey and b.privateKey are equal
 * ```
 *
 * @throws {TypeError} when `secret` is empty
 */
export function deriveP256KeyPair(secret: string, info: string): P256KeyPair {
  if (typeof secret !== "string" || secret.length === 0) {
    throw new TypeError("Key derivation secret must be a non-empty string");
  }
  const enc = new TextEncoder();
  const okm = hkdf(sha256, enc.encode(secret), HKDF_SALT, enc.encode(info), DERIVED_BYTES);
  let x = 0n;
  for (const byte of okm) x = (x << 8n) | BigInt(byte);
  const scalar = (x % (CURVE_ORDER - 1n)) + 1n;
  const privateKey = new Uint8Array(32);
  let rest = scalar;
  for (let i = 31; i >= 0; i--) {
    privateKey[i] = Number(rest & 0xffn);
    rest >>= 8n;
  }
  return { privateKey, publicKey: p256.getPublicKey(privateKey, false) };
}

/** Generates a random P-256 key pair from the platform CSPRNG. */
export function generateP256KeyPair(): P256KeyPair {
  const privateKey = p256.utils.randomSecretKey();
  return { privateKey, publicKey: p256.getPublicKey(privateKey, false) };
}

/**
 * Returns the 65-byte uncompressed public key of a 32-byte private key.
 *
 * @throws {Error} when the private key is not a valid P-256 scalar
 */
export function publicKeyFromPrivate(privateKey: Uint8Array): Uint8Array {
  return p256.getPublicKey(privateKey, false);
}

/**
 * Signs `message` with ECDSA P-256: the message is hashed with SHA-256 exactly once (do not
 * pre-hash it), the nonce is deterministic (RFC 6979), and the result is the 64-byte compact
 * `r||s` form with low S.
 */
export function signCompact(privateKey: Uint8Array, message: Uint8Array): Uint8Array {
  return p256.sign(message, privateKey, SIGN_OPTS);
}

/**
 * Verifies a 64-byte compact low-S ECDSA P-256 signature over SHA-256(`message`).
 * Returns false for high-S signatures, DER or any other length, and malformed or off-curve keys.
 *
 * @param publicKey 65-byte uncompressed (or 33-byte compressed) P-256 point
 */
export function verifyCompact(
  publicKey: Uint8Array,
  message: Uint8Array,
  sig: Uint8Array,
): boolean {
  if (!(sig instanceof Uint8Array) || sig.length !== COMPACT_SIGNATURE_LENGTH) return false;
  if (!(publicKey instanceof Uint8Array) || !(message instanceof Uint8Array)) return false;
  try {
    return p256.verify(sig, message, publicKey, SIGN_OPTS);
  } catch {
    return false;
  }
}
