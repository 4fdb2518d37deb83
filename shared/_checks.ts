/**
 * Private field checks shared by `records.ts` and `ops.ts`: each returns a reason string naming
 * the field and the (bounded) bad value, or null when the value is fine. Never throws.
 *
 * @module
 */

import { parseAtUri } from "./at_uri.ts";
import { utf8Length } from "./bytes.ts";
import { parseCid } from "./cid.ts";
import { isValidDatetime } from "./syntax.ts";
import { BLOB_TYPE } from "./nsid.ts";
import { countGraphemes } from "./graphemes.ts";

export { countGraphemes };

/** Longest prefix of a bad string value quoted in a reason. */
const SHOW_LENGTH = 64;

/** A plain object (JSON object or decoded CBOR map). */
export type Fields = Record<string, unknown>;

/** Checks a strong reference `{uri, cid}`: a record AT-URI and a CID string. */
export function checkStrongRef(field: string, ref: unknown): string | null {
  if (!isPlainObject(ref)) return `Invalid ${field}: ${show(ref)}`;
  if (!isRecordUri(ref.uri)) return `Invalid ${field}.uri: ${show(ref.uri)}`;
  if (!isCidString(ref.cid)) return `Invalid ${field}.cid: ${show(ref.cid)}`;
  return null;
}

/** Checks a blob reference; `$type` (when present) must be `blob`, `ref.$link` a CID string. */
export function checkBlobRef(field: string, blob: unknown): string | null {
  if (!isPlainObject(blob)) return `Invalid ${field}: ${show(blob)}`;
  if (blob.$type !== undefined && blob.$type !== BLOB_TYPE) {
    return `Invalid ${field}.$type: ${show(blob.$type)}`;
  }
  const ref = blob.ref;
  if (!isPlainObject(ref) || !isCidString(ref.$link)) return `Invalid ${field}.ref: ${show(ref)}`;
  if (blob.mimeType !== undefined && (typeof blob.mimeType !== "string" || blob.mimeType === "")) {
    return `Invalid ${field}.mimeType: ${show(blob.mimeType)}`;
  }
  if (blob.size !== undefined && !(Number.isSafeInteger(blob.size) && (blob.size as number) >= 0)) {
    return `Invalid ${field}.size: ${show(blob.size)}`;
  }
  return null;
}

/** Checks a string against a UTF-8 byte bound first, then a grapheme bound. */
export function checkText(
  field: string,
  text: unknown,
  limits: { maxGraphemes: number; maxBytes: number },
): string | null {
  const { maxGraphemes, maxBytes } = limits;
  if (typeof text !== "string") return `Invalid ${field}: ${show(text)}`;
  // UTF-8 length >= UTF-16 length: the first test refuses huge strings without a scan.
  if (text.length > maxBytes || utf8Length(text) > maxBytes) {
    return `Invalid ${field}, more than ${maxBytes} UTF-8 bytes: ${show(text)}`;
  }
  if (!text.isWellFormed()) return `Invalid ${field}, lone surrogate: ${show(text)}`;
  // U+0000 has no place in prose, and SQLite text reads stop at it: the index would serve a
  // cut-off post while its search row still held the whole text.
  if (text.includes("\0")) return `Invalid ${field}, contains U+0000: ${show(text)}`;
  // A grapheme holds at least one UTF-16 code unit: a short string needs no segmentation.
  const graphemes = text.length <= maxGraphemes ? text.length : countGraphemes(text);
  if (graphemes > maxGraphemes) {
    return `Invalid ${field}, ${graphemes} graphemes (max ${maxGraphemes}): ${show(text)}`;
  }
  return null;
}

/** Checks a datetime string (spec syntax). */
export function checkDatetime(field: string, value: unknown): string | null {
  if (typeof value === "string" && isValidDatetime(value)) return null;
  return `Invalid ${field}: ${show(value)}`;
}

/** Whether `value` is an AT-URI naming a record (authority, collection and rkey). */
export function isRecordUri(value: unknown): boolean {
  if (typeof value !== "string") return false;
  try {
    parseAtUri(value);
    return true;
  } catch {
    return false;
  }
}

/** Whether `value` is a CID in string form. */
export function isCidString(value: unknown): boolean {
  if (typeof value !== "string") return false;
  if (isSha256CidV1(value)) return true;
  try {
    parseCid(value);
    return true;
  } catch {
    return false;
  }
}

/** Base32 (RFC 4648, lower case) digit values; -1 for characters outside the alphabet. */
const BASE32_VALUE = new Int8Array(128).fill(-1);
for (let i = 0; i < 32; i++) BASE32_VALUE["abcdefghijklmnopqrstuvwxyz234567".charCodeAt(i)] = i;

/**
 * The shape of nearly every CID a record carries: a base32 CIDv1 of a 32-byte SHA-256 digest,
 * DAG-CBOR (`bafyrei...`) or raw (`bafkrei...`), 59 characters. Checked without decoding (a
 * full parse is most of the cost of validating a like or a reply). Only answers true for
 * strings `CID.parse` accepts: the 7-character prefix fixes the first 30 bits (version, codec,
 * hash code and length but their last 2 bits), the 8th digit's top 2 bits are the length's last
 * 2 bits (zero), and the last digit's low 2 bits are padding (zero). Anything else is left to
 * the parser.
 */
function isSha256CidV1(s: string): boolean {
  if (s.length !== 59 || !(s.startsWith("bafyrei") || s.startsWith("bafkrei"))) return false;
  for (let i = 7; i < 59; i++) {
    const c = s.charCodeAt(i);
    if (c >= 128 || BASE32_VALUE[c] < 0) return false;
  }
  return (BASE32_VALUE[s.charCodeAt(7)] & 0b11000) === 0 &&
    (BASE32_VALUE[s.charCodeAt(58)] & 0b11) === 0;
}

/** Whether `value` is a plain object (not an array, bytes, CID or class instance). */
export function isPlainObject(value: unknown): value is Fields {
  if (typeof value !== "object" || value === null) return false;
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

function isHighSurrogate(c: number): boolean {
  return c >= 0xd800 && c <= 0xdbff;
}

/** Shows a hostile value in a reason string, bounded: strings as truncated JSON. */
export function show(value: unknown): string {
  if (typeof value === "string") {
    if (value.length <= SHOW_LENGTH) return JSON.stringify(value);
    const end = isHighSurrogate(value.charCodeAt(SHOW_LENGTH - 1)) ? SHOW_LENGTH - 1 : SHOW_LENGTH;
    return `${JSON.stringify(value.slice(0, end)).slice(0, -1)}..."`;
  }
  if (Array.isArray(value)) return `an array of ${value.length} items`;
  if (value instanceof Uint8Array) return `${value.length} bytes`;
  if (typeof value === "object" && value !== null) return "an object without the expected members";
  return String(value);
}
