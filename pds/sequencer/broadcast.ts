/**
 * The live broadcast of committed events: one {@link Broadcaster} per KV store in a process.
 * Each event's frame is built once (header bytes + the stored body bytes) and the same bytes go
 * to every live subscriber, in seq order and without gaps.
 *
 * Sources: the in-process sequencer notifies synchronously after each commit (the fast path,
 * broadcast on the next event-loop turn);
 * commits written by another process on the same KV are found by polling the seq head key every
 * `pollMs` (a local KV file's `kv.watch` does not see other processes' writes) and read from the
 * event log. An in-process event that arrives ahead of a missing seq waits until the missing ones
 * have been read, so subscribers always see consecutive seqs.
 *
 * @module
 */

import type { Logger } from "../../shared/log.ts";
import { commitFrame, isStoredFrame, readEventBodies, readHeadSeq } from "./event_log.ts";
import type { FrameCache } from "./frame_cache.ts";
import type { SequencedCommit, Sequencer } from "./sequencer.ts";

/** Receives live frames in seq order. Must not throw and must not block. */
export interface LiveSubscriber {
  onFrame(seq: number, frame: Uint8Array): void;
}

/** Options of {@link Broadcaster}. */
export interface BroadcasterOptions {
  log: Logger;
  /** The sequencer of the store's in-process commits. */
  sequencer: Sequencer;
  /** Interval of the seq head poll that finds other processes' commits (default 25 ms). */
  pollMs?: number;
  /** Where each built frame is also put, for stored replay to share. */
  frames?: FrameCache;
  /**
   * Called with every event stored as a whole frame (`#account`, `#identity`) as it is broadcast,
   * whether this process or another wrote it, subscribers or not.
   */
  onStoredFrame?: (frame: Uint8Array) => void;
}

const DEFAULT_POLL_MS = 25;
const CATCH_UP_BATCH = 256;

/** Live broadcaster of one KV store; {@link start} it, then {@link close} it. */
export class Broadcaster {
  readonly #kv: Deno.Kv;
  readonly #log: Logger;
  readonly #sequencer: Sequencer;
  readonly #pollMs: number;
  readonly #frames: FrameCache | null;
  readonly #onStoredFrame: ((frame: Uint8Array) => void) | null;
  readonly #subscribers = new Set<LiveSubscriber>();
  /** In-process events not yet broadcast (ahead of a seq another process wrote). */
  readonly #pending = new Map<number, Uint8Array>();
  /** Highest seq broadcast; -1 until started. */
  #lastSeq = -1;
  /** Highest seq known to be committed (from the head poll or in-process events). */
  #knownHead = 0;
  #framesEncoded = 0;
  #catchingUp = false;
  #polling = false;
  #timer: ReturnType<typeof setInterval> | null = null;
  #flushTimer: ReturnType<typeof setTimeout> | null = null;
  #unsubscribe: (() => void) | null = null;
  #closed = false;

  constructor(kv: Deno.Kv, opts: BroadcasterOptions) {
    this.#kv = kv;
    this.#log = opts.log;
    this.#sequencer = opts.sequencer;
    this.#pollMs = opts.pollMs ?? DEFAULT_POLL_MS;
    this.#frames = opts.frames ?? null;
    this.#onStoredFrame = opts.onStoredFrame ?? null;
  }

  /** Starts listening: in-process commits first, then the current head, then the poll. */
  async start(): Promise<void> {
    this.#unsubscribe = this.#sequencer.onCommit((c) => this.#onLocalCommit(c));
    const head = await readHeadSeq(this.#kv);
    if (this.#closed) return;
    this.#lastSeq = head;
    this.#knownHead = Math.max(this.#knownHead, head);
    this.#catchUp();
    this.#timer = setInterval(() => this.#poll(), this.#pollMs);
  }

  /** Highest seq broadcast so far (-1 before {@link start} has read the head). */
  get lastSeq(): number {
    return this.#lastSeq;
  }

  /**
   * Number of frames built so far: one per event broadcast to at least one subscriber, whatever
   * the subscriber count (none is built while nobody listens).
   */
  get framesEncoded(): number {
    return this.#framesEncoded;
  }

  /** Number of live subscribers. */
  get subscriberCount(): number {
    return this.#subscribers.size;
  }

  /** Adds a live subscriber; returns the function that removes it. */
  subscribe(subscriber: LiveSubscriber): () => void {
    this.#subscribers.add(subscriber);
    return () => this.#subscribers.delete(subscriber);
  }

  /** Stops the poll and the in-process listener. Subscribers are the caller's to close. */
  close(): void {
    this.#closed = true;
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#timer = null;
    if (this.#flushTimer !== null) clearTimeout(this.#flushTimer);
    this.#flushTimer = null;
    this.#unsubscribe?.();
    this.#unsubscribe = null;
    this.#pending.clear();
  }

  #onLocalCommit(c: SequencedCommit): void {
    if (this.#closed) return;
    if (c.seq > this.#knownHead) this.#knownHead = c.seq;
    if (this.#lastSeq >= 0 && c.seq <= this.#lastSeq) return;
    this.#pending.set(c.seq, c.body);
    // Broadcast on the next turn of the event loop, so that the writer's HTTP answer is not
    // held behind a thousand socket sends; commits of the same turn go out together.
    this.#flushTimer ??= setTimeout(() => {
      this.#flushTimer = null;
      if (this.#closed || this.#lastSeq < 0 || this.#catchingUp) return;
      this.#drainPending();
      if (this.#pending.size > 0 || this.#knownHead > this.#lastSeq) this.#catchUp();
    }, 0);
  }

  async #poll(): Promise<void> {
    if (this.#polling || this.#closed) return;
    this.#polling = true;
    try {
      const head = await readHeadSeq(this.#kv);
      if (head > this.#knownHead) this.#knownHead = head;
      if (head > this.#lastSeq) this.#catchUp();
    } catch (err) {
      if (!this.#closed) this.#log.warn("event stream head poll failed", { error: err });
    } finally {
      this.#polling = false;
    }
  }

  /** Broadcasts the in-process events that are next in line. */
  #drainPending(): void {
    for (;;) {
      const body = this.#pending.get(this.#lastSeq + 1);
      if (body === undefined) break;
      this.#pending.delete(this.#lastSeq + 1);
      this.#emit(this.#lastSeq + 1, body);
    }
    if (this.#pending.size > 0) {
      for (const seq of this.#pending.keys()) if (seq <= this.#lastSeq) this.#pending.delete(seq);
    }
  }

  /** Reads the events between the last broadcast seq and the known head from the event log. */
  #catchUp(): void {
    if (this.#catchingUp || this.#closed || this.#lastSeq < 0) return;
    this.#catchingUp = true;
    (async () => {
      try {
        for (;;) {
          this.#drainPending();
          if (this.#closed || this.#lastSeq >= this.#knownHead) break;
          const events = await readEventBodies(this.#kv, this.#lastSeq, CATCH_UP_BATCH);
          if (this.#closed) break;
          for (const e of events) {
            if (e.seq > this.#lastSeq) this.#emit(e.seq, e.body);
          }
          this.#pending.delete(this.#lastSeq);
          if (events.length === 0) {
            // Not visible yet: the next poll (or in-process commit) tries again.
            this.#drainPending();
            break;
          }
        }
      } catch (err) {
        if (!this.#closed) this.#log.warn("event stream catch-up read failed", { error: err });
      } finally {
        this.#catchingUp = false;
      }
    })();
  }

  #emit(seq: number, body: Uint8Array): void {
    this.#lastSeq = seq;
    if (this.#onStoredFrame !== null && isStoredFrame(body)) {
      try {
        this.#onStoredFrame(body);
      } catch (err) {
        this.#log.warn("stored frame listener failed", { error: err });
      }
    }
    if (this.#subscribers.size === 0) return; // nobody listening: no frame to build
    const frame = commitFrame(body);
    this.#framesEncoded++;
    this.#frames?.put(seq, frame);
    for (const subscriber of this.#subscribers) {
      try {
        subscriber.onFrame(seq, frame);
      } catch (err) {
        this.#log.warn("event stream subscriber failed", { error: err });
      }
    }
  }
}
