/**
 * Bounded JSON request bodies for XRPC procedures: the body is read as a stream and refused with
 * 413 as soon as it passes the limit, whatever `Content-Length` claims.
 *
 * @module
 */

import type { Context } from "hono";
import { declaredLength, readStreamLimited } from "../../shared/bytes.ts";
import { XrpcError } from "./errors.ts";

/** Default limit of a JSON procedure body (the reference PDS's JSON limit). */
export const MAX_JSON_BODY_BYTES = 1_000_000;

/** Reads a request body of at most `maxBytes` bytes; throws 413 `PayloadTooLarge` past it. */
export async function readBodyBytes(c: Context, maxBytes: number): Promise<Uint8Array> {
  const declared = declaredLength(c.req.raw.headers);
  if (declared !== null && declared > maxBytes) throw tooLarge(maxBytes);
  // A declared length within the limit: the server ends the body there, so it is read in one
  // go (no JavaScript stream). Without one (chunked), it is counted as it streams in.
  if (declared !== null) return new Uint8Array(await c.req.raw.arrayBuffer());
  return await readStreamLimited(c.req.raw.body, maxBytes, () => tooLarge(maxBytes));
}

/**
 * Reads a JSON object body (an empty body reads as `{}`); throws 400 `InvalidRequest` for
 * anything that is not a JSON object and 413 `PayloadTooLarge` past `maxBytes`.
 */
export async function readJsonBody(
  c: Context,
  maxBytes = MAX_JSON_BODY_BYTES,
): Promise<Record<string, unknown>> {
  const bytes = await readBodyBytes(c, maxBytes);
  if (bytes.byteLength === 0) return {};
  let value: unknown;
  try {
    value = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes));
  } catch {
    throw new XrpcError(400, "InvalidRequest", "Request body is not valid JSON");
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new XrpcError(400, "InvalidRequest", "Request body must be a JSON object");
  }
  return value as Record<string, unknown>;
}

/**
 * Returns an optional string member of a body; throws 400 `InvalidRequest` naming the member when
 * it is present but not a string.
 */
export function optionalString(body: Record<string, unknown>, name: string): string | undefined {
  const value = body[name];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "string") {
    throw new XrpcError(400, "InvalidRequest", `Member ${name} must be a string`);
  }
  return value;
}

function tooLarge(maxBytes: number): XrpcError {
  return new XrpcError(413, "PayloadTooLarge", `Request body is larger than ${maxBytes} bytes`);
}
