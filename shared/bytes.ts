/**
 * Byte helpers both servers use: joining chunks, reading a stream up to a limit, and a request's
 * declared body length. Only web-standard APIs (`ReadableStream`, `Headers`), no Deno APIs.
 *
 * @module
 */

/** Joins byte chunks into one array (a single chunk is returned as is, not copied). */
export function concatBytes(parts: readonly Uint8Array[]): Uint8Array {
  if (parts.length === 1) return parts[0];
  const out = new Uint8Array(parts.reduce((n, p) => n + p.byteLength, 0));
  let pos = 0;
  for (const p of parts) {
    out.set(p, pos);
    pos += p.byteLength;
  }
  return out;
}

/**
 * Reads `stream` to its end, at most `maxBytes` bytes: as soon as more arrives the stream is
 * cancelled and the error `tooLarge()` returns is thrown, so nothing past the limit is buffered.
 * A null stream reads as empty.
 *
 * @example
 * ```ts
 * const bytes = await readStreamLimited(new Response("hello").body, 10, () => new Error("big"));
 * // bytes.length === 5
 * ```
 */
export async function readStreamLimited(
  stream: ReadableStream<Uint8Array> | null,
  maxBytes: number,
  tooLarge: () => Error,
): Promise<Uint8Array> {
  if (stream === null) return new Uint8Array(0);
  const reader = stream.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > maxBytes) {
      await reader.cancel().catch(() => {});
      throw tooLarge();
    }
    chunks.push(value);
  }
  return chunks.length === 0 ? new Uint8Array(0) : concatBytes(chunks);
}

/**
 * The request's declared body length: `Content-Length` without `Transfer-Encoding`; a repeated
 * header arrives as a list, usable when all its values agree. Null otherwise.
 */
export function declaredLength(headers: Headers): number | null {
  const value = headers.get("content-length");
  if (value === null || headers.has("transfer-encoding")) return null;
  const values = new Set(value.split(",").map((v) => v.trim()));
  if (values.size !== 1) return null;
  const [only] = values;
  return /^\d+$/.test(only) ? Number(only) : null;
}

/**
 * The UTF-8 length of `s` in bytes, counted without encoding it (a lone surrogate counts 3, as
 * the U+FFFD `TextEncoder` writes for it).
 */
export function utf8Length(s: string): number {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) n += 1;
    else if (c < 0x800) n += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        n += 4;
        i++;
      } else n += 3;
    } else n += 3;
  }
  return n;
}
