/**
 * Strict DAG-CBOR (atproto "DRISL") encoding (over `cborg`) and decoding (hand-written).
 *
 * Encoding: canonical map key order (length-first, then bytewise), CIDs as tag 42, no floats,
 * only safe integers, `undefined` object properties skipped, `undefined` elsewhere refused.
 *
 * Decoding: shortest-form integers and lengths, definite lengths only, no floats, no
 * `undefined`, no tags but 42, text map keys in canonical order without duplicates, no
 * `__proto__` key, valid UTF-8, bounded input size and nesting depth, enforced while reading
 * (no extra walk over the result). The decoder is hand-written rather than cborg's tokenizer:
 * it builds sha-256 CIDv1 links over the input instead of copying them and having multiformats
 * re-encode each one, which made decoding a firehose frame about twice as fast.
 *
 * @module
 */
import { encodeOptions as dagCborEncodeOptions } from "@ipld/dag-cbor";
import * as cborg from "cborg";
import { CID } from "multiformats/cid";
import { Digest } from "multiformats/hashes/digest";

/** Thrown for any value that cannot be encoded or any input that is not strict DAG-CBOR. */
export class CborError extends Error {
  /** Creates an error; `cause` keeps the underlying library error when there is one. */
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "CborError";
  }
}

/** Options bounding {@linkcode decodeCbor} and {@linkcode decodeCborFirst} on hostile input. */
export interface DecodeCborOptions {
  /** Largest accepted input in bytes (default {@linkcode DEFAULT_MAX_CBOR_SIZE}). */
  maxSize?: number;
  /** Deepest accepted nesting of arrays, maps and tags (default {@linkcode DEFAULT_MAX_CBOR_DEPTH}). */
  maxDepth?: number;
}

/** Default `maxSize` for decoding: 5 MiB. */
export const DEFAULT_MAX_CBOR_SIZE = 5 * 1024 * 1024;
/** Default `maxDepth` for decoding: 64 levels of arrays, maps and tags. */
export const DEFAULT_MAX_CBOR_DEPTH = 64;

const CID_TAG = 42;

function refuse(message: string): never {
  throw new CborError(message);
}

const ENCODE_OPTIONS: cborg.EncodeOptions = {
  ...dagCborEncodeOptions,
  ignoreUndefinedProperties: true,
  typeEncoders: {
    ...dagCborEncodeOptions.typeEncoders,
    number: (n: number) =>
      Number.isSafeInteger(n) ? null : refuse(`Cannot encode number ${n}: only safe integers`),
    bigint: (n: bigint) => refuse(`Cannot encode bigint ${n}: only safe integer numbers`),
    undefined: () => refuse("Cannot encode undefined outside an object property"),
    Tagged: () => refuse("Cannot encode a CBOR tag other than a CID link"),
    ArrayBuffer: () => refuse("Cannot encode an ArrayBuffer: use a Uint8Array"),
    DataView: () => refuse("Cannot encode a DataView: use a Uint8Array"),
  },
};
for (
  const t of "Uint8Clamped Uint16 Uint32 Int8 Int16 Int32 BigUint64 BigInt64 Float32 Float64"
    .split(" ")
) {
  ENCODE_OPTIONS.typeEncoders![`${t}Array`] = () =>
    refuse(`Cannot encode a ${t}Array: use a Uint8Array`);
}

/**
 * Encodes a value as canonical DAG-CBOR. CIDs become tag-42 links.
 *
 * @throws {CborError} on floats, non-safe integers, bigints, `undefined` outside an object
 * property, non-string `Map` keys, cycles and unsupported types.
 * @example
 * ```ts
 * encodeCbor({ t: "#commit", op: 1 }); // a2 61 74 67 23 63 6f 6d 6d 69 74 62 6f 70 01
 * ```
 */
export function encodeCbor(value: unknown): Uint8Array {
  try {
    const out = cborg.encode(value, ENCODE_OPTIONS);
    // Under Deno's npm layer cborg returns a Node Buffer; hand out a plain Uint8Array view.
    return out.constructor === Uint8Array
      ? out
      : new Uint8Array(out.buffer, out.byteOffset, out.length);
  } catch (err) {
    if (err instanceof CborError) throw err;
    throw new CborError(`Cannot encode CBOR: ${errorText(err)}`, { cause: err });
  }
}

/**
 * Decodes exactly one strict DAG-CBOR item; tag-42 links decode to `CID` instances and byte
 * strings to `Uint8Array` copies.
 *
 * @throws {CborError} on any non-strict, oversized, too deep or trailing input.
 */
export function decodeCbor(bytes: Uint8Array, opts?: DecodeCborOptions): unknown {
  const [value, rest] = decodeCborFirst(bytes, opts);
  if (rest.length > 0) {
    throw new CborError(`Invalid CBOR: ${rest.length} trailing byte(s) after the item`);
  }
  return value;
}

/**
 * Decodes the first strict DAG-CBOR item of `bytes` and returns it with the remaining bytes
 * (a subarray, not a copy). Used for frames holding a header item then a body item.
 *
 * Byte strings are copies. A CID's bytes are a view of `bytes` (a copy per CID would halve the
 * speed of frame decoding): a caller that keeps decoded CIDs long after the input (a cache)
 * should decode a copy of just the item, so as not to keep a larger buffer alive.
 *
 * @throws {CborError} on any non-strict, oversized or too deep input.
 */
export function decodeCborFirst(
  bytes: Uint8Array,
  opts?: DecodeCborOptions,
): [value: unknown, rest: Uint8Array] {
  if (!(bytes instanceof Uint8Array)) throw new CborError("CBOR input is not a Uint8Array");
  const maxSize = opts?.maxSize ?? DEFAULT_MAX_CBOR_SIZE;
  if (bytes.length > maxSize) {
    throw new CborError(`CBOR input is ${bytes.length} bytes, over the ${maxSize} byte limit`);
  }
  if (bytes.length === 0) throw new CborError("Invalid CBOR: empty input");
  // A Node Buffer's `slice` is a view: read through a plain Uint8Array so byte strings are copies.
  if (bytes.constructor !== Uint8Array) {
    bytes = new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.length);
  }
  const decoder = new StrictDecoder(bytes, opts?.maxDepth ?? DEFAULT_MAX_CBOR_DEPTH);
  try {
    const value = decoder.item(0);
    return [value, bytes.subarray(decoder.pos)];
  } catch (err) {
    if (err instanceof CborError) throw err;
    throw new CborError(`Invalid CBOR: ${errorText(err)}`, { cause: err });
  }
}

/**
 * A CID from its binary form (no 0x00 prefix), as a view of `bytes` (no copy). The common
 * atproto shape (CIDv1, one-byte codec, sha-256) is built directly; anything else goes through
 * `CID.decode`.
 *
 * @throws {Error} when `bytes` is not exactly one CID.
 */
export function decodeCidBytes(bytes: Uint8Array): CID {
  if (
    bytes.length === 36 && bytes[0] === 1 && bytes[1] < 0x80 && bytes[2] === SHA256_CODE &&
    bytes[3] === 32
  ) {
    const digest = new Digest(SHA256_CODE, 32, bytes.subarray(4), bytes.subarray(2));
    return new CID(1, bytes[1], digest, bytes);
  }
  return CID.decode(bytes);
}

const SHA256_CODE = 0x12;
/** Text strings up to this many bytes are tried as ASCII before the UTF-8 decoder. */
const SHORT_TEXT = 64;

const FATAL_UTF8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
const MAJOR_NAMES = ["uint", "negint", "bytes", "string", "array", "map", "tag"];
const SIMPLE_NAMES: Record<number, string> = {
  20: "false",
  21: "true",
  22: "null",
  23: "undefined",
};

/**
 * A strict DAG-CBOR reader over one buffer (one instance per item decoded): definite lengths,
 * shortest-form arguments, safe integers, no floats, no `undefined`, no tags but 42 (holding a
 * CID), text map keys in canonical order without duplicates, no `__proto__` key, valid UTF-8,
 * nesting bounded by `maxDepth` (arrays, maps and tags count). Every declared length is checked
 * against the input before anything is allocated.
 */
class StrictDecoder {
  readonly #data: Uint8Array;
  readonly #maxDepth: number;
  /** Read position. */
  pos = 0;
  /** Major type and start of the head {@link #head} read last. */
  #major = 0;
  #start = 0;

  constructor(data: Uint8Array, maxDepth: number) {
    this.#data = data;
    this.#maxDepth = maxDepth;
  }

  /** Reads one item at nesting `depth` (the number of arrays, maps and tags around it). */
  item(depth: number): unknown {
    const arg = this.#head();
    switch (this.#major) {
      case 0:
        return arg;
      case 1:
        if (arg >= Number.MAX_SAFE_INTEGER) this.#unsafe();
        return -1 - arg;
      case 2:
        return this.#data.slice(this.pos, this.pos += this.#length(arg, "byte string"));
      case 3:
        return this.#text(this.#length(arg, "text string"));
      case 4: {
        this.#enter(depth);
        this.#length(arg, "array");
        const out = new Array(arg);
        for (let i = 0; i < arg; i++) out[i] = this.item(depth + 1);
        return out;
      }
      case 5:
        this.#enter(depth);
        return this.#map(arg, depth + 1);
      case 6:
        return this.#link(arg, depth);
      default: // `#head` lets only false, true and null through
        return arg === 22 ? null : arg === 21;
    }
  }

  #map(count: number, depth: number): Record<string, unknown> {
    this.#length(count * 2, "map");
    const data = this.#data;
    const out: Record<string, unknown> = {};
    let prevStart = -1;
    let prevEnd = -1;
    for (let i = 0; i < count; i++) {
      const start = this.pos;
      const arg = this.#head();
      if (this.#major !== 3) {
        const name = this.#major === 7 ? SIMPLE_NAMES[arg] ?? "simple" : MAJOR_NAMES[this.#major];
        refuse(`Invalid CBOR: map key is not a text string (${name})`);
      }
      const key = this.#text(this.#length(arg, "text string"));
      if (key === "__proto__") refuse('Invalid CBOR: map key "__proto__" is not allowed');
      const end = this.pos;
      if (prevStart >= 0) {
        const order = compareSpans(data, prevStart, prevEnd, start, end);
        if (order === 0) refuse(`Invalid CBOR: duplicate map key "${key}"`);
        if (order > 0) refuse(`Invalid CBOR: map key "${key}" is out of canonical order`);
      }
      prevStart = start;
      prevEnd = end;
      out[key] = this.item(depth);
    }
    return out;
  }

  /** A tag: only 42, holding a byte string 0x00 + CID. */
  #link(tag: number, depth: number): CID {
    if (tag !== CID_TAG) refuse(`Invalid CBOR: tag ${tag} is not allowed`);
    this.#enter(depth);
    const data = this.#data;
    let content: unknown;
    if (this.pos < data.length && data[this.pos] >> 5 === 2) {
      const len = this.#length(this.#head(), "byte string");
      content = data.subarray(this.pos, this.pos += len);
    } else {
      content = this.item(depth + 1);
    }
    if (!(content instanceof Uint8Array)) {
      refuse("Invalid CBOR: tag 42 content is not a byte string");
    }
    if (content[0] !== 0) refuse("Invalid CBOR: tag 42 CID does not start with 0x00");
    try {
      return decodeCidBytes(content.subarray(1));
    } catch (err) {
      throw new CborError(`Invalid CBOR: tag 42 holds an invalid CID: ${errorText(err)}`);
    }
  }

  /**
   * Reads a head: sets the major type and returns the argument (a safe integer). Major type 7
   * is handled here whole: `false`, `true` and `null` set major 7 with argument 20-22; every
   * other simple value and every float is refused.
   */
  #head(): number {
    const data = this.#data;
    const start = this.pos;
    if (start >= data.length) this.#truncated(start);
    const initial = data[start];
    const major = initial >> 5;
    const minor = initial & 31;
    this.#major = major;
    this.#start = start;
    if (minor < 24) {
      this.pos = start + 1;
      if (major === 7 && minor !== 20 && minor !== 21 && minor !== 22) this.#simple(minor);
      return minor;
    }
    if (major === 7) return this.#simple(minor);
    if (minor > 27) {
      refuse(
        minor === 31
          ? `Invalid CBOR: indefinite length items are not allowed (byte ${start})`
          : `Invalid CBOR: reserved additional information ${minor} at byte ${start}`,
      );
    }
    const size = 1 << (minor - 24);
    if (start + 1 + size > data.length) this.#truncated(start);
    let arg: number;
    let min: number;
    if (minor === 24) {
      arg = data[start + 1];
      min = 24;
    } else if (minor === 25) {
      arg = (data[start + 1] << 8) | data[start + 2];
      min = 0x100;
    } else if (minor === 26) {
      arg = readUint32(data, start + 1);
      min = 0x10000;
    } else {
      const hi = readUint32(data, start + 1);
      if (hi > 0x1fffff) this.#unsafe();
      arg = hi * 0x100000000 + readUint32(data, start + 5);
      min = 0x100000000;
    }
    if (arg < min) {
      refuse(`Invalid CBOR: argument at byte ${start} is encoded in more bytes than necessary`);
    }
    this.pos = start + 1 + size;
    return arg;
  }

  /** Simple values and floats: returns 20-22 for `false`, `true`, `null`; refuses the rest. */
  #simple(minor: number): number {
    const data = this.#data;
    const start = this.#start;
    if (minor === 23) refuse("Invalid CBOR: undefined values are not supported");
    if (minor >= 25 && minor <= 27) {
      const size = 1 << (minor - 24);
      if (start + 1 + size > data.length) this.#truncated(start);
      const view = new DataView(data.buffer, data.byteOffset + start + 1, size);
      const value = minor === 25
        ? halfFloat(view.getUint16(0))
        : minor === 26
        ? view.getFloat32(0)
        : view.getFloat64(0);
      refuse(`Invalid CBOR: float ${value} is not allowed`);
    }
    if (minor === 31) refuse(`Invalid CBOR: unexpected break at byte ${start}`);
    refuse(`Invalid CBOR: simple value at byte ${start} is not allowed`);
  }

  /** Checks that `n` more items or bytes can fit in what is left of the input; returns `n`. */
  #length(n: number, what: string): number {
    if (n > this.#data.length - this.pos) {
      refuse(
        `Invalid CBOR: ${what} at byte ${this.#start} declares ${n}, past the end of the input`,
      );
    }
    return n;
  }

  #text(len: number): string {
    const data = this.#data;
    const start = this.pos;
    const end = start + len;
    this.pos = end;
    if (len <= SHORT_TEXT) {
      // Most strings are short ASCII (keys, rkeys, DIDs, dates): cheaper than a decoder call.
      const codes: number[] = new Array(len);
      let i = 0;
      for (; i < len; i++) {
        const b = data[start + i];
        if (b > 0x7f) break;
        codes[i] = b;
      }
      if (i === len) return String.fromCharCode.apply(null, codes);
    }
    try {
      return FATAL_UTF8.decode(data.subarray(start, end));
    } catch {
      refuse(`Invalid CBOR: text string at byte ${this.#start} is not valid UTF-8`);
    }
  }

  #enter(depth: number): void {
    if (depth >= this.#maxDepth) {
      refuse(`Invalid CBOR: nesting deeper than ${this.#maxDepth} levels`);
    }
  }

  #truncated(at: number): never {
    refuse(`Invalid CBOR: unexpected end of input at byte ${at}`);
  }

  #unsafe(): never {
    refuse(`Invalid CBOR: integer at byte ${this.#start} is outside of the safe integer range`);
  }
}

function readUint32(data: Uint8Array, at: number): number {
  return ((data[at] << 24) >>> 0) + ((data[at + 1] << 16) | (data[at + 2] << 8) | data[at + 3]);
}

/** The value of an IEEE 754 half-precision float (only to name it in an error). */
function halfFloat(h: number): number {
  const exp = (h >> 10) & 0x1f;
  const mant = h & 0x3ff;
  const abs = exp === 0
    ? mant * 2 ** -24
    : exp !== 31
    ? (mant + 1024) * 2 ** (exp - 25)
    : mant === 0
    ? Infinity
    : NaN;
  return h & 0x8000 ? -abs : abs;
}

/** Length-first then bytewise comparison of two encoded keys (DAG-CBOR canonical order). */
function compareSpans(
  data: Uint8Array,
  aStart: number,
  aEnd: number,
  bStart: number,
  bEnd: number,
) {
  const aLen = aEnd - aStart;
  const bLen = bEnd - bStart;
  if (aLen !== bLen) return aLen - bLen;
  for (let i = 0; i < aLen; i++) {
    const diff = data[aStart + i] - data[bStart + i];
    if (diff !== 0) return diff;
  }
  return 0;
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
