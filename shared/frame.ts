/**
 * `com.atproto.sync.subscribeRepos` frames (spec 6.1 rule 6; atproto reference section 6.1): one
 * WebSocket binary message holds two consecutive DAG-CBOR values, a header then a body, and
 * nothing after them. Message headers are `{op: 1, t: "#commit"}` (or another `#name`), error
 * headers `{op: -1}` with a body `{error, message?}`.
 *
 * @module
 */

import { isPlainObject, show } from "./_checks.ts";
import { CborError, decodeCborFirst, encodeCbor } from "./cbor.ts";

/** Largest frame {@link decodeFrame} accepts by default: 5 MiB (atproto frame limit). */
export const DEFAULT_MAX_FRAME_SIZE = 5 * 1024 * 1024;

/** `op` of a message frame. */
export const FRAME_OP_MESSAGE = 1;
/** `op` of an error frame. */
export const FRAME_OP_ERROR = -1;

/** A frame header as {@link encodeFrame} takes it: a message with its type, or an error. */
export type FrameHeaderInit = { op: 1; t: string } | { op: -1 };

/** A decoded header: `op` is 1 (then `t` is a `#name`) or -1 (then `t` is absent). */
export interface FrameHeader {
  op: number;
  t?: string;
}

/** A decoded frame: header and body map (links as `CID` instances, bytes as `Uint8Array`). */
export interface Frame {
  header: FrameHeader;
  body: Record<string, unknown>;
}

/** Thrown by {@link decodeFrame} and {@link encodeFrame} for a malformed frame. */
export class FrameError extends Error {
  /** Creates an error; `cause` keeps the underlying codec error when there is one. */
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "FrameError";
  }
}

/**
 * Encodes a frame: the header then the body, each canonical DAG-CBOR.
 *
 * @throws {FrameError} when the header is not a valid message or error header, the body is not
 * a map, or a value cannot be encoded.
 * @example
 * ```ts
 * const frame = encodeFrame({ op: 1, t: "#commit" }, { seq: 1, repo: "did:plc:x" });
 * decodeFrame(frame).body.seq; // 1
 * ```
 */
export function encodeFrame(header: FrameHeaderInit, body: unknown): Uint8Array {
  const problem = headerProblem(header) ?? bodyProblem(header.op, body);
  if (problem !== null) throw new FrameError(problem);
  const wireHeader = header.op === FRAME_OP_MESSAGE ? { op: header.op, t: header.t } : { op: -1 };
  try {
    const head = encodeCbor(wireHeader);
    const tail = encodeCbor(body);
    const out = new Uint8Array(head.length + tail.length);
    out.set(head, 0);
    out.set(tail, head.length);
    return out;
  } catch (e) {
    throw new FrameError(`Frame body cannot be encoded: ${messageOf(e)}`, { cause: e });
  }
}

/**
 * Decodes a frame strictly: a header map of a known shape, a body map, nothing trailing, and at
 * most `maxSize` bytes (default {@link DEFAULT_MAX_FRAME_SIZE}).
 *
 * @throws {FrameError} on anything else (invalid CBOR included).
 */
export function decodeFrame(bytes: Uint8Array, opts: { maxSize?: number } = {}): Frame {
  const maxSize = opts.maxSize ?? DEFAULT_MAX_FRAME_SIZE;
  if (!(bytes instanceof Uint8Array)) throw new FrameError("Frame is not binary");
  if (bytes.length > maxSize) {
    throw new FrameError(`Frame is ${bytes.length} bytes, over the ${maxSize} byte limit`);
  }
  if (bytes.length === 0) throw new FrameError("Frame is empty");
  const [header, rest] = decodePart("header", bytes, maxSize);
  const headerBad = headerProblem(header);
  if (headerBad !== null) throw new FrameError(headerBad);
  const h = header as FrameHeader;
  if (rest.length === 0) throw new FrameError("Frame has no body");
  const [body, trailing] = decodePart("body", rest, maxSize);
  if (trailing.length > 0) {
    throw new FrameError(`Frame has ${trailing.length} trailing bytes after the body`);
  }
  const bodyBad = bodyProblem(h.op, body);
  if (bodyBad !== null) throw new FrameError(bodyBad);
  return {
    header: h.op === FRAME_OP_MESSAGE ? { op: h.op, t: h.t } : { op: h.op },
    body: body as Record<string, unknown>,
  };
}

function decodePart(part: string, bytes: Uint8Array, maxSize: number): [unknown, Uint8Array] {
  try {
    return decodeCborFirst(bytes, { maxSize });
  } catch (e) {
    if (e instanceof CborError) {
      throw new FrameError(`Frame ${part} is not valid DAG-CBOR: ${e.message}`, { cause: e });
    }
    throw new FrameError(`Frame ${part} cannot be decoded: ${messageOf(e)}`, { cause: e });
  }
}

function headerProblem(header: unknown): string | null {
  if (!isPlainObject(header)) return `Frame header is not a map: ${show(header)}`;
  const keys = Object.keys(header);
  if (header.op === FRAME_OP_MESSAGE) {
    if (typeof header.t !== "string" || !/^#[a-zA-Z][a-zA-Z0-9]{0,63}$/.test(header.t)) {
      return `Frame header t is not a #type name: ${show(header.t)}`;
    }
    if (keys.length !== 2) return `Frame header has unexpected members: ${show(keys.join(", "))}`;
    return null;
  }
  if (header.op === FRAME_OP_ERROR) {
    if (keys.length !== 1) {
      return `Error frame header has unexpected members: ${show(keys.join(", "))}`;
    }
    return null;
  }
  return `Frame header op is not 1 or -1: ${show(header.op)}`;
}

function bodyProblem(op: number, body: unknown): string | null {
  if (!isPlainObject(body)) return `Frame body is not a map: ${show(body)}`;
  if (op !== FRAME_OP_ERROR) return null;
  if (typeof body.error !== "string" || body.error === "") {
    return `Error frame body has no error name: ${show(body.error)}`;
  }
  if (body.message !== undefined && typeof body.message !== "string") {
    return `Error frame message is not a string: ${show(body.message)}`;
  }
  return null;
}

function messageOf(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
