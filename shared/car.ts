/**
 * CAR v1 files (atproto repository exports, firehose `blocks`): a DAG-CBOR header
 * `{roots, version: 1}` then `varint(len) CID block` sections.
 *
 * The reader is hand-written over the input buffer so that every truncation, bad varint and
 * oversized declared length becomes a {@linkcode CarError} naming the offset, and every block
 * is checked against its sha-256 CID.
 *
 * @module
 */
import { sha256 } from "@noble/hashes/sha2.js";
import { CID } from "multiformats/cid";
import { CborError, decodeCbor, decodeCidBytes, encodeCbor } from "./cbor.ts";
import { formatCid, HASH_SHA256 } from "./cid.ts";

/** Thrown for any CAR input that is malformed, truncated, too large or fails verification. */
export class CarError extends Error {
  /** Creates an error; `cause` keeps the underlying error when there is one. */
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "CarError";
  }
}

/** Options bounding {@linkcode readCar}. */
export interface ReadCarOptions {
  /** Largest accepted CAR in bytes (default {@linkcode DEFAULT_MAX_CAR_SIZE}). */
  maxSize?: number;
  /** Most sections (duplicates included) accepted (default {@linkcode DEFAULT_MAX_CAR_BLOCKS}). */
  maxBlocks?: number;
  /**
   * When blocks are checked against their CIDs (default `"all"`): `"all"` hashes every block
   * while reading; `"lazy"` hashes a block the first time it is read from the returned map
   * (`get`, or any iteration, which checks every block first), so blocks a caller never reads
   * (commit and MST nodes of a firehose event) are never hashed. A lazy map's `get` throws
   * {@linkcode CarError} for a block that does not match its CID; of duplicate sections only the
   * last is kept and checked. Structure (varints, lengths, CIDs, bounds) is always checked while
   * reading.
   */
  verify?: "all" | "lazy";
}

/** Default `maxSize` for {@linkcode readCar}: 128 MiB. */
export const DEFAULT_MAX_CAR_SIZE = 128 * 1024 * 1024;
/** Default `maxBlocks` for {@linkcode readCar}. */
export const DEFAULT_MAX_CAR_BLOCKS = 1_000_000;

/** Largest CAR header accepted (a header holds only a few root CIDs). */
const MAX_HEADER_SIZE = 64 * 1024;

/**
 * Writes a CAR v1 file. Blocks are written in the given order, as given (no re-hashing).
 *
 * @example
 * ```ts
 * const block = encodeBlock({ e: [], l: null });
 * const car = writeCar([block.cid], [block]);
 * ```
 */
export function writeCar(
  roots: CID[],
  blocks: Iterable<{ cid: CID; bytes: Uint8Array }>,
): Uint8Array {
  const header = encodeCbor({ version: 1, roots });
  const list = Array.isArray(blocks) ? blocks : [...blocks];
  let size = varintLength(header.length) + header.length;
  for (const { cid, bytes } of list) {
    const len = cid.bytes.length + bytes.length;
    size += varintLength(len) + len;
  }
  const out = new Uint8Array(size);
  let pos = writeVarint(out, 0, header.length);
  out.set(header, pos);
  pos += header.length;
  for (const { cid, bytes } of list) {
    pos = writeVarint(out, pos, cid.bytes.length + bytes.length);
    out.set(cid.bytes, pos);
    pos += cid.bytes.length;
    out.set(bytes, pos);
    pos += bytes.length;
  }
  return out;
}

/**
 * Reads a CAR v1 file and verifies every block against its CID (sha-256 only; with
 * `verify: "lazy"`, when the block is first read from the map). Duplicate blocks are accepted.
 * Block bytes are subarrays of `bytes` (no copies).
 *
 * @returns the header roots and a map from CID string (`b...`) to block bytes.
 * @throws {CarError} on truncation, bad varints, declared lengths beyond the input, a bad
 * header, CIDs that are not CIDv1 sha-256, blocks that do not hash to their CID, or bounds.
 */
export function readCar(
  bytes: Uint8Array,
  opts?: ReadCarOptions,
): { roots: CID[]; blocks: Map<string, Uint8Array> } {
  if (!(bytes instanceof Uint8Array)) throw new CarError("CAR input is not a Uint8Array");
  const maxSize = opts?.maxSize ?? DEFAULT_MAX_CAR_SIZE;
  const maxBlocks = opts?.maxBlocks ?? DEFAULT_MAX_CAR_BLOCKS;
  if (bytes.length > maxSize) {
    throw new CarError(`CAR is ${bytes.length} bytes, over the ${maxSize} byte limit`);
  }
  if (bytes.length === 0) throw new CarError("CAR is empty");
  const lazy = opts?.verify === "lazy";
  if (opts?.verify !== undefined && !lazy && opts.verify !== "all") {
    throw new CarError(`CAR verify option is not "all" or "lazy": ${String(opts.verify)}`);
  }
  const reader = { pos: 0 };
  const roots = readHeader(bytes, reader);
  const blocks = lazy ? new LazyVerifiedBlocks() : new Map<string, Uint8Array>();
  let count = 0;
  while (reader.pos < bytes.length) {
    const start = reader.pos;
    const len = readLength(bytes, reader, "CAR section");
    if (len === 0) throw new CarError(`CAR section at byte ${start} is empty`);
    if (++count > maxBlocks) throw new CarError(`CAR has more than ${maxBlocks} blocks`);
    const end = reader.pos + len;
    const cidStart = reader.pos;
    const section = { pos: cidStart };
    const version = readVarint(bytes, section, end, "CID version");
    if (version !== 1) {
      throw new CarError(`CAR section at byte ${start} has a CID of version ${version}, not 1`);
    }
    readVarint(bytes, section, end, "CID codec");
    const hash = readVarint(bytes, section, end, "CID hash code");
    if (hash !== HASH_SHA256) {
      throw new CarError(
        `CAR section at byte ${start} uses hash function 0x${hash.toString(16)}, not sha-256`,
      );
    }
    const digestLen = readVarint(bytes, section, end, "CID digest length");
    if (digestLen !== 32 || section.pos + 32 > end) {
      throw new CarError(`CAR section at byte ${start} has a bad sha-256 digest length`);
    }
    const digest = bytes.subarray(section.pos, section.pos + 32);
    const cid = decodeSectionCid(bytes.subarray(cidStart, section.pos + 32), start);
    const block = bytes.subarray(section.pos + 32, end);
    if (lazy) {
      (blocks as LazyVerifiedBlocks).add(formatCid(cid), block, digest);
    } else {
      if (!sameDigest(sha256(block), digest)) {
        throw new CarError(`CAR block ${formatCid(cid)} does not match its CID`);
      }
      blocks.set(formatCid(cid), block);
    }
    reader.pos = end;
  }
  return { roots, blocks };
}

/**
 * The block map of a lazily verified CAR: a block is hashed the first time it is read, and
 * iterating checks every block first, so no unverified bytes ever leave the map.
 */
class LazyVerifiedBlocks extends Map<string, Uint8Array> {
  /** Expected sha-256 digests of the blocks not checked yet. */
  readonly #pending = new Map<string, Uint8Array>();

  /** Stores a block read from the CAR (unchecked). */
  add(key: string, block: Uint8Array, digest: Uint8Array): void {
    super.set(key, block);
    this.#pending.set(key, digest);
  }

  /** Returns the block after checking it against its CID; throws {@linkcode CarError} if not. */
  override get(key: string): Uint8Array | undefined {
    const block = super.get(key);
    if (block !== undefined) this.#check(key, block);
    return block;
  }

  override set(key: string, block: Uint8Array): this {
    this.#pending.delete(key);
    return super.set(key, block);
  }

  override delete(key: string): boolean {
    this.#pending.delete(key);
    return super.delete(key);
  }

  override clear(): void {
    this.#pending.clear();
    super.clear();
  }

  override forEach(
    callback: (value: Uint8Array, key: string, map: Map<string, Uint8Array>) => void,
    thisArg?: unknown,
  ): void {
    this.#checkAll();
    super.forEach(callback, thisArg);
  }

  override entries(): MapIterator<[string, Uint8Array]> {
    this.#checkAll();
    return super.entries();
  }

  override values(): MapIterator<Uint8Array> {
    this.#checkAll();
    return super.values();
  }

  override [Symbol.iterator](): MapIterator<[string, Uint8Array]> {
    this.#checkAll();
    return super[Symbol.iterator]();
  }

  #check(key: string, block: Uint8Array): void {
    const digest = this.#pending.get(key);
    if (digest === undefined) return;
    if (!sameDigest(sha256(block), digest)) {
      throw new CarError(`CAR block ${key} does not match its CID`);
    }
    this.#pending.delete(key);
  }

  #checkAll(): void {
    for (const key of [...this.#pending.keys()]) this.#check(key, super.get(key)!);
  }
}

function decodeSectionCid(cidBytes: Uint8Array, start: number): CID {
  try {
    return decodeCidBytes(cidBytes);
  } catch (err) {
    throw new CarError(`CAR section at byte ${start} has an invalid CID`, { cause: err });
  }
}

function readHeader(bytes: Uint8Array, reader: { pos: number }): CID[] {
  const len = readLength(bytes, reader, "CAR header");
  if (len === 0) throw new CarError("CAR header is empty");
  if (len > MAX_HEADER_SIZE) throw new CarError(`CAR header of ${len} bytes is too large`);
  let header: unknown;
  try {
    header = decodeCbor(bytes.subarray(reader.pos, reader.pos + len), { maxDepth: 4 });
  } catch (err) {
    const text = err instanceof CborError ? err.message : String(err);
    throw new CarError(`CAR header is not valid DAG-CBOR: ${text}`, { cause: err });
  }
  reader.pos += len;
  if (header === null || typeof header !== "object" || Array.isArray(header)) {
    throw new CarError("CAR header is not a map");
  }
  const { version, roots, ...rest } = header as Record<string, unknown>;
  if (version !== 1) throw new CarError(`CAR version is ${JSON.stringify(version)}, not 1`);
  const extra = Object.keys(rest);
  if (extra.length > 0) throw new CarError(`CAR header has unexpected key "${extra[0]}"`);
  if (!Array.isArray(roots) || !roots.every((r) => r instanceof CID)) {
    throw new CarError("CAR header roots is not an array of CIDs");
  }
  return roots as CID[];
}

/** Reads a length varint and checks that many bytes remain in the input. */
function readLength(bytes: Uint8Array, reader: { pos: number }, what: string): number {
  const start = reader.pos;
  const len = readVarint(bytes, reader, bytes.length, `${what} length`);
  const left = bytes.length - reader.pos;
  if (len > left) {
    throw new CarError(
      `CAR is truncated: ${what} at byte ${start} declares ${len} bytes but ${left} remain`,
    );
  }
  return len;
}

/** Unsigned LEB128, minimal form, at most 2^53 - 1, not reading past `end`. */
function readVarint(bytes: Uint8Array, reader: { pos: number }, end: number, what: string) {
  const start = reader.pos;
  let value = 0;
  let scale = 1;
  for (let i = 0; i < 8; i++) {
    if (reader.pos >= end) throw new CarError(`CAR is truncated: ${what} at byte ${start}`);
    const b = bytes[reader.pos++];
    value += (b & 0x7f) * scale;
    if ((b & 0x80) === 0) {
      if (b === 0 && i > 0) throw new CarError(`CAR has a non-minimal ${what} at byte ${start}`);
      if (value > Number.MAX_SAFE_INTEGER) break;
      return value;
    }
    scale *= 128;
  }
  throw new CarError(`CAR has an oversized ${what} at byte ${start}`);
}

function varintLength(n: number): number {
  let len = 1;
  while (n >= 128) {
    n = Math.floor(n / 128);
    len++;
  }
  return len;
}

function writeVarint(out: Uint8Array, pos: number, n: number): number {
  while (n >= 128) {
    out[pos++] = (n % 128) | 0x80;
    n = Math.floor(n / 128);
  }
  out[pos++] = n;
  return pos;
}

function sameDigest(a: Uint8Array, b: Uint8Array): boolean {
  for (let i = 0; i < 32; i++) if (a[i] !== b[i]) return false;
  return true;
}
