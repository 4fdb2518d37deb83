/**
 * A request body bound for the query API: a declared `Content-Length` over the limit is refused
 * before anything is read; a body without one (chunked) is read up to the limit and refused as
 * soon as it passes it, then handed on as bytes.
 *
 * Hono's `bodyLimit` rebuilds the request with `new Request(raw, ...)`, which reads
 * `request.signal` and makes Deno print a plain-text "legacy abort" warning into the JSON logs;
 * this one builds the new request from the URL, method and headers only.
 *
 * @module
 */

import type { MiddlewareHandler } from "hono";
import { declaredLength, readStreamLimited } from "../../shared/bytes.ts";

/** Refuses bodies over `maxBytes` with the error `tooLarge()` returns. */
export function limitBody(maxBytes: number, tooLarge: () => Error): MiddlewareHandler {
  return async function limitBody(c, next) {
    const raw = c.req.raw;
    if (raw.body === null) return next();
    const declared = declaredLength(raw.headers);
    if (declared !== null) {
      // The server stops reading a body at its declared length.
      if (declared > maxBytes) throw tooLarge();
      return next();
    }
    // No usable declared length: read it, bounded.
    const body = await readStreamLimited(raw.body, maxBytes, tooLarge);
    c.req.raw = new Request(raw.url, {
      method: raw.method,
      headers: raw.headers,
      body: body as Uint8Array<ArrayBuffer>,
    });
    return next();
  };
}
