/**
 * The encoded `#commit` frames of recent events, shared by every subscribeRepos connection of a
 * process: the live broadcast puts each frame it builds here, and stored replay takes frames from
 * here, reading (and encoding) from the event log only what is missing. Replays of the same
 * events by many subscribers therefore hold one copy of each frame, built once; concurrent reads
 * of the same position share one read of the log. Bounded in bytes; the oldest frames put in go
 * first.
 *
 * @module
 */

import { commitFrame, readEventBatch } from "./event_log.ts";

/** One event's frame. */
export interface SeqFrame {
  seq: number;
  frame: Uint8Array;
}

/** Frames after a seq, and whether they run to the end of the stored log. */
export interface FrameBatch {
  frames: SeqFrame[];
  /** True when the log held no event after the last frame when it was read. */
  end: boolean;
}

/** Smallest read of the event log, in body bytes (when that many are stored). */
const MIN_LOAD_BYTES = 1024 * 1024;

/** Default bound of a {@link FrameCache}: 16 MiB. */
export const DEFAULT_FRAME_CACHE_BYTES = 16 * 1024 * 1024;

/** Frames by seq, at most `maxBytes` of them. */
export class FrameCache {
  readonly #kv: Deno.Kv;
  readonly #maxBytes: number;
  readonly #frames = new Map<number, Uint8Array>();
  readonly #loading = new Map<number, Promise<FrameBatch>>();
  #bytes = 0;
  #built = 0;

  constructor(kv: Deno.Kv, maxBytes = DEFAULT_FRAME_CACHE_BYTES) {
    this.#kv = kv;
    this.#maxBytes = maxBytes;
  }

  /** Frames built from the event log so far (live frames put in are not counted). */
  get framesBuilt(): number {
    return this.#built;
  }

  /** Bytes of the frames held. */
  get bytes(): number {
    return this.#bytes;
  }

  /** Keeps the frame of `seq` (an event's frame never changes, so a known seq is kept as is). */
  put(seq: number, frame: Uint8Array): void {
    if (this.#frames.has(seq) || frame.length > this.#maxBytes) return;
    this.#frames.set(seq, frame);
    this.#bytes += frame.length;
    for (const [old, bytes] of this.#frames) {
      if (this.#bytes <= this.#maxBytes) break;
      this.#frames.delete(old);
      this.#bytes -= bytes.length;
    }
  }

  /**
   * The frames of the events after `after`, in seq order: at most `limit` of them and at most
   * `maxBytes` in all, but at least one when any event is stored after `after`.
   */
  async read(after: number, limit: number, maxBytes: number): Promise<FrameBatch> {
    const frames: SeqFrame[] = [];
    let bytes = 0;
    for (let seq = after + 1; frames.length < limit; seq++) {
      const frame = this.#frames.get(seq);
      if (frame === undefined || (frames.length > 0 && bytes + frame.length > maxBytes)) break;
      frames.push({ seq, frame });
      bytes += frame.length;
    }
    if (frames.length > 0) return { frames, end: false };
    let loading = this.#loading.get(after);
    if (loading === undefined) {
      // Loads a useful amount whatever the caller has room for: the rest waits here for it
      // (and for the subscribers behind it).
      loading = this.#load(after, limit, Math.max(maxBytes, MIN_LOAD_BYTES));
      this.#loading.set(after, loading);
      loading.finally(() => this.#loading.delete(after)).catch(() => {});
    }
    return take(await loading, limit, maxBytes);
  }

  async #load(after: number, limit: number, maxBytes: number): Promise<FrameBatch> {
    const { events, end } = await readEventBatch(this.#kv, after, { limit, maxBytes });
    const frames = events.map(({ seq, body }) => {
      const known = this.#frames.get(seq);
      if (known !== undefined) return { seq, frame: known };
      const frame = commitFrame(body);
      this.#built++;
      this.put(seq, frame);
      return { seq, frame };
    });
    return { frames, end };
  }
}

/** The first frames of `batch` within `limit` and `maxBytes` (at least one). */
function take(batch: FrameBatch, limit: number, maxBytes: number): FrameBatch {
  let n = 0;
  let bytes = 0;
  while (n < batch.frames.length && n < limit) {
    const size = batch.frames[n].frame.length;
    if (n > 0 && bytes + size > maxBytes) break;
    bytes += size;
    n++;
  }
  return n === batch.frames.length ? batch : { frames: batch.frames.slice(0, n), end: false };
}
