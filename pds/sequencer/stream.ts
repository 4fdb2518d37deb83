/**
 * `com.atproto.sync.subscribeRepos` connections (spec 6.1 rules 3-5; reference atproto.md 6.3).
 *
 * A connection subscribes to the live broadcast before it reads stored events, replays the
 * events after its cursor, then continues live, dropping live frames whose seq it has already
 * sent: a race yields a filterable duplicate, never a gap. Without a cursor it is live only. A
 * cursor beyond the head gets the error frame `FutureCursor` and the socket is closed; a cursor
 * older than the oldest kept event gets `#info OutdatedCursor`, then the replay from the oldest.
 *
 * Slow consumers: live frames go straight to the socket while its unsent bytes
 * (`bufferedAmount`) stay under `maxBufferedBytes`; beyond that they wait in a per-connection
 * queue of at most `maxQueuedFrames`. When that overflows, the queue is dropped, the consumer
 * gets `#info OutdatedCursor` and is served from the stored events at its own pace until it has
 * caught up with the broadcast, then live again. Nobody is disconnected for being slow.
 *
 * @module
 */

import { encodeFrame } from "../../shared/frame.ts";
import type { Logger } from "../../shared/log.ts";
import type { Broadcaster, LiveSubscriber } from "./broadcast.ts";
import { commitFrame, readEventBodies, readHeadSeq, readOldestSeq } from "./event_log.ts";

/** Per-connection bounds of the live path. */
export interface StreamLimits {
  /** Unsent socket bytes above which live frames are queued instead of sent (default 4 MiB). */
  maxBufferedBytes: number;
  /** Queued live frames beyond which a consumer is switched to stored replay (default 500). */
  maxQueuedFrames: number;
  /** Events read per stored-replay batch (default 200). */
  replayBatch: number;
  /** Open connections beyond which new ones are refused (default 2,000). */
  maxConnections: number;
  /** Open connections per client address beyond which its new ones are refused (default 100). */
  maxConnectionsPerAddress: number;
}

/** Default {@link StreamLimits}. */
export const DEFAULT_STREAM_LIMITS: Readonly<StreamLimits> = Object.freeze({
  maxBufferedBytes: 4 * 1024 * 1024,
  maxQueuedFrames: 500,
  replayBatch: 200,
  maxConnections: 2000,
  maxConnectionsPerAddress: 100,
});

/** `#info` name for a consumer whose position is gone from the stream (reference 6.2). */
export const OUTDATED_CURSOR = "OutdatedCursor";
/** Error name for a cursor beyond the latest seq (reference 6.2). */
export const FUTURE_CURSOR = "FutureCursor";

/** Close reason for a subscriber past its client-message budget. */
export const CLIENT_MESSAGE = "subscribeRepos takes no client messages";
/** Largest client message ignored (a text keep-alive "ping" is a few bytes). */
export const MAX_CLIENT_MESSAGE_BYTES = 1024;
/** Client messages ignored per {@link CLIENT_MESSAGE_WINDOW_MS}; one more closes. */
export const MAX_CLIENT_MESSAGES = 30;
const CLIENT_MESSAGE_WINDOW_MS = 60_000;

/** WebSocket close code of an error frame (reference: 1008 policy violation). */
const CLOSE_POLICY = 1008;
const CLOSE_GOING_AWAY = 1001;
const CLOSE_INTERNAL = 1011;
const DRAIN_RETRY_MS = 5;
const MAX_WAIT_MS = 50;

/** The `#info OutdatedCursor` frame. */
export function outdatedCursorFrame(message: string): Uint8Array {
  return encodeFrame({ op: 1, t: "#info" }, { name: OUTDATED_CURSOR, message });
}

/** Serves subscribeRepos connections of one KV store; holds every open connection. */
export class StreamHub {
  readonly #kv: Deno.Kv;
  readonly #broadcaster: Broadcaster;
  readonly #log: Logger;
  readonly #connections = new Set<Subscription>();
  readonly #perAddress = new Map<string, number>();
  #limits: StreamLimits;

  constructor(opts: {
    kv: Deno.Kv;
    broadcaster: Broadcaster;
    log: Logger;
    limits?: Partial<StreamLimits>;
  }) {
    this.#kv = opts.kv;
    this.#broadcaster = opts.broadcaster;
    this.#log = opts.log;
    this.#limits = { ...DEFAULT_STREAM_LIMITS, ...opts.limits };
  }

  /** The bounds applied to connections opened from now on. */
  get limits(): Readonly<StreamLimits> {
    return this.#limits;
  }

  /** Changes the bounds for connections opened from now on (tests use small ones). */
  setLimits(limits: Partial<StreamLimits>): void {
    this.#limits = { ...this.#limits, ...limits };
  }

  /** Number of open connections. */
  get connectionCount(): number {
    return this.#connections.size;
  }

  /**
   * Which connection limit a new connection from `address` would exceed, or null when it may be
   * opened. Checked before the upgrade; {@link serve} then counts it.
   */
  admission(address: string): "total" | "address" | null {
    if (this.#connections.size >= this.#limits.maxConnections) return "total";
    const open = this.#perAddress.get(address) ?? 0;
    return open >= this.#limits.maxConnectionsPerAddress ? "address" : null;
  }

  /** Serves an upgraded socket of a client at `address`; `cursor` null means live only. */
  serve(socket: WebSocket, cursor: number | null, address = "unknown"): void {
    this.#perAddress.set(address, (this.#perAddress.get(address) ?? 0) + 1);
    const sub = new Subscription({
      socket,
      cursor,
      kv: this.#kv,
      broadcaster: this.#broadcaster,
      log: this.#log,
      limits: this.#limits,
      onClosed: () => {
        if (!this.#connections.delete(sub)) return;
        const left = (this.#perAddress.get(address) ?? 1) - 1;
        if (left > 0) this.#perAddress.set(address, left);
        else this.#perAddress.delete(address);
      },
    });
    this.#connections.add(sub);
  }

  /** Closes every connection (1001 going away) and waits briefly for them to finish. */
  async close(): Promise<void> {
    const all = [...this.#connections];
    await Promise.all(all.map((sub) => sub.shutdown()));
  }
}

interface QueuedFrame {
  seq: number;
  frame: Uint8Array;
}

type Mode = "starting" | "replay" | "live" | "closed";

/** One subscribeRepos connection. */
class Subscription implements LiveSubscriber {
  readonly #socket: WebSocket;
  readonly #kv: Deno.Kv;
  readonly #broadcaster: Broadcaster;
  readonly #log: Logger;
  readonly #limits: StreamLimits;
  readonly #onClosed: () => void;
  readonly #closedPromise: Promise<void>;
  #resolveClosed!: () => void;
  #mode: Mode = "starting";
  /** Highest seq sent to this consumer. */
  #lastSent = 0;
  /** Highest seq received from the broadcast. */
  #maxSeen = 0;
  #queue: QueuedFrame[] = [];
  #messageWindowStart = 0;
  #messagesInWindow = 0;
  #unsubscribe: (() => void) | null = null;
  #drainTimer: ReturnType<typeof setTimeout> | null = null;
  #sleepTimer: ReturnType<typeof setTimeout> | null = null;
  #wake: (() => void) | null = null;

  constructor(opts: {
    socket: WebSocket;
    cursor: number | null;
    kv: Deno.Kv;
    broadcaster: Broadcaster;
    log: Logger;
    limits: StreamLimits;
    onClosed: () => void;
  }) {
    this.#socket = opts.socket;
    this.#kv = opts.kv;
    this.#broadcaster = opts.broadcaster;
    this.#log = opts.log;
    this.#limits = opts.limits;
    this.#onClosed = opts.onClosed;
    this.#closedPromise = new Promise((resolve) => this.#resolveClosed = resolve);
    const socket = opts.socket;
    socket.binaryType = "arraybuffer";
    socket.onopen = () => this.#start(opts.cursor);
    socket.onclose = () => this.#finish();
    socket.onerror = () => {};
    // Client messages are ignored (reference 6.1): browsers cannot send ping control frames, so
    // some clients keep the connection alive with small text messages. Deno reads each message
    // whole before this handler runs and cannot bound its size, so a client past a small budget
    // (a message over 1 KiB, or more than 30 a minute) is cut off rather than allowed to make
    // the server buffer message after message.
    socket.onmessage = (event: MessageEvent) => this.#clientMessage(event.data);
  }

  /** Live frame from the broadcast. */
  onFrame(seq: number, frame: Uint8Array): void {
    if (this.#isClosed()) return;
    if (seq > this.#maxSeen) this.#maxSeen = seq;
    if (seq <= this.#lastSent) return;
    if (
      this.#mode === "live" && this.#queue.length === 0 &&
      this.#socket.bufferedAmount <= this.#limits.maxBufferedBytes
    ) {
      this.#send(frame);
      this.#lastSent = seq;
      return;
    }
    this.#queue.push({ seq, frame });
    if (this.#queue.length > this.#limits.maxQueuedFrames) {
      // Too far behind the broadcast: drop the queue and serve from the stored events instead.
      this.#queue = [];
      if (this.#mode === "live") {
        this.#send(outdatedCursorFrame(
          `Consumer fell behind the live stream after seq ${this.#lastSent}: replaying stored events`,
        ));
        this.#replay(false);
      }
      return;
    }
    if (this.#mode === "live") this.#scheduleDrain();
  }

  /** Closes the socket (going away) and waits until it has closed. */
  async shutdown(): Promise<void> {
    if (this.#isClosed()) return;
    try {
      this.#socket.close(CLOSE_GOING_AWAY, "Server shutting down");
    } catch {
      // Not open yet or already closing.
    }
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      this.#closedPromise,
      new Promise<void>((resolve) => timer = setTimeout(resolve, 1000)),
    ]);
    clearTimeout(timer);
    this.#finish();
  }

  async #start(cursor: number | null): Promise<void> {
    if (this.#isClosed()) return;
    // Rule 3: subscribe to the live broadcast before reading anything stored.
    this.#unsubscribe = this.#broadcaster.subscribe(this);
    if (cursor === null) {
      // Live from the current position: the stored head, which is ahead of this process's
      // broadcaster when another process committed and the poll has not picked it up yet.
      try {
        const head = await readHeadSeq(this.#kv);
        if (this.#isClosed()) return;
        this.#lastSent = Math.max(0, this.#broadcaster.lastSeq, head);
      } catch (err) {
        this.#fail(err);
        return;
      }
      this.#mode = "live";
      this.#drain();
      return;
    }
    try {
      const head = await readHeadSeq(this.#kv);
      if (this.#isClosed()) return;
      if (cursor > head) {
        this.#send(encodeFrame({ op: -1 }, {
          error: FUTURE_CURSOR,
          message: `Cursor ${cursor} is beyond the latest seq ${head}`,
        }));
        this.#socket.close(CLOSE_POLICY, FUTURE_CURSOR);
        this.#finish();
        return;
      }
      const oldest = await readOldestSeq(this.#kv);
      if (this.#isClosed()) return;
      const outdated = cursor > 0 && (oldest === null ? cursor < head : cursor < oldest - 1);
      if (outdated) {
        this.#send(outdatedCursorFrame(
          `Cursor ${cursor} is older than the oldest kept event ${
            oldest ?? head + 1
          }: replaying from there`,
        ));
      }
      this.#lastSent = cursor;
      this.#replay(outdated);
    } catch (err) {
      this.#fail(err);
    }
  }

  /**
   * Stored replay after `#lastSent` at the consumer's pace, until it has caught up with the
   * broadcast; then live. `reported` is true when the consumer was already told about a gap.
   */
  async #replay(reported: boolean): Promise<void> {
    this.#mode = "replay";
    this.#cancelDrain();
    const batchSize = this.#limits.replayBatch;
    try {
      for (;;) {
        await this.#writable();
        if (this.#isClosed()) return;
        const from = this.#lastSent;
        const batch = await readEventBodies(this.#kv, from, batchSize);
        if (this.#isClosed()) return;
        if (batch.length > 0 && batch[0].seq > from + 1 && from > 0 && !reported) {
          // Events after the consumer's position were pruned while it was away.
          this.#send(outdatedCursorFrame(
            `Events after seq ${from} are no longer kept: continuing from seq ${batch[0].seq}`,
          ));
        }
        reported = false;
        for (const e of batch) {
          if (e.seq <= this.#lastSent) continue;
          this.#send(commitFrame(e.body));
          this.#lastSent = e.seq;
        }
        this.#trimQueue();
        if (batch.length < batchSize && this.#caughtUp()) {
          this.#mode = "live";
          this.#drain();
          return;
        }
        if (batch.length === 0) await this.#sleep(DRAIN_RETRY_MS);
      }
    } catch (err) {
      this.#fail(err);
    }
  }

  /** True when every broadcast frame after `#lastSent` is still in the queue. */
  #caughtUp(): boolean {
    return this.#queue.length === 0
      ? this.#lastSent >= this.#maxSeen
      : this.#queue[0].seq <= this.#lastSent + 1;
  }

  #trimQueue(): void {
    let i = 0;
    while (i < this.#queue.length && this.#queue[i].seq <= this.#lastSent) i++;
    if (i > 0) this.#queue = this.#queue.slice(i);
  }

  /** Live mode: sends queued frames while the socket takes them. */
  #drain(): void {
    this.#drainTimer = null;
    if (this.#mode !== "live") return;
    const limit = this.#limits.maxBufferedBytes;
    let i = 0;
    while (i < this.#queue.length && this.#socket.bufferedAmount <= limit) {
      const { seq, frame } = this.#queue[i++];
      if (seq <= this.#lastSent) continue;
      this.#send(frame);
      this.#lastSent = seq;
    }
    if (i > 0) this.#queue = this.#queue.slice(i);
    if (this.#queue.length > 0) this.#scheduleDrain();
  }

  #scheduleDrain(): void {
    if (this.#drainTimer === null) {
      this.#drainTimer = setTimeout(() => this.#drain(), DRAIN_RETRY_MS);
    }
  }

  #cancelDrain(): void {
    if (this.#drainTimer !== null) clearTimeout(this.#drainTimer);
    this.#drainTimer = null;
  }

  /** Waits until the socket's unsent bytes are under the bound (or the connection closed). */
  async #writable(): Promise<void> {
    let wait = 2;
    while (
      this.#mode !== "closed" && this.#socket.bufferedAmount > this.#limits.maxBufferedBytes
    ) {
      await this.#sleep(wait);
      wait = Math.min(MAX_WAIT_MS, wait * 2);
    }
  }

  #sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      this.#wake = resolve;
      this.#sleepTimer = setTimeout(() => {
        this.#sleepTimer = null;
        this.#wake = null;
        resolve();
      }, ms);
    });
  }

  /** A method, so that TypeScript does not narrow `#mode` across awaits. */
  #isClosed(): boolean {
    return this.#mode === "closed";
  }

  #send(frame: Uint8Array): void {
    if (this.#socket.readyState === WebSocket.OPEN) this.#socket.send(frame);
  }

  #clientMessage(data: unknown): void {
    if (this.#isClosed()) return;
    const size = typeof data === "string"
      ? data.length // UTF-16 code units: close enough to bytes for a budget
      : data instanceof ArrayBuffer
      ? data.byteLength
      : Infinity;
    const now = performance.now();
    if (now - this.#messageWindowStart >= CLIENT_MESSAGE_WINDOW_MS) {
      this.#messageWindowStart = now;
      this.#messagesInWindow = 0;
    }
    this.#messagesInWindow++;
    if (size <= MAX_CLIENT_MESSAGE_BYTES && this.#messagesInWindow <= MAX_CLIENT_MESSAGES) return;
    this.#log.warn("subscriber sent messages past its budget; closing its connection", {
      bytes: Number.isFinite(size) ? size : null,
      messagesThisMinute: this.#messagesInWindow,
    });
    try {
      this.#socket.close(CLOSE_POLICY, CLIENT_MESSAGE);
    } catch {
      // Already closing.
    }
  }

  #fail(err: unknown): void {
    if (this.#isClosed()) return;
    this.#log.error("event stream connection failed", { error: err });
    try {
      this.#socket.close(CLOSE_INTERNAL, "Internal error");
    } catch {
      // Already closing.
    }
    this.#finish();
  }

  #finish(): void {
    if (this.#mode !== "closed") {
      this.#mode = "closed";
      this.#unsubscribe?.();
      this.#unsubscribe = null;
      this.#queue = [];
      this.#cancelDrain();
      if (this.#sleepTimer !== null) clearTimeout(this.#sleepTimer);
      this.#sleepTimer = null;
      this.#wake?.();
      this.#wake = null;
      this.#onClosed();
    }
    if (this.#socket.readyState === WebSocket.CLOSED) this.#resolveClosed();
  }
}
