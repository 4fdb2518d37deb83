/**
 * The atproto JSON form of data-model values ("lex JSON"): links as `{"$link": "<cid>"}` and
 * bytes as `{"$bytes": "<base64>"}` (standard alphabet, no padding on output, padding optional
 * on input). Conversions are bounded in depth and strict about the data-model rules a codec can
 * check: integers only (no floats), `$link`/`$bytes` objects with exactly one key, `$type`
 * a non-empty string, blob objects with a link `ref`, a string `mimeType` and an integer `size`.
 *
 * @module
 */
import { asCid, CID, formatCid } from "./cid.ts";

/** Thrown by {@linkcode fromLexJson} and {@linkcode toLexJson} for values outside the data model. */
export class LexJsonError extends Error {
  /** Creates an error. */
  constructor(message: string) {
    super(message);
    this.name = "LexJsonError";
  }
}

/** Options for {@linkcode fromLexJson} and {@linkcode toLexJson}. */
export interface LexJsonOptions {
  /** Deepest accepted nesting of arrays and objects (default {@linkcode DEFAULT_MAX_LEX_DEPTH}). */
  maxDepth?: number;
}

/** Default `maxDepth` for lex JSON conversions (same as the CBOR decoder's default). */
export const DEFAULT_MAX_LEX_DEPTH = 64;

/**
 * Converts a data-model value (as {@linkcode decodeCbor} returns it) to lex JSON: CIDs become
 * `{$link}`, `Uint8Array`s `{$bytes}`; `undefined` object properties are dropped.
 *
 * @throws {LexJsonError} on floats, unsupported types or nesting beyond `maxDepth`.
 * @example
 * ```ts
 * toLexJson({ b: new Uint8Array([1, 2]) }); // { b: { $bytes: "AQI" } }
 * ```
 */
export function toLexJson(value: unknown, opts?: LexJsonOptions): unknown {
  return toJson(value, opts?.maxDepth ?? DEFAULT_MAX_LEX_DEPTH, "$");
}

/**
 * Converts lex JSON (for example from `JSON.parse`) to data-model values: `{$link}` becomes a
 * `CID`, `{$bytes}` a `Uint8Array`. CID and `Uint8Array` values already present pass through;
 * `undefined` object properties are dropped.
 *
 * @throws {LexJsonError} naming the path of a bad `$link`/`$bytes`/`$type`/blob, a float, a
 * `__proto__` key, an unsupported type or nesting beyond `maxDepth`.
 */
export function fromLexJson(value: unknown, opts?: LexJsonOptions): unknown {
  return fromJson(value, opts?.maxDepth ?? DEFAULT_MAX_LEX_DEPTH, "$");
}

/**
 * {@linkcode fromLexJson} for a value that must be an object at the top (a record or any other
 * data-model object).
 *
 * @throws {LexJsonError} when the value is not an object, or as {@linkcode fromLexJson}.
 */
export function fromLexJsonObject(value: unknown, opts?: LexJsonOptions): Record<string, unknown> {
  if (!isPlainObject(value)) throw new LexJsonError(`Value is not an object: ${kind(value)}`);
  return fromLexJson(value, opts) as Record<string, unknown>;
}

function toJson(value: unknown, depth: number, path: string): unknown {
  if (value === null || typeof value === "string" || typeof value === "boolean") return value;
  if (typeof value === "number") return checkInteger(value, path);
  if (typeof value !== "object") throw new LexJsonError(`Unsupported ${kind(value)} at ${path}`);
  if (value instanceof Uint8Array) return { $bytes: toBase64(value) };
  const cid = CID.asCID(value);
  if (cid) return { $link: formatCid(cid) };
  if (depth <= 0) throw new LexJsonError(`Nesting too deep at ${path}`);
  if (Array.isArray(value)) return value.map((v, i) => toJson(v, depth - 1, `${path}[${i}]`));
  if (!isPlainObject(value)) throw new LexJsonError(`Unsupported ${kind(value)} at ${path}`);
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) {
    if (v === undefined) continue;
    if (k === "__proto__") throw new LexJsonError(`Key "__proto__" is not allowed at ${path}`);
    out[k] = toJson(v, depth - 1, `${path}.${k}`);
  }
  return out;
}

function fromJson(value: unknown, depth: number, path: string): unknown {
  if (value === null || typeof value === "string" || typeof value === "boolean") return value;
  if (typeof value === "number") return checkInteger(value, path);
  if (typeof value !== "object") throw new LexJsonError(`Unsupported ${kind(value)} at ${path}`);
  if (value instanceof Uint8Array) return value;
  const cid = CID.asCID(value);
  if (cid) return cid;
  if (depth <= 0) throw new LexJsonError(`Nesting too deep at ${path}`);
  if (Array.isArray(value)) return value.map((v, i) => fromJson(v, depth - 1, `${path}[${i}]`));
  if (!isPlainObject(value)) throw new LexJsonError(`Unsupported ${kind(value)} at ${path}`);
  const obj = value as Record<string, unknown>;
  if (Object.hasOwn(obj, "$link")) return fromLink(obj, path);
  if (Object.hasOwn(obj, "$bytes")) return fromBytes(obj, path);
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(obj)) {
    if (v === undefined) continue;
    if (k === "__proto__") throw new LexJsonError(`Key "__proto__" is not allowed at ${path}`);
    out[k] = fromJson(v, depth - 1, `${path}.${k}`);
  }
  if (Object.hasOwn(out, "$type")) checkTyped(out, path);
  return out;
}

function fromLink(obj: Record<string, unknown>, path: string): CID {
  const link = obj.$link;
  if (Object.keys(obj).length !== 1) {
    throw new LexJsonError(`Link object at ${path} has keys other than $link`);
  }
  if (typeof link !== "string") throw new LexJsonError(`$link at ${path} is not a string`);
  const cid = asCid(link);
  if (!cid) throw new LexJsonError(`$link at ${path} is not a CID: ${JSON.stringify(link)}`);
  return cid;
}

function fromBytes(obj: Record<string, unknown>, path: string): Uint8Array {
  const b64 = obj.$bytes;
  if (Object.keys(obj).length !== 1) {
    throw new LexJsonError(`Bytes object at ${path} has keys other than $bytes`);
  }
  if (typeof b64 !== "string") throw new LexJsonError(`$bytes at ${path} is not a string`);
  const bytes = fromBase64(b64);
  if (!bytes) throw new LexJsonError(`$bytes at ${path} is not base64`);
  return bytes;
}

function checkTyped(obj: Record<string, unknown>, path: string): void {
  const type = obj.$type;
  if (typeof type !== "string" || type.length === 0) {
    throw new LexJsonError(`$type at ${path} is not a non-empty string: ${JSON.stringify(type)}`);
  }
  if (type !== "blob") return;
  if (!(obj.ref instanceof CID)) throw new LexJsonError(`Blob at ${path} has no ref link`);
  if (typeof obj.mimeType !== "string") {
    throw new LexJsonError(`Blob at ${path} has no string mimeType`);
  }
  if (typeof obj.size !== "number" || obj.size < 0) {
    throw new LexJsonError(`Blob at ${path} has no integer size: ${JSON.stringify(obj.size)}`);
  }
}

function checkInteger(n: number, path: string): number {
  if (!Number.isSafeInteger(n)) {
    throw new LexJsonError(`Number at ${path} is not a safe integer: ${n}`);
  }
  return n;
}

const BASE64_RE = /^[A-Za-z0-9+/]*={0,2}$/;

function fromBase64(s: string): Uint8Array | null {
  if (!BASE64_RE.test(s)) return null;
  const bare = s.replace(/=+$/, "");
  if (bare.length % 4 === 1) return null;
  if (s.length !== bare.length && s.length % 4 !== 0) return null;
  const bin = atob(bare.padEnd(bare.length + ((4 - bare.length % 4) % 4), "="));
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

function toBase64(bytes: Uint8Array): string {
  let bin = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    bin += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return btoa(bin).replace(/=+$/, "");
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (value === null || typeof value !== "object") return false;
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

function kind(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  if (typeof value === "object") return value.constructor?.name ?? "object";
  return typeof value;
}
