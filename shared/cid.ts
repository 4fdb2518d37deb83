/**
 * CIDs as atproto uses them: CIDv1, sha-256, codec dag-cbor (records, commits, MST nodes) or
 * raw (blobs), written as base32 `b...` strings. Hashing is synchronous: `@noble/hashes`, or a
 * native SHA-256 a server installs with {@linkcode useNativeSha256} (the account host installs
 * OpenSSL's: about 0.9 µs for a 300-byte block instead of about 4.5 µs, for every record, MST node
 * and commit it writes).
 *
 * @module
 */
import { sha256 } from "@noble/hashes/sha2.js";
import { base32 } from "multiformats/bases/base32";
import { CID } from "multiformats/cid";
import { Digest } from "multiformats/hashes/digest";
import { encodeCbor } from "./cbor.ts";

export { CID };

/** Multicodec code of DAG-CBOR (records, commits, MST nodes). */
export const CODEC_DAG_CBOR = 0x71;
/** Multicodec code of raw bytes (blobs). */
export const CODEC_RAW = 0x55;
/** Multihash code of sha2-256, the only hash atproto uses. */
export const HASH_SHA256 = 0x12;
/** Bytes of a sha2-256 digest. */
const SHA256_BYTES = 32;

/** Longest CID string {@linkcode parseCid} looks at; sha-256 CIDv1 strings are 59 characters. */
const MAX_CID_STRING = 256;

/** Thrown by {@linkcode parseCid} for a string that is not a CID. */
export class CidError extends Error {
  /** Creates an error; `cause` keeps the underlying library error when there is one. */
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "CidError";
  }
}

/** A native SHA-256: writes the digest of `data` into `out` (32 bytes); false when it cannot. */
export type Sha256Into = (data: Uint8Array, out: Uint8Array) => boolean;

let nativeSha256: Sha256Into | null = null;

/** Bytes either side of the views {@link useNativeSha256} checks an implementation with. */
const GUARD = 8;

/**
 * Makes CIDs hash with `impl` from now on, in this process, once it gives `@noble/hashes`' digest
 * of known inputs, one and two blocks long, read from and written to views at an offset inside
 * larger buffers (as CIDs are: the digest goes after the CID's 4 header bytes), touching no byte
 * around them; `null` goes back to `@noble/hashes`. A call of `impl` that answers false falls
 * back to `@noble/hashes` for that digest. Returns whether `impl` is in use.
 */
export function useNativeSha256(impl: Sha256Into | null): boolean {
  if (impl !== null) {
    for (const len of [0, 3, 55, 56, 63, 64, 119, 300, 4100]) {
      const input = new Uint8Array(len + 2 * GUARD).map((_, i) => (i * 31 + len) & 0xff);
      const data = input.subarray(GUARD, GUARD + len);
      const before = input.slice();
      const output = new Uint8Array(SHA256_BYTES + 2 * GUARD).fill(0xa5);
      let ok = false;
      try {
        ok = impl(data, output.subarray(GUARD, GUARD + SHA256_BYTES));
      } catch {
        ok = false;
      }
      const want = sha256(data);
      const right = ok && output.every((b, i) =>
        i < GUARD || i >= GUARD + SHA256_BYTES ? b === 0xa5 : b === want[i - GUARD]
      ) && input.every((b, i) =>
        b === before[i]
      );
      if (!right) return false;
    }
  }
  nativeSha256 = impl;
  return impl !== null;
}

/** The native SHA-256 CIDs hash with now; null when `@noble/hashes` does. */
export function nativeSha256InUse(): Sha256Into | null {
  return nativeSha256;
}

/** SHA-256 of `data`, with the native implementation when one is in use (see above). */
export function sha256Digest(data: Uint8Array): Uint8Array {
  const out = new Uint8Array(SHA256_BYTES);
  digestInto(data, out);
  return out;
}

/** Writes SHA-256(`data`) into `out`: natively when installed and able, else `@noble/hashes`. */
function digestInto(data: Uint8Array, out: Uint8Array): void {
  if (nativeSha256 === null || !nativeSha256(data, out)) {
    sha256.create().update(data).digestInto(out);
  }
}

/** CIDv1 (dag-cbor, sha-256) of DAG-CBOR bytes, computed synchronously. */
export function cidForCbor(bytes: Uint8Array): CID {
  return sha256Cid(CODEC_DAG_CBOR, bytes);
}

/** CIDv1 (raw, sha-256) of blob bytes, computed synchronously. */
export function cidForRaw(bytes: Uint8Array): CID {
  return sha256Cid(CODEC_RAW, bytes);
}

/**
 * The CIDv1 of `bytes` under `codec` (one varint byte), built in one 36-byte buffer: the hash is
 * written straight into it, and the multihash and digest are views of it. The library's
 * `CID.createV1(codec, create(0x12, sha256(bytes)))` makes three buffers (the hash, the
 * multihash, the CID) for the same value; a commit makes a CID for every block it writes, and
 * each buffer is a separate backing store for the garbage collector to track.
 */
function sha256Cid(codec: number, bytes: Uint8Array): CID {
  const out = new Uint8Array(4 + SHA256_BYTES);
  out[0] = 1;
  out[1] = codec;
  out[2] = HASH_SHA256;
  out[3] = SHA256_BYTES;
  const digest = out.subarray(4);
  digestInto(bytes, digest);
  return new CID(1, codec, new Digest(HASH_SHA256, SHA256_BYTES, digest, out.subarray(2)), out);
}

/**
 * Parses a CID string (base32 CIDv1 `b...`, or a base58 CIDv0 `Qm...`).
 *
 * @throws {CidError} naming the value when it is not a CID.
 * @example
 * ```ts
 * parseCid("bafyreie5737gdxlw5i64vzichcalba3z2v5n6icifvx5xytvske7mr3hpm").code; // 0x71
 * ```
 */
export function parseCid(s: string): CID {
  if (typeof s !== "string" || s.length === 0 || s.length > MAX_CID_STRING) {
    throw new CidError(`Invalid CID: ${describe(s)}`);
  }
  try {
    return CID.parse(s);
  } catch (err) {
    throw new CidError(`Invalid CID: ${describe(s)}`, { cause: err });
  }
}

/** The canonical string form of a CID: base32 lower case `b...` for v1 (`Qm...` for v0). */
export function formatCid(cid: CID): string {
  if (cid.version === 0) return cid.toString();
  // Not CID#toString: its per-instance WeakMap cache costs ~4x the encoding.
  return cid.bytes.length === SHA256_CID_BYTES ? base32Of36(cid.bytes) : base32.encode(cid.bytes);
}

/** Bytes of a CIDv1 with a sha-256 multihash (every CID atproto makes); 59 base32 characters. */
const SHA256_CID_BYTES = 36;
const BASE32_ALPHABET = "abcdefghijklmnopqrstuvwxyz234567";
const BASE32_CODES = Uint8Array.from(BASE32_ALPHABET, (c) => c.charCodeAt(0));
/** Character codes of the string being built: `b` and 58 base32 digits. */
const cidChars: number[] = new Array(1 + Math.ceil((SHA256_CID_BYTES * 8) / 5)).fill(0);

/**
 * `base32.encode` of 36 bytes, built as one flat string. multiformats appends one character at a
 * time; the 58 rope pieces that leaves were a quarter of all the memory a commit allocated
 * (formatting CIDs is on every commit's path: node cache keys, block index, push bodies).
 */
function base32Of36(bytes: Uint8Array): string {
  cidChars[0] = 0x62; // "b", the multibase prefix of base32
  let bits = 0;
  let buffer = 0;
  let j = 1;
  for (let i = 0; i < bytes.length; i++) {
    buffer = ((buffer << 8) | bytes[i]) & 0xfff;
    bits += 8;
    while (bits >= 5) {
      bits -= 5;
      cidChars[j++] = BASE32_CODES[(buffer >> bits) & 31];
    }
  }
  cidChars[j] = BASE32_CODES[(buffer << (5 - bits)) & 31]; // 36 bytes leave 3 bits
  return String.fromCharCode.apply(null, cidChars);
}

/**
 * Returns `value` as a CID when it is a CID instance (of any copy of multiformats) or a valid
 * CID string, else `null`.
 */
export function asCid(value: unknown): CID | null {
  if (typeof value === "string") {
    try {
      return parseCid(value);
    } catch {
      return null;
    }
  }
  if (value === null || typeof value !== "object") return null;
  return CID.asCID(value) ?? null;
}

/**
 * Whether `bytes` hash to `cid`. Only sha-256 CIDs can verify; any other hash function gives
 * `false`. The codec is not checked (callers decode with the codec they expect).
 */
export function verifyCid(cid: CID, bytes: Uint8Array): boolean {
  const mh = cid.multihash;
  if (mh.code !== HASH_SHA256 || mh.digest.length !== 32) return false;
  const actual = sha256(bytes);
  const expected = mh.digest;
  let diff = 0;
  for (let i = 0; i < 32; i++) diff |= actual[i] ^ expected[i];
  return diff === 0;
}

/**
 * Encodes a value as DAG-CBOR and returns the block with its CID.
 *
 * @throws {import("./cbor.ts").CborError} when the value cannot be encoded.
 * @example
 * ```ts
 * formatCid(encodeBlock({ e: [], l: null }).cid);
 * // "bafyreie5737gdxlw5i64vzichcalba3z2v5n6icifvx5xytvske7mr3hpm" (empty MST node)
 * ```
 */
export function encodeBlock(value: unknown): { cid: CID; bytes: Uint8Array } {
  const bytes = encodeCbor(value);
  return { cid: cidForCbor(bytes), bytes };
}

function describe(s: unknown): string {
  if (typeof s !== "string") return `not a string (${typeof s})`;
  if (s.length === 0) return "empty string";
  return s.length > 80 ? JSON.stringify(s.slice(0, 80) + "...") : JSON.stringify(s);
}
