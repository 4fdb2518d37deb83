/**
 * Strict DAG-CBOR (atproto "DRISL") encoding and decoding over `cborg`.
 *
 * Encoding: canonical map key order (length-first, then bytewise), CIDs as tag 42, no floats,
 * only safe integers, `undefined` object properties skipped, `undefined` elsewhere refused.
 *
 * Decoding: shortest-form integers and lengths, definite lengths only, no floats, no
 * `undefined`, no tags but 42, text map keys in canonical order without duplicates, no
 * `__proto__` key, valid UTF-8, bounded input size and nesting depth, enforced per token while
 * decoding (no extra walk over the result).
 *
 * @module
 */
import { encodeOptions as dagCborEncodeOptions } from "@ipld/dag-cbor";
import * as cborg from "cborg";
import { CID } from "multiformats/cid";

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
 * strings to `Uint8Array`.
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
  const tokenizer = new StrictTokenizer(bytes, opts?.maxDepth ?? DEFAULT_MAX_CBOR_DEPTH);
  try {
    return cborg.decodeFirst(bytes, { ...DECODE_OPTIONS, tokenizer });
  } catch (err) {
    if (err instanceof CborError) throw err;
    const text = errorText(err).replace(/^CBOR decode error: /, "");
    throw new CborError(`Invalid CBOR: ${text}`, { cause: err });
  }
}

function decodeCidTag(decode: cborg.TagDecodeControl): CID {
  const bytes = decode();
  if (!(bytes instanceof Uint8Array)) refuse("Invalid CBOR: tag 42 content is not a byte string");
  if (bytes[0] !== 0) refuse("Invalid CBOR: tag 42 CID does not start with 0x00");
  try {
    return CID.decode(bytes.subarray(1));
  } catch (err) {
    throw new CborError(`Invalid CBOR: tag 42 holds an invalid CID: ${errorText(err)}`);
  }
}

const DECODE_OPTIONS: cborg.DecodeOptions = {
  strict: true,
  allowIndefinite: false,
  allowUndefined: false,
  coerceUndefinedToNull: false,
  allowNaN: false,
  allowInfinity: false,
  allowBigInt: false,
  useMaps: false,
  rejectDuplicateMapKeys: true,
  tags: { [CID_TAG]: decodeCidTag },
};

type Tokenizer = NonNullable<cborg.DecodeOptions["tokenizer"]>;

const FATAL_UTF8 = new TextDecoder("utf-8", { fatal: true });

/**
 * Wraps cborg's tokenizer to enforce what its options cannot, per token, before cborg recurses:
 * nesting depth, no floats, only tag 42, string map keys in canonical order, no `__proto__`
 * key, and valid UTF-8 (cborg replaces bad sequences with U+FFFD instead of failing).
 */
class StrictTokenizer implements Tokenizer {
  #inner: cborg.Tokenizer;
  #data: Uint8Array;
  #maxDepth: number;
  #depth = 0;
  // Per open container: items still to read, whether it is a map, span of its last key.
  #remaining: number[] = [];
  #isMap: boolean[] = [];
  #keyStart: number[] = [];
  #keyEnd: number[] = [];

  constructor(data: Uint8Array, maxDepth: number) {
    this.#data = data;
    this.#maxDepth = maxDepth;
    this.#inner = new cborg.Tokenizer(data, DECODE_OPTIONS);
  }

  done(): boolean {
    return this.#inner.done();
  }

  pos(): number {
    return this.#inner.pos();
  }

  next(): cborg.Token {
    const remaining = this.#remaining;
    while (this.#depth > 0 && remaining[this.#depth - 1] === 0) this.#depth--;
    const top = this.#depth - 1;
    const isKey = top >= 0 && this.#isMap[top] && (remaining[top] & 1) === 0;
    if (top >= 0) remaining[top]--;
    const start = this.#inner.pos();
    const token = this.#inner.next();
    const major = token.type.major;
    if (major === 3) {
      if (token.value.includes("\uFFFD")) this.#checkUtf8(start);
    } else if (isKey) {
      refuse(`Invalid CBOR: map key is not a text string (${token.type.name})`);
    }
    if (isKey) this.#checkKey(top, start, token.value);
    if (major === 4 || major === 5 || major === 6) {
      if (major === 6 && token.value !== CID_TAG) {
        refuse(`Invalid CBOR: tag ${token.value} is not allowed`);
      }
      if (this.#depth >= this.#maxDepth) {
        refuse(`Invalid CBOR: nesting deeper than ${this.#maxDepth} levels`);
      }
      const count = major === 4 ? token.value : major === 5 ? token.value * 2 : 1;
      if (count > 0) {
        const d = this.#depth++;
        remaining[d] = count;
        this.#isMap[d] = major === 5;
        this.#keyStart[d] = -1;
        this.#keyEnd[d] = -1;
      }
    } else if (major === 7 && token.type.name === "float") {
      refuse(`Invalid CBOR: float ${token.value} is not allowed`);
    }
    return token;
  }

  #checkUtf8(start: number): void {
    const minor = this.#data[start] & 31;
    const header = minor < 24 ? 1 : minor === 24 ? 2 : minor === 25 ? 3 : minor === 26 ? 5 : 9;
    try {
      FATAL_UTF8.decode(this.#data.subarray(start + header, this.#inner.pos()));
    } catch {
      refuse(`Invalid CBOR: text string at byte ${start} is not valid UTF-8`);
    }
  }

  #checkKey(top: number, start: number, key: string): void {
    if (key === "__proto__") refuse('Invalid CBOR: map key "__proto__" is not allowed');
    const end = this.#inner.pos();
    const prevStart = this.#keyStart[top];
    if (prevStart >= 0) {
      const order = compareSpans(this.#data, prevStart, this.#keyEnd[top], start, end);
      if (order === 0) refuse(`Invalid CBOR: duplicate map key "${key}"`);
      if (order > 0) refuse(`Invalid CBOR: map key "${key}" is out of canonical order`);
    }
    this.#keyStart[top] = start;
    this.#keyEnd[top] = end;
  }
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
