/**
 * Multikey encoding of P-256 public keys (spec 5.1; docs/protocol.md 12.2).
 *
 * Two forms are written and read:
 * - the spec 5.1 form: `z` + base58btc(`0x80 0x12` + 32-byte x + 32-byte y). This is the form the
 *   spec prescribes for the account host's `publicKeyMultibase`; it is intentionally not the
 *   standard multicodec layout.
 * - the standard atproto form: `z` + base58btc(`0x80 0x24` + 33-byte compressed point), which
 *   starts with `zDn` (and `did:key:zDn` as a did:key).
 *
 * Only P-256 is supported; secp256k1 keys are rejected.
 *
 * @module
 */

import { p256 } from "@noble/curves/nist.js";
import { base58btc } from "multiformats/bases/base58";

/** Multicodec varint of the spec 5.1 form (followed by raw x and y). */
export const SPEC_P256_PREFIX: Uint8Array = Uint8Array.of(0x80, 0x12);
/** Multicodec varint of `p256-pub` (0x1200), followed by a compressed point. */
export const P256_PUB_PREFIX: Uint8Array = Uint8Array.of(0x80, 0x24);
const K256_PUB_PREFIX = Uint8Array.of(0xe7, 0x01);
const DID_KEY_PREFIX = "did:key:";
/** Bound on the input length, far above any key encoding, so hostile input costs nothing. */
const MAX_MULTIKEY_LENGTH = 256;

/** Thrown when a public key or Multikey string is malformed, off the curve or not P-256. */
export class MultikeyError extends Error {
  /** Always `"MultikeyError"`. */
  override readonly name = "MultikeyError";
}

/**
 * Encodes a P-256 public key in the spec 5.1 form: `z` + base58btc(`0x80 0x12` || x || y).
 *
 * @param publicKey 65-byte uncompressed point `04||x||y` (a 33-byte compressed point is accepted too)
 * @throws {MultikeyError} when the bytes are not a point on P-256
 */
export function encodeMultikeyUncompressed(publicKey: Uint8Array): string {
  const point = decodePoint(publicKey).toBytes(false);
  const out = new Uint8Array(66);
  out.set(SPEC_P256_PREFIX, 0);
  out.set(point.subarray(1), 2);
  return base58btc.encode(out);
}

/**
 * Encodes a P-256 public key in the standard atproto form: `z` + base58btc(`0x80 0x24` ||
 * compressed point), i.e. a `zDn...` string.
 *
 * @param publicKey 65-byte uncompressed point `04||x||y` (a 33-byte compressed point is accepted too)
 * @throws {MultikeyError} when the bytes are not a point on P-256
 */
export function encodeMultikey(publicKey: Uint8Array): string {
  const compressed = decodePoint(publicKey).toBytes(true);
  const out = new Uint8Array(35);
  out.set(P256_PUB_PREFIX, 0);
  out.set(compressed, 2);
  return base58btc.encode(out);
}

/**
 * Encodes a P-256 public key as a `did:key` (standard compressed form).
 *
 * @throws {MultikeyError} when the bytes are not a point on P-256
 */
export function encodeDidKey(publicKey: Uint8Array): string {
  return DID_KEY_PREFIX + encodeMultikey(publicKey);
}

/**
 * Parses a Multikey (`z...`, optionally prefixed with `did:key:`) in either the spec 5.1 form
 * (`0x80 0x12` + x + y) or the standard form (`0x80 0x24` + compressed point) and returns the
 * 65-byte uncompressed point `04||x||y`. The point is checked to lie on P-256.
 *
 * @example
 * ```ts
 * const key = parseMultikey("did:key:zDnaembgSGUhZULN2Caob4HLJPaxBh92N7rtH21TErzqf8HQo");
 * key.length; // 65
 * ```
 *
 * @throws {MultikeyError} naming the value when it is malformed, off the curve or not P-256
 */
export function parseMultikey(s: string): Uint8Array {
  if (typeof s !== "string" || s.length > MAX_MULTIKEY_LENGTH) {
    throw new MultikeyError(`Invalid multikey: ${preview(s)}`);
  }
  const multibase = s.startsWith(DID_KEY_PREFIX) ? s.slice(DID_KEY_PREFIX.length) : s;
  if (!multibase.startsWith("z")) {
    throw new MultikeyError(`Multikey is not base58btc (expected a "z" prefix): ${preview(s)}`);
  }
  let bytes: Uint8Array;
  try {
    bytes = base58btc.decode(multibase);
  } catch {
    throw new MultikeyError(`Multikey is not valid base58btc: ${preview(s)}`);
  }
  if (hasPrefix(bytes, SPEC_P256_PREFIX)) {
    if (bytes.length !== 66) {
      throw new MultikeyError(`Multikey P-256 coordinates must be 64 bytes: ${preview(s)}`);
    }
    const point = new Uint8Array(65);
    point[0] = 0x04;
    point.set(bytes.subarray(2), 1);
    return checkedUncompressed(point, s);
  }
  if (hasPrefix(bytes, P256_PUB_PREFIX)) {
    if (bytes.length !== 35) {
      throw new MultikeyError(`Multikey P-256 compressed key must be 33 bytes: ${preview(s)}`);
    }
    return checkedUncompressed(bytes.subarray(2), s);
  }
  if (hasPrefix(bytes, K256_PUB_PREFIX)) {
    throw new MultikeyError(`Multikey is a secp256k1 key; only P-256 is supported: ${preview(s)}`);
  }
  throw new MultikeyError(`Multikey has an unsupported key type prefix: ${preview(s)}`);
}

function checkedUncompressed(pointBytes: Uint8Array, original: string): Uint8Array {
  try {
    return p256.Point.fromBytes(pointBytes).toBytes(false);
  } catch {
    throw new MultikeyError(`Multikey is not a point on P-256: ${preview(original)}`);
  }
}

function decodePoint(publicKey: Uint8Array) {
  if (!(publicKey instanceof Uint8Array) || (publicKey.length !== 65 && publicKey.length !== 33)) {
    throw new MultikeyError(
      `Public key must be a 65-byte uncompressed or 33-byte compressed P-256 point, got ${
        publicKey instanceof Uint8Array ? publicKey.length + " bytes" : typeof publicKey
      }`,
    );
  }
  try {
    return p256.Point.fromBytes(publicKey);
  } catch {
    throw new MultikeyError("Public key is not a point on P-256");
  }
}

function hasPrefix(bytes: Uint8Array, prefix: Uint8Array): boolean {
  return bytes.length >= prefix.length && bytes[0] === prefix[0] && bytes[1] === prefix[1];
}

function preview(value: unknown): string {
  const s = typeof value === "string" ? value : String(value);
  return JSON.stringify(s.length > 128 ? s.slice(0, 128) + "..." : s);
}
