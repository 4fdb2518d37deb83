/**
 * Paging cursors of the query API (docs/behaviour.md 10.9): an opaque base64url string of the sort
 * key of the last item returned. Every list is ordered by a key that is unique per item (a time
 * plus a tiebreak), and the next page starts strictly below it, so paging never repeats or skips
 * an item, and items indexed meanwhile (newer keys) never shift the pages below.
 *
 * @module
 */

/** Sort key of a list ordered by (time desc, text tiebreak desc): timeline, followers. */
export type TextKey = readonly [time: string, tiebreak: string];
/** Sort key of a list ordered by (time desc, id desc): notifications. */
export type IdKey = readonly [time: string, id: number];

/** Upper bound of every cursor-less first page: `~` sorts after any ISO 8601 timestamp. */
export const TOP_TIME = "~";

const MAX_CURSOR_LENGTH = 2_048;
const ISO_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?Z$/;
const BASE64URL = /^[A-Za-z0-9_-]+$/;

/** Encodes a sort key as an opaque cursor. */
export function encodeCursor(key: TextKey | IdKey | number): string {
  const bytes = new TextEncoder().encode(JSON.stringify(key));
  let binary = "";
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/** The cursor of a page's next page: null when there is none. */
export function nextCursor(next: TextKey | IdKey | number | null): string | null {
  return next === null ? null : encodeCursor(next);
}

/** Decodes a (time, text) cursor; null when `cursor` is not one. */
export function decodeTextKey(cursor: string): TextKey | null {
  const v = decodeJson(cursor);
  return Array.isArray(v) && v.length === 2 && isTime(v[0]) && typeof v[1] === "string" &&
      v[1].length <= MAX_CURSOR_LENGTH
    ? [v[0], v[1]]
    : null;
}

/** Decodes a (time, id) cursor; null when `cursor` is not one. */
export function decodeIdKey(cursor: string): IdKey | null {
  const v = decodeJson(cursor);
  return Array.isArray(v) && v.length === 2 && isTime(v[0]) && Number.isSafeInteger(v[1])
    ? [v[0], v[1]]
    : null;
}

/** Decodes a row-id cursor (search, newest first by id); null when `cursor` is not one. */
export function decodeRowId(cursor: string): number | null {
  const v = decodeJson(cursor);
  return Number.isSafeInteger(v) && (v as number) > 0 ? v as number : null;
}

function isTime(v: unknown): v is string {
  return typeof v === "string" && ISO_TIME.test(v);
}

function decodeJson(cursor: string): unknown {
  if (cursor.length === 0 || cursor.length > MAX_CURSOR_LENGTH || !BASE64URL.test(cursor)) {
    return undefined;
  }
  try {
    const binary = atob(cursor.replace(/-/g, "+").replace(/_/g, "/"));
    const bytes = Uint8Array.from(binary, (ch) => ch.charCodeAt(0));
    return JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes));
  } catch {
    return undefined;
  }
}
