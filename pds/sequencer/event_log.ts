/**
 * Raw reads of the stored commit events for the stream: the exact `#commit` body bytes by seq
 * (no decoding, so replay and cross-process catch-up copy bytes only), the oldest kept seq,
 * and the frame bytes `header + body` built from them.
 *
 * The storage layout is the sequencer's (`pds/sequencer/sequencer.ts`): an event's body is split
 * into chunks under `seqEventChunkKey(seq, chunk)`, written in the commit's atomic operation.
 *
 * @module
 */

import { decodeCbor, encodeCbor } from "../../shared/cbor.ts";
import { decodeFrame } from "../../shared/frame.ts";
import { concatBytes } from "../../shared/bytes.ts";
import { seqEventChunkKey, seqEventPrefix, seqHeadKey } from "../store/keys.ts";

/** A stored event as bytes: its seq and the DAG-CBOR `#commit` body. */
export interface EventBody {
  seq: number;
  body: Uint8Array;
}

/** Encoded header of every commit frame: `{op: 1, t: "#commit"}` (encoded once). */
export const COMMIT_FRAME_HEADER: Uint8Array = encodeCbor({ op: 1, t: "#commit" });

/**
 * The WebSocket message of a stored event: the commit header bytes then the body bytes. A
 * stored event that is already a whole frame (an `#account` event, see {@link isStoredFrame})
 * is sent as it is.
 */
export function commitFrame(body: Uint8Array): Uint8Array {
  if (isStoredFrame(body)) return body;
  const out = new Uint8Array(COMMIT_FRAME_HEADER.length + body.length);
  out.set(COMMIT_FRAME_HEADER, 0);
  out.set(body, COMMIT_FRAME_HEADER.length);
  return out;
}

/**
 * True when stored event bytes are a whole frame (header then body) rather than a `#commit`
 * body: a frame starts with its two-entry header map (0xa2), while a `#commit` body is a map of
 * 11 or 12 entries (0xab, 0xac). Events other than commits (`#account`) are stored whole.
 */
export function isStoredFrame(stored: Uint8Array): boolean {
  return stored[0] === 0xa2;
}

/** The `time` of a stored event (a `#commit` body or a whole frame), or null when unreadable. */
export function storedEventTime(stored: Uint8Array): string | null {
  const body = isStoredFrame(stored)
    ? decodeFrame(stored).body
    : decodeCbor(stored, { maxSize: 16 * 1024 * 1024 }) as Record<string, unknown>;
  return typeof body.time === "string" ? body.time : null;
}

/** The highest stored seq (0 when none). */
export async function readHeadSeq(kv: Deno.Kv): Promise<number> {
  return (await kv.get<number>(seqHeadKey())).value ?? 0;
}

/** The seq of the oldest kept event, or null when no event is stored. */
export async function readOldestSeq(kv: Deno.Kv): Promise<number | null> {
  for await (const entry of kv.list({ prefix: seqEventPrefix() }, { limit: 1 })) {
    return entry.key[1] as number;
  }
  return null;
}

/** Reads at most `limit` stored event bodies with seq greater than `after`, in seq order. */
export async function readEventBodies(
  kv: Deno.Kv,
  after: number,
  limit: number,
): Promise<EventBody[]> {
  return (await readEventBatch(kv, after, { limit })).events;
}

/** Stored events after a seq, and whether they run to the end of the log. */
export interface EventBatch {
  events: EventBody[];
  /** True when no event after the last one was stored when it was read. */
  end: boolean;
}

/**
 * Reads the stored events with seq greater than `after`, in seq order: at most `limit` of them,
 * and no more once their bodies reach `maxBytes` (at least one event when any is stored).
 */
export async function readEventBatch(
  kv: Deno.Kv,
  after: number,
  opts: { limit: number; maxBytes?: number },
): Promise<EventBatch> {
  const maxBytes = opts.maxBytes ?? Infinity;
  const out: EventBody[] = [];
  let bytes = 0;
  let seq = -1;
  let parts: Uint8Array[] = [];
  const flush = () => {
    if (seq < 0) return;
    const body = concatBytes(parts);
    bytes += body.length;
    out.push({ seq, body });
  };
  const iter = kv.list<Uint8Array>({
    start: seqEventChunkKey(after + 1, 0),
    end: [...seqEventPrefix(), Number.MAX_SAFE_INTEGER],
  }, {
    // A byte-bounded read fetches few entries at a time: each may be a large chunk.
    batchSize: Math.min(500, opts.limit + 1, Number.isFinite(maxBytes) ? 32 : 500),
  });
  for await (const entry of iter) {
    const entrySeq = entry.key[1] as number;
    if (entrySeq !== seq) {
      flush();
      if (out.length >= opts.limit || bytes >= maxBytes) return { events: out, end: false };
      seq = entrySeq;
      parts = [];
    }
    parts.push(entry.value);
  }
  flush();
  return { events: out, end: true };
}
