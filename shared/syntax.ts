/**
 * Syntax validators for AT Protocol identifiers (docs/protocol.md 11), matching the
 * interop `syntax/*_valid.txt` and `*_invalid.txt` lists exactly. All are pure, total functions:
 * any input (including non-strings) gives a boolean, never an exception.
 *
 * @module
 */

const DID_RE = /^did:[a-z]+:[a-zA-Z0-9._:%-]*[a-zA-Z0-9._-]$/;
const DID_MAX_LENGTH = 2048;

const HANDLE_RE =
  /^([a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?\.)+[a-zA-Z]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?$/;
const HANDLE_MAX_LENGTH = 253;

const NSID_RE =
  /^[a-zA-Z]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)+\.[a-zA-Z][a-zA-Z0-9]{0,62}$/;
/** 253 characters of domain authority, a dot and a 63-character name. */
const NSID_MAX_LENGTH = 253 + 1 + 63;

const RECORD_KEY_RE = /^[a-zA-Z0-9_~.:-]{1,512}$/;

const AT_URI_PREFIX = "at://";
/** AT-URIs are capped at 8 KiB. */
const AT_URI_MAX_LENGTH = 8 * 1024;

const DATETIME_RE =
  /^([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]{1,20})?(Z|([+-])([0-9]{2}):([0-9]{2}))$/;
/** Milliseconds of 0000-01-01T00:00:00Z; datetimes that normalise before it are refused. */
const YEAR_ZERO_MS = utcMillis([0, 1, 1, 0, 0, 0]);

/**
 * Reports whether `s` is DID syntax: `did:<lowercase method>:<identifier>`, identifier chars
 * `A-Za-z0-9._:%-`, not ending in `:` or `%`, at most 2048 characters.
 */
export function isValidDid(s: string): boolean {
  return typeof s === "string" && s.length <= DID_MAX_LENGTH && DID_RE.test(s);
}

/**
 * Reports whether `s` is handle syntax: a DNS name of at least two labels (each 1-63 chars of
 * `A-Za-z0-9-`, no leading or trailing hyphen), a top-level label starting with a letter, at most
 * 253 characters. Case-insensitive; use {@link normalizeHandle} before storing or comparing.
 */
export function isValidHandle(s: string): boolean {
  return typeof s === "string" && s.length <= HANDLE_MAX_LENGTH && HANDLE_RE.test(s);
}

/** Returns the canonical (lower-case) form of a handle. */
export function normalizeHandle(s: string): string {
  return s.toLowerCase();
}

/**
 * Reports whether `s` is NSID syntax: a reversed domain authority of at least two labels and a
 * name segment (`[A-Za-z][A-Za-z0-9]{0,62}`, no hyphens), at most 317 characters.
 */
export function isValidNsid(s: string): boolean {
  return typeof s === "string" && s.length <= NSID_MAX_LENGTH && NSID_RE.test(s);
}

/**
 * Reports whether `s` is record key syntax: 1-512 characters of `A-Za-z0-9 . - _ : ~`, and not
 * `.` or `..`.
 */
export function isValidRecordKey(s: string): boolean {
  return typeof s === "string" && RECORD_KEY_RE.test(s) && s !== "." && s !== "..";
}

/**
 * Reports whether `s` is a Lexicon AT-URI: `at://<did or handle>[/<nsid>[/<record key>]]`, with
 * no trailing slash, query or fragment, at most 8 KiB.
 */
export function isValidAtUri(s: string): boolean {
  if (typeof s !== "string" || s.length > AT_URI_MAX_LENGTH || !s.startsWith(AT_URI_PREFIX)) {
    return false;
  }
  const parts = s.slice(AT_URI_PREFIX.length).split("/");
  if (parts.length > 3) return false;
  const [authority, collection, rkey] = parts;
  if (!isValidDid(authority) && !isValidHandle(authority)) return false;
  if (collection !== undefined && !isValidNsid(collection)) return false;
  if (rkey !== undefined && !isValidRecordKey(rkey)) return false;
  return true;
}

/**
 * Reports whether `s` is an atproto datetime: RFC 3339 and ISO 8601 at once, i.e.
 * `YYYY-MM-DDTHH:MM:SS[.fraction]` with upper-case `T`, a required `Z` or `+HH:MM`/`-HH:MM`
 * offset (not `-00:00`), real calendar values, and not before year 0 once normalised to UTC.
 */
export function isValidDatetime(s: string): boolean {
  if (typeof s !== "string" || s.length > 64) return false;
  const m = DATETIME_RE.exec(s);
  if (m === null) return false;
  const year = +m[1], month = +m[2], day = +m[3];
  const hour = +m[4], minute = +m[5], second = +m[6];
  if (month < 1 || month > 12) return false;
  if (day < 1 || day > daysInMonth(year, month)) return false;
  if (hour > 23 || minute > 59 || second > 59) return false;
  let offsetMinutes = 0;
  if (m[8] !== "Z") {
    const offHours = +m[10];
    const offMinutes = +m[11];
    if (offHours > 23 || offMinutes > 59) return false;
    if (m[9] === "-" && offHours === 0 && offMinutes === 0) return false;
    offsetMinutes = (m[9] === "-" ? -1 : 1) * (offHours * 60 + offMinutes);
  }
  // An offset moves a time by less than a day: only year 0 can normalise to before it.
  if (year > 0) return true;
  const ms = utcMillis([year, month, day, hour, minute, second]) - offsetMinutes * 60_000;
  return ms >= YEAR_ZERO_MS;
}

function daysInMonth(year: number, month: number): number {
  if (month === 2) {
    const leap = (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0;
    return leap ? 29 : 28;
  }
  return month === 4 || month === 6 || month === 9 || month === 11 ? 30 : 31;
}

/** UTC epoch milliseconds; unlike `Date.UTC`, years 0-99 are taken literally. */
function utcMillis(fields: readonly number[]): number {
  const [year, month, day, hour, minute, second] = fields;
  const d = new Date(0);
  d.setUTCFullYear(year, month - 1, day);
  d.setUTCHours(hour, minute, second, 0);
  return d.getTime();
}
