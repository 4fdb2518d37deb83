/**
 * `com.atproto.sync.subscribeRepos` connections (spec 6.1 rules 3-5; docs/protocol.md 6.3).
 *
 * A connection subscribes to the live broadcast before it reads stored events, replays the
 * events after its cursor, then continues live, dropping live frames whose seq it has already
 * sent: a race yields a filterable duplicate, never a gap. Without a cursor it is live only. A
 * cursor beyond the head gets the error frame `FutureCursor` and the socket is closed; a cursor
 * older than the oldest kept event gets `#info OutdatedCursor`, then the replay from the oldest.
 *
 * Slow consumers: a frame goes to the socket only while its unsent bytes (`bufferedAmount`) stay
 * within `maxBufferedBytes` (checked before each frame, live or replayed); live frames beyond
 * that wait in a per-connection queue of at most `maxQueuedFrames` and `maxQueuedBytes`. When that
 * overflows, the queue is dropped, the consumer gets `#info OutdatedCursor` and is served from the
 * stored events at its own pace until it has caught up with the broadcast, then live again.
 * Replay reads no more than the socket has room for, and takes its frames from the process's
 * {@link FrameCache}, so subscribers replaying the same events share one copy of each frame.
 * What one connection holds is thus bounded in bytes: `maxBufferedBytes + maxQueuedBytes` (or one
 * frame, when a single frame is larger). Nobody is disconnected for being slow; a connection whose
 * socket has accepted no byte for `stallTimeoutMs` while it had bytes to send is closed: that
 * consumer reads nothing (or is gone) and would hold its bytes forever.
 *
 * @module
 */

import { encodeFrame } from "../../shared/frame.ts";
import type { Logger } from "../../shared/log.ts";
import type { Broadcaster, LiveSubscriber } from "./broadcast.ts";
import { readHeadSeq, readOldestSeq } from "./event_log.ts";
import { FrameCache } from "./frame_cache.ts";

/** Per-connection bounds of the live path. */
export interface StreamLimits {
  /**
   * Unsent socket bytes a frame may bring the socket to; beyond, live frames are queued and
   * replay waits (default 256 KiB). A larger frame goes alone to an empty socket.
   */
  maxBufferedBytes: number;
  /** Queued live frames beyond which a consumer is switched to stored replay (default 500). */
  maxQueuedFrames: number;
  /** Queued live bytes beyond which a consumer is switched to stored replay (default 1 MiB). */
  maxQueuedBytes: number;
  /**
   * Milliseconds a socket with unsent bytes may accept none before the connection is closed
   * (default 60 s): a consumer that reads slowly is served, one that reads nothing is dead.
   */
  stallTimeoutMs: number;
  /** Events read per stored-replay batch (default 200). */
  replayBatch: number;
  /** Open connections beyond which new ones are refused (default 2,000). */
  maxConnections: number;
  /**
   * Open connections per client beyond which its new ones are refused (default 100); the
   * caller names the client (an IPv6 client by its /64).
   */
  maxConnectionsPerAddress: number;
  /**
   * Connections beyond `maxConnections` kept for subscribers presenting the ingest secret (the
   * index's consumer), so that no client can lock it out by filling the public ones (default 4).
   */
  reservedConnections: number;
}

/** Default {@link StreamLimits}. */
export const DEFAULT_STREAM_LIMITS: Readonly<StreamLimits> = Object.freeze({
  maxBufferedBytes: 64 * 1024,
  maxQueuedFrames: 500,
  maxQueuedBytes: 1024 * 1024,
  stallTimeoutMs: 60_000,
  replayBatch: 200,
  maxConnections: 2000,
  maxConnectionsPerAddress: 100,
  reservedConnections: 4,
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
/** Close reason of a connection whose socket accepted nothing for `stallTimeoutMs`. */
export const STALLED = "Consumer read nothing";
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
  readonly #reserved = new Set<Subscription>();
  readonly #frames: FrameCache;
  readonly #stats = { peakHeldBytes: 0 };
  #limits: StreamLimits;
  #stallTimer: ReturnType<typeof setInterval> | null = null;

  constructor(opts: {
    kv: Deno.Kv;
    broadcaster: Broadcaster;
    log: Logger;
    limits?: Partial<StreamLimits>;
    /** Frames shared with the broadcaster (default: a cache of this hub's own). */
    frames?: FrameCache;
  }) {
    this.#kv = opts.kv;
    this.#broadcaster = opts.broadcaster;
    this.#log = opts.log;
    this.#limits = { ...DEFAULT_STREAM_LIMITS, ...opts.limits };
    this.#frames = opts.frames ?? new FrameCache(opts.kv);
  }

  /**
   * The most bytes one connection has held at a time (its socket's unsent bytes, its queued live
   * frames and its replay batch not yet sent), over every connection so far.
   */
  get peakHeldBytes(): number {
    return this.#stats.peakHeldBytes;
  }

  /** Frames built from stored events for replay so far (shared by every connection). */
  get replayFramesBuilt(): number {
    return this.#frames.framesBuilt;
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
   * Which connection limit a new connection from `address` (the client's key: an IPv6 client is
   * its /64) would exceed, or null when it may be opened. `reserved`: the client presented the
   * ingest secret, and may take a reserved slot. Checked before the upgrade; {@link serve} then
   * counts it.
   */
  admission(address: string, reserved = false): "total" | "address" | null {
    if (reserved && this.#reserved.size < this.#limits.reservedConnections) return null;
    if (this.#connections.size - this.#reserved.size >= this.#limits.maxConnections) {
      return "total";
    }
    const open = this.#perAddress.get(address) ?? 0;
    return open >= this.#limits.maxConnectionsPerAddress ? "address" : null;
  }

  /**
   * Serves an upgraded socket of a client at `address`; `cursor` null means live only.
   * `reserved` as in {@link admission}: it takes a reserved slot while one is free.
   */
  serve(socket: WebSocket, cursor: number | null, address = "unknown", reserved = false): void {
    const inReserve = reserved && this.#reserved.size < this.#limits.reservedConnections;
    if (!inReserve) this.#perAddress.set(address, (this.#perAddress.get(address) ?? 0) + 1);
    const sub: Subscription = new Subscription({
      socket,
      cursor,
      frames: this.#frames,
      kv: this.#kv,
      broadcaster: this.#broadcaster,
      log: this.#log,
      limits: this.#limits,
      stats: this.#stats,
      onClosed: () => {
        if (!this.#connections.delete(sub)) return;
        if (this.#reserved.delete(sub)) return;
        const left = (this.#perAddress.get(address) ?? 1) - 1;
        if (left > 0) this.#perAddress.set(address, left);
        else this.#perAddress.delete(address);
      },
    });
    this.#connections.add(sub);
    if (inReserve) this.#reserved.add(sub);
    this.#watchStalls();
  }

  /** Closes every connection (1001 going away) and waits briefly for them to finish. */
  async close(): Promise<void> {
    this.#stopWatch();
    const all = [...this.#connections];
    await Promise.all(all.map((sub) => sub.shutdown()));
  }

  /** Checks the open connections for stalled sockets a few times per stall timeout. */
  #watchStalls(): void {
    if (this.#stallTimer !== null) return;
    const every = Math.min(1000, Math.max(20, this.#limits.stallTimeoutMs / 5));
    this.#stallTimer = setInterval(() => {
      if (this.#connections.size === 0) return this.#stopWatch();
      const now = performance.now();
      for (const sub of this.#connections) sub.checkStall(now);
    }, every);
  }

  #stopWatch(): void {
    if (this.#stallTimer !== null) clearInterval(this.#stallTimer);
    this.#stallTimer = null;
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
  readonly #frames: FrameCache;
  readonly #kv: Deno.Kv;
  readonly #broadcaster: Broadcaster;
  readonly #log: Logger;
  readonly #limits: StreamLimits;
  readonly #stats: { peakHeldBytes: number };
  readonly #onClosed: () => void;
  readonly #closedPromise: Promise<void>;
  #resolveClosed!: () => void;
  #mode: Mode = "starting";
  /** Highest seq sent to this consumer. */
  #lastSent = 0;
  /** Highest seq received from the broadcast. */
  #maxSeen = 0;
  #queue: QueuedFrame[] = [];
  #queuedBytes = 0;
  /** Bytes of the replay batch in hand, not sent yet. */
  #inHandBytes = 0;
  /** Bytes handed to the socket so far; less `bufferedAmount`, the bytes it has accepted. */
  #sentBytes = 0;
  /** `bufferedAmount` at the last room check, plus the bytes sent since. */
  #buffered = 0;
  #acceptedAtCheck = 0;
  #progressAt = performance.now();
  #messageWindowStart = 0;
  #messagesInWindow = 0;
  #unsubscribe: (() => void) | null = null;
  #drainTimer: ReturnType<typeof setTimeout> | null = null;
  #sleepTimer: ReturnType<typeof setTimeout> | null = null;
  #wake: (() => void) | null = null;

  constructor(opts: {
    socket: WebSocket;
    cursor: number | null;
    frames: FrameCache;
    kv: Deno.Kv;
    broadcaster: Broadcaster;
    log: Logger;
    limits: StreamLimits;
    stats: { peakHeldBytes: number };
    onClosed: () => void;
  }) {
    this.#socket = opts.socket;
    this.#frames = opts.frames;
    this.#kv = opts.kv;
    this.#broadcaster = opts.broadcaster;
    this.#log = opts.log;
    this.#limits = opts.limits;
    this.#stats = opts.stats;
    this.#onClosed = opts.onClosed;
    this.#closedPromise = new Promise((resolve) => this.#resolveClosed = resolve);
    const socket = opts.socket;
    socket.binaryType = "arraybuffer";
    socket.onopen = () => this.#start(opts.cursor);
    socket.onclose = () => this.#finish();
    socket.onerror = () => {};
    // Client messages are ignored (reference 6.1): browsers cannot send ping control frames, so
    // some clients keep the connection alive with small text messages. Deno reads each message
    // whole before this handler runs and cannot bound its size (Deno.upgradeWebSocket has no
    // maximum: fastwebsockets' 64 MiB applies, denoland/deno#15809), so a client past a small
    // budget (a message over 1 KiB, or more than 30 a minute) is cut off rather than allowed to
    // make the server buffer message after message.
    socket.onmessage = (event: MessageEvent) => this.#clientMessage(event.data);
  }

  /** Live frame from the broadcast. */
  onFrame(seq: number, frame: Uint8Array): void {
    if (this.#isClosed()) return;
    if (seq > this.#maxSeen) this.#maxSeen = seq;
    if (seq <= this.#lastSent) return;
    if (this.#mode === "live" && this.#queue.length === 0 && this.#hasRoom(frame.length)) {
      this.#send(frame);
      this.#lastSent = seq;
      return;
    }
    this.#queue.push({ seq, frame });
    this.#queuedBytes += frame.length;
    if (
      this.#queue.length > this.#limits.maxQueuedFrames ||
      this.#queuedBytes > this.#limits.maxQueuedBytes
    ) {
      // Too far behind the broadcast: drop the queue and serve from the stored events instead.
      this.#queue = [];
      this.#queuedBytes = 0;
      if (this.#mode === "live") {
        this.#send(outdatedCursorFrame(
          `Consumer fell behind the live stream after seq ${this.#lastSent}: replaying stored events`,
        ));
        this.#replay(false);
      }
      return;
    }
    this.#noteHeld();
    if (this.#mode === "live") this.#scheduleDrain();
  }

  /**
   * Closes the connection when its socket has had unsent bytes and accepted none of them for
   * `stallTimeoutMs` (called by the hub every so often).
   */
  checkStall(now: number): void {
    if (this.#isClosed()) return;
    const buffered = this.#socket.bufferedAmount;
    const accepted = this.#sentBytes - buffered;
    if (buffered === 0 || accepted > this.#acceptedAtCheck) {
      this.#acceptedAtCheck = accepted;
      this.#progressAt = now;
      return;
    }
    if (now - this.#progressAt < this.#limits.stallTimeoutMs) return;
    this.#log.warn("subscriber's socket accepted nothing; closing its connection", {
      stalledMs: Math.round(now - this.#progressAt),
      unsentBytes: buffered,
      lastSeq: this.#lastSent,
    });
    try {
      this.#socket.close(CLOSE_POLICY, STALLED);
    } catch {
      // Already closing.
    }
    this.#finish();
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
   * Each read takes no more than the socket has room for, and each frame waits for room.
   */
  async #replay(reported: boolean): Promise<void> {
    this.#mode = "replay";
    this.#cancelDrain();
    const batchSize = this.#limits.replayBatch;
    try {
      for (;;) {
        await this.#writable(1);
        if (this.#isClosed()) return;
        const from = this.#lastSent;
        const room = this.#limits.maxBufferedBytes - this.#socket.bufferedAmount;
        const { frames, end } = await this.#frames.read(from, batchSize, Math.max(1, room));
        if (this.#isClosed()) return;
        if (frames.length > 0 && frames[0].seq > from + 1 && from > 0 && !reported) {
          // Events after the consumer's position were pruned while it was away.
          this.#send(outdatedCursorFrame(
            `Events after seq ${from} are no longer kept: continuing from seq ${frames[0].seq}`,
          ));
        }
        reported = false;
        this.#inHandBytes = frames.reduce((n, f) => n + f.frame.length, 0);
        for (const { seq, frame } of frames) {
          if (seq > this.#lastSent) {
            await this.#writable(frame.length);
            if (this.#isClosed()) return;
            this.#inHandBytes -= frame.length;
            this.#send(frame);
            this.#lastSent = seq;
          } else {
            this.#inHandBytes -= frame.length;
          }
        }
        this.#inHandBytes = 0;
        this.#trimQueue();
        if (end && this.#caughtUp()) {
          this.#mode = "live";
          this.#drain();
          return;
        }
        if (frames.length === 0) await this.#sleep(DRAIN_RETRY_MS);
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
    while (i < this.#queue.length && this.#queue[i].seq <= this.#lastSent) {
      this.#queuedBytes -= this.#queue[i++].frame.length;
    }
    if (i > 0) this.#queue = this.#queue.slice(i);
  }

  /** Live mode: sends queued frames while the socket has room for them. */
  #drain(): void {
    this.#drainTimer = null;
    if (this.#mode !== "live") return;
    let i = 0;
    while (i < this.#queue.length && this.#hasRoom(this.#queue[i].frame.length)) {
      const { seq, frame } = this.#queue[i++];
      this.#queuedBytes -= frame.length;
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

  /** Whether a frame of `bytes` may go to the socket now. */
  #hasRoom(bytes: number): boolean {
    const buffered = this.#buffered = this.#socket.bufferedAmount;
    return buffered === 0 || buffered + bytes <= this.#limits.maxBufferedBytes;
  }

  /** Waits until the socket has room for `bytes` (or the connection closed). */
  async #writable(bytes: number): Promise<void> {
    let wait = 2;
    while (this.#mode !== "closed" && !this.#hasRoom(bytes)) {
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
    if (this.#socket.readyState !== WebSocket.OPEN) return;
    this.#socket.send(frame);
    this.#sentBytes += frame.length;
    this.#buffered += frame.length;
    this.#noteHeld();
  }

  /**
   * Records the bytes this connection holds now in the hub's peak; the socket's share as of the
   * last room check plus what was sent since (reading `bufferedAmount` is an op call, and the
   * live path of a thousand subscribers makes one per frame already).
   */
  #noteHeld(): void {
    const held = this.#buffered + this.#queuedBytes + this.#inHandBytes;
    if (held > this.#stats.peakHeldBytes) this.#stats.peakHeldBytes = held;
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
      this.#queuedBytes = 0;
      this.#inHandBytes = 0;
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
