/**
 * Splitting network text into plain runs and links, for rendering as text: only `http:` and
 * `https:` URLs become links; everything else, markup included, stays characters.
 *
 * @module
 */

/** A run of post text: plain, or a link to an http(s) URL. */
export type TextPart = { text: string } | { text: string; href: string };

const URL_RE = /\bhttps?:\/\/[^\s<>"'`]+/gi;
const TRAILING = /[.,;:!?)\]}'"]+$/;

/** An http(s) URL from `raw`, or null for any other scheme or a malformed one. */
export function safeHref(raw: string): string | null {
  try {
    const url = new URL(raw);
    return url.protocol === "http:" || url.protocol === "https:" ? url.href : null;
  } catch {
    return null;
  }
}

/** Splits `text` into runs; URLs (without trailing punctuation) become links. */
export function splitLinks(text: string): TextPart[] {
  const parts: TextPart[] = [];
  let last = 0;
  for (const m of text.matchAll(URL_RE)) {
    const raw = m[0].replace(TRAILING, "");
    const href = safeHref(raw);
    if (href === null) continue;
    if (m.index > last) parts.push({ text: text.slice(last, m.index) });
    parts.push({ text: raw, href });
    last = m.index + raw.length;
  }
  if (last < text.length) parts.push({ text: text.slice(last) });
  return parts;
}
