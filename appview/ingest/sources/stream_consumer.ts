/**
 * What the two stream consumers (local `subscribeRepos`, public Jetstream) share: a WebSocket
 * client that reconnects with capped exponential backoff and jitter, batches the messages that
 * queued up while the previous batch was being applied, applies them through the one write path
 * with the stream cursor in the same transaction (so the cursor never runs ahead of committed
 * ops), and publishes its state in `consumer_status` for `/healthz` (also when the consumer runs
 * in its own process).
 *
 * A consumer running alone applies everything queued in one go: while it writes, the event loop
 * reads nothing more, which is the stream's backpressure. Beside the HTTP API
 * ({@link StreamConsumerOptions.yieldBetweenBatches}) it applies one transaction per event-loop
 * turn, so requests are answered while the index catches up. Then the socket keeps delivering
 * between transactions, so there is flow control: when more than
 * {@link StreamConsumerOptions.maxQueuedMessages} received messages, or more than
 * {@link StreamConsumerOptions.maxQueuedBytes} of them, wait to be applied, the consumer closes
 * the connection (a WebSocket cannot be paused), applies what it holds, and
 * reconnects from its cursor without backoff. Memory stays bounded and nothing is skipped: the
 * stream replays from the cursor. That reconnect is a `"resume"` ({@link ConnectReason}): the
 * cursor is exactly what was applied, so a protocol that rewinds its cursor after a lost
 * connection must not rewind it here, or a backlog denser than the queue bound per rewind would
 * replay only what was applied, pause again, and never move (issue 36).
 *
 * The protocol (frame decoding, cursor rules, URL) is a {@link StreamProtocol}: see
 * `local_stream.ts` and `jetstream.ts`.
 *
 * @module
 */

import { type Logger, redactUrl } from "../../../shared/log.ts";
import type { IndexOp } from "../../../shared/ops.ts";
import type { AppviewContext } from "../../context.ts";
import { type ConsumerState, readCursor, writeConsumerStatus } from "../../db/state.ts";
import type { CommitRef, CommitSpan } from "../apply_ops.ts";
import { OffThreadParser } from "./parse_worker.ts";

/** Reconnect delays: the n-th attempt waits about `initialMs * 2^n`, capped at `maxMs`. */
export interface BackoffOptions {
  initialMs: number;
  maxMs: number;
}

/** Default reconnect delays: 0.5 s doubling up to 30 s. */
export const DEFAULT_BACKOFF: BackoffOptions = Object.freeze({ initialMs: 500, maxMs: 30_000 });
/** Status rows are written on every state change and at most this often while live. */
export const STATUS_INTERVAL_MS = 1_000;
/** A running consumer rewrites its status row at least this often (a heartbeat for `/healthz`). */
export const STATUS_HEARTBEAT_MS = 10_000;
/** A connection open this long resets the backoff (so a flapping server still backs off). */
export const STABLE_CONNECTION_MS = 10_000;
/**
 * Most messages folded into one `applyOps` call (with {@link MAX_BATCH_OPS}, one transaction of
 * the writer's default batch size: larger transactions write fewer WAL pages per op).
 */
export const MAX_BATCH_MESSAGES = 20_000;
/** Ops after which a batch is applied even if more messages are queued. */
export const MAX_BATCH_OPS = 20_000;
/**
 * Default of {@link StreamConsumerOptions.maxQueuedMessages} (it applies only to a consumer that
 * yields, i.e. one beside the HTTP API): a fraction of a second of catch-up; receiving a burst of
 * that many held the event loop about 0.1 s (about 20 us each, measured under load).
 */
export const MAX_QUEUED_MESSAGES = 5_000;
/**
 * Default of {@link StreamConsumerOptions.maxQueuedBytes}: what the waiting messages may hold
 * (characters of text frames, bytes of binary ones), so that a stream of large messages cannot
 * fill memory within the count bound. 16 MiB is about 40,000 Jetstream events of the public
 * ingest benchmark's mix (about 400 characters each).
 */
export const MAX_QUEUED_BYTES = 16 * 1024 * 1024;
/** How long `close()` waits for the socket's close handshake. */
const CLOSE_TIMEOUT_MS = 2_000;
/**
 * Default of {@link StreamConsumerOptions.idleTimeoutMs}: long enough that a quiet account host
 * costs one reconnect (from the cursor, nothing replayed twice) every few minutes.
 */
export const IDLE_TIMEOUT_MS = 300_000;

/**
 * Delay before reconnect attempt `attempt` (0-based): "equal jitter", half of the capped
 * exponential step fixed and half random, so delays grow yet clients do not reconnect in step.
 */
export function backoffDelay(
  attempt: number,
  opts: BackoffOptions,
  random: () => number = Math.random,
): number {
  const step = Math.min(opts.maxMs, opts.initialMs * 2 ** Math.min(attempt, 30));
  return Math.round(step / 2 + random() * (step / 2));
}

/** One decoded message: its ops, the stream cursor it moves to and the commit they make up. */
export interface DecodedMessage {
  ops: IndexOp[];
  cursor: number;
  /**
   * The repository commit the ops belong to: the write path applies them only when its rev fits
   * the repository's latest applied rev (`RevGate`). Absent for ungated ops (identity events).
   */
  commit?: CommitRef;
}

/** What a protocol may do to its connection while decoding. */
export interface StreamControl {
  readonly log: Logger;
  /** Records `reason` as the consumer's last error (shown by `/healthz`). */
  fail(reason: string): void;
  /** Records `reason` and drops the connection; the consumer reconnects with backoff. */
  disconnect(reason: string): void;
}

/**
 * The cursor-independent, CPU-heavy part of a protocol's decode, run in a worker thread
 * (`parse_worker.ts`): `decode(data, cursor, control)` must equal
 * `accept(<worker's parse of data>, cursor, control)`.
 */
export interface StreamParser {
  /** Worker module: answers each `ParseRequest` with a `ParseResult`, in order. */
  readonly workerUrl: URL;
  /** Sent with every batch to the worker (structured-cloneable). */
  readonly options: unknown;
  /** The rest of decoding, on the main thread, for one parsed message. */
  accept(parsed: unknown, cursor: number | null, control: StreamControl): DecodedMessage | null;
}

/**
 * Why a consumer connects, for {@link StreamProtocol.connectUrl}:
 * - `"start"`: the consumer starts, from its stored cursor;
 * - `"resume"`: after a flow-control pause: the consumer closed the connection itself and applied
 *   everything it had received, so its cursor is exactly where the stream must go on;
 * - `"reconnect"`: after a connection lost in an unknown state (an error, a close by the server,
 *   the idle timeout, a failed write).
 */
export type ConnectReason = "start" | "resume" | "reconnect";

/** The wire side of a stream consumer. */
export interface StreamProtocol {
  /** `consumer_status` name (`db/state.ts`). */
  readonly consumer: string;
  /** `cursors` name (`db/state.ts`). */
  readonly cursorName: string;
  /** URL to connect to, given the stored cursor (null when none) and why it connects. */
  connectUrl(cursor: number | null, reason: ConnectReason): string;
  /** Extra headers of the upgrade request (credentials), when the protocol has any. */
  connectHeaders?(): Record<string, string> | undefined;
  /**
   * Decodes one message. `cursor` is the highest cursor accepted so far (including messages of
   * the batch being built). Returns null to drop the message (having logged why), or its ops and
   * new cursor; a message that cannot be applied but must be passed over gives no ops.
   */
  decode(
    data: string | ArrayBuffer,
    cursor: number | null,
    control: StreamControl,
  ): DecodedMessage | null;
  /** When present, messages are parsed in a worker thread (see {@link StreamParser}). */
  readonly parser?: StreamParser;
}

/** Options of {@link StreamConsumer}. */
export interface StreamConsumerOptions {
  backoff?: BackoffOptions;
  /** Random source of the jitter (tests pin it). */
  random?: () => number;
  /**
   * Parse messages in a worker thread when the protocol offers a parser (default true). False
   * decodes on the main thread, as when the worker cannot start.
   */
  parseInWorker?: boolean;
  /** Most ops per transaction (default {@link MAX_BATCH_OPS}). */
  maxBatchOps?: number;
  /**
   * Apply one transaction per event-loop turn, with flow control (module comment), instead of
   * everything queued in one go (default false). For a consumer sharing its process with the
   * HTTP API (`server.ts`), which then waits for one transaction at most.
   */
  yieldBetweenBatches?: boolean;
  /**
   * With {@link yieldBetweenBatches}: received messages waiting to be applied (queued or in the
   * parse worker) above which the connection is closed until they are applied (default
   * {@link MAX_QUEUED_MESSAGES}).
   */
  maxQueuedMessages?: number;
  /**
   * With {@link yieldBetweenBatches}: total size of the received messages waiting to be applied
   * (characters of text, bytes of binary), above which the connection is closed as for
   * {@link maxQueuedMessages} (default {@link MAX_QUEUED_BYTES}).
   */
  maxQueuedBytes?: number;
  /**
   * A connection that opens nothing or delivers no message for this long is closed and made
   * again from the cursor (default {@link IDLE_TIMEOUT_MS}). Neither stream sends heartbeats,
   * so silence is all a consumer sees of a server that hangs, or of a connection cut without a
   * TCP reset; without this, it would wait for good.
   */
  idleTimeoutMs?: number;
}

/** One `applyOps` call's worth of decoded messages ({@link foldMessages}). */
export interface FoldedMessages {
  ops: IndexOp[];
  /** The commit of each decoded message that has one, as spans of `ops`. */
  commits: CommitSpan[];
  /** Cursor of the last message decoded (the given one when none moved it). */
  cursor: number | null;
  /** Index of the first message not folded. */
  next: number;
  /** Whether any message was decoded (not dropped). */
  moved: boolean;
}

/**
 * Folds queued messages from `start` into the input of one `applyOps` call, as a consumer drains
 * its queue: at most {@link MAX_BATCH_MESSAGES} messages, stopping once `maxOps` ops (default
 * {@link MAX_BATCH_OPS}) are reached; each message decoded with the cursor of the messages before
 * it; dropped ones (`decode` returns null) skipped.
 */
export function foldMessages<T>(
  messages: readonly T[],
  start: number,
  cursor: number | null,
  decode: (message: T, cursor: number | null) => DecodedMessage | null,
  maxOps: number = MAX_BATCH_OPS,
): FoldedMessages {
  const ops: IndexOp[] = [];
  const commits: CommitSpan[] = [];
  let moved = false;
  let i = start;
  const end = Math.min(messages.length, start + MAX_BATCH_MESSAGES);
  for (; i < end && ops.length < maxOps; i++) {
    const decoded = decode(messages[i], cursor);
    if (decoded === null) continue;
    const first = ops.length;
    for (const op of decoded.ops) ops.push(op);
    if (decoded.commit !== undefined) {
      commits.push({ start: first, end: ops.length, commit: decoded.commit });
    }
    cursor = decoded.cursor;
    moved = true;
  }
  return { ops, commits, cursor, next: i, moved };
}

/** A received message: raw, or already parsed by the protocol's worker. */
type QueuedMessage = { raw: string | ArrayBuffer } | { parsed: unknown };

/** Snapshot of a consumer's state, as written to `consumer_status`. */
export interface StreamConsumerStatus {
  state: ConsumerState;
  cursor: number | null;
  lastEventAt: string | null;
  lastError: string | null;
}

/** A reconnecting WebSocket stream consumer feeding the index write path. */
export class StreamConsumer implements AsyncDisposable {
  readonly #ctx: AppviewContext;
  readonly #protocol: StreamProtocol;
  readonly #log: Logger;
  readonly #backoff: BackoffOptions;
  readonly #random: () => number;
  readonly #maxBatchOps: number;
  readonly #maxQueued: number;
  readonly #maxQueuedBytes: number;
  readonly #yielding: boolean;
  readonly #control: StreamControl;
  #state: ConsumerState = "connecting";
  #cursor: number | null = null;
  #lastEventAt: string | null = null;
  #lastError: string | null = null;
  #socket: WebSocket | null = null;
  #socketClosed: Promise<void> = Promise.resolve();
  #openedAt = 0;
  #attempt = 0;
  /** Received messages; those before {@link #queueHead} are applied. */
  #queue: QueuedMessage[] = [];
  #queueHead = 0;
  /**
   * Size of each received message not applied yet (queued or in the parse worker), in the order
   * received, which is the order they are applied in; those before {@link #sizesHead} are gone.
   */
  #sizes: number[] = [];
  #sizesHead = 0;
  /** Sum of the sizes from {@link #sizesHead}. */
  #waitingBytes = 0;
  /** The connection was closed for flow control: reconnect once the queue is applied. */
  #paused = false;
  readonly #parser: OffThreadParser | null;
  #drainTimer: ReturnType<typeof setTimeout> | null = null;
  #reconnectTimer: ReturnType<typeof setTimeout> | null = null;
  #statusTimer: ReturnType<typeof setInterval> | null = null;
  readonly #idleTimeoutMs: number;
  #idleTimer: ReturnType<typeof setInterval> | null = null;
  /** When the current socket was made or last delivered a message (performance.now()). */
  #lastActivity = 0;
  #statusDirty = false;
  #statusWrittenAt = -Infinity;
  #started = false;
  #closing: Promise<void> | null = null;

  constructor(ctx: AppviewContext, protocol: StreamProtocol, opts: StreamConsumerOptions = {}) {
    this.#ctx = ctx;
    this.#protocol = protocol;
    this.#log = ctx.log.child(`consumer.${protocol.consumer}`);
    this.#backoff = opts.backoff ?? DEFAULT_BACKOFF;
    this.#random = opts.random ?? Math.random;
    this.#maxBatchOps = positiveOption("maxBatchOps", opts.maxBatchOps, MAX_BATCH_OPS);
    this.#yielding = opts.yieldBetweenBatches ?? false;
    this.#maxQueued = positiveOption(
      "maxQueuedMessages",
      opts.maxQueuedMessages,
      MAX_QUEUED_MESSAGES,
    );
    this.#maxQueuedBytes = positiveOption("maxQueuedBytes", opts.maxQueuedBytes, MAX_QUEUED_BYTES);
    this.#idleTimeoutMs = positiveOption("idleTimeoutMs", opts.idleTimeoutMs, IDLE_TIMEOUT_MS);
    this.#control = {
      log: this.#log,
      fail: (reason) => {
        this.#lastError = reason;
        this.#statusDirty = true;
      },
      disconnect: (reason) => {
        this.#lastError = reason;
        this.#dropConnection();
      },
    };
    this.#parser = protocol.parser !== undefined && opts.parseInWorker !== false
      ? new OffThreadParser({
        parser: protocol.parser,
        log: this.#log,
        deliver: (parsed) => {
          for (const p of parsed) this.#queue.push({ parsed: p });
          this.#scheduleDrain();
        },
        onFailure: (reason) => {
          // What was in flight is gone: resume from the stored cursor, decoding inline.
          this.#lastError = reason;
          this.#dropConnection();
        },
      })
      : null;
  }

  /** Current state (the same values the status row holds). */
  status(): StreamConsumerStatus {
    return {
      state: this.#state,
      cursor: this.#cursor,
      lastEventAt: this.#lastEventAt,
      lastError: this.#lastError,
    };
  }

  /** Whether messages are currently parsed in a worker thread (see {@link StreamParser}). */
  get parsesInWorker(): boolean {
    return this.#parser?.active ?? false;
  }

  /** Reads the stored cursor and connects. */
  start(): void {
    if (this.#started) throw new Error(`Consumer ${this.#protocol.consumer} already started`);
    this.#started = true;
    this.#cursor = readCursor(this.#ctx.db, this.#protocol.cursorName);
    this.#parser?.start();
    this.#statusTimer = setInterval(() => this.#writeStatus(false), STATUS_INTERVAL_MS);
    // Checked a few times per timeout: a timestamp per message is cheaper than a timer each.
    const every = Math.max(10, Math.min(STATUS_INTERVAL_MS, Math.floor(this.#idleTimeoutMs / 4)));
    this.#idleTimer = setInterval(() => this.#checkIdle(), every);
    this.#connect("start");
  }

  /** Stops reconnecting, closes the socket, applies what was already received. */
  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  async #close(): Promise<void> {
    for (const timer of [this.#reconnectTimer, this.#drainTimer]) {
      if (timer !== null) clearTimeout(timer);
    }
    for (const timer of [this.#statusTimer, this.#idleTimer]) {
      if (timer !== null) clearInterval(timer);
    }
    this.#reconnectTimer =
      this.#drainTimer =
      this.#statusTimer =
      this.#idleTimer =
        null;
    const socket = this.#socket;
    if (socket !== null) {
      try {
        socket.close(1000);
      } catch { /* already closing */ }
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([
        this.#socketClosed,
        new Promise<void>((r) => (timer = setTimeout(r, CLOSE_TIMEOUT_MS))),
      ]);
      clearTimeout(timer);
    }
    // Apply what was received: let the worker answer for the messages it holds.
    await this.#parser?.settle(CLOSE_TIMEOUT_MS);
    this.#parser?.close();
    if (this.#drainTimer !== null) clearTimeout(this.#drainTimer);
    this.#drainTimer = null;
    this.#drainAll();
    if (this.#started) this.#setState("disabled");
    this.#log.info("Consumer stopped", { cursor: this.#cursor });
  }

  #connect(reason: ConnectReason): void {
    this.#reconnectTimer = null;
    if (this.#closing !== null) return;
    this.#setState("connecting");
    const target = this.#protocol.connectUrl(this.#cursor, reason);
    // Logs and /healthz show the URL without credentials or API keys in its query.
    const url = redactUrl(target);
    let socket: WebSocket;
    try {
      const headers = this.#protocol.connectHeaders?.();
      socket = new WebSocket(target, headers ? { headers } : undefined);
    } catch (e) {
      const error = messageOf(e).replaceAll(target, url);
      this.#lastError = `Cannot connect to ${url}: ${error}`;
      this.#log.error("Cannot open stream connection", { url, error });
      this.#scheduleReconnect();
      return;
    }
    socket.binaryType = "arraybuffer";
    this.#socket = socket;
    this.#lastActivity = performance.now();
    let resolveClosed!: () => void;
    this.#socketClosed = new Promise((r) => (resolveClosed = r));
    socket.onopen = () => {
      if (this.#socket !== socket) return;
      this.#openedAt = performance.now();
      this.#log.info("Stream connected", { url, cursor: this.#cursor });
      this.#setState("live");
    };
    socket.onmessage = (event: MessageEvent) => {
      // Once paused, what still arrives is dropped: the stream replays it from the cursor.
      if (this.#socket !== socket || this.#paused) return;
      this.#lastActivity = performance.now();
      const size = typeof event.data === "string" ? event.data.length : event.data.byteLength;
      this.#sizes.push(size);
      this.#waitingBytes += size;
      if (this.#parser?.active) this.#parser.push(event.data);
      else {
        this.#queue.push({ raw: event.data });
        this.#scheduleDrain();
      }
      if (
        this.#yielding && !this.#paused &&
        (this.#waiting() > this.#maxQueued || this.#waitingBytes > this.#maxQueuedBytes)
      ) this.#pause();
    };
    socket.onerror = (event: Event) => {
      const message = (event as ErrorEvent).message || "WebSocket error";
      if (this.#socket === socket) this.#lastError = message.replaceAll(target, url);
    };
    socket.onclose = (event: CloseEvent) => {
      resolveClosed();
      this.#socketGone(socket, url, { code: event.code, reason: event.reason });
    };
  }

  /** `socket` closed (or was abandoned): apply what it delivered, then reconnect. */
  #socketGone(socket: WebSocket, url: string, how: Record<string, unknown>): void {
    if (this.#socket !== socket) return;
    this.#socket = null;
    const wasOpen = this.#openedAt > 0;
    if (wasOpen && performance.now() - this.#openedAt >= STABLE_CONNECTION_MS) this.#attempt = 0;
    this.#openedAt = 0;
    if (this.#paused && this.#closing === null) {
      // Flow control: reconnect (from the cursor) once what was received is applied.
      this.#scheduleDrain();
      return;
    }
    this.#drainAll();
    if (this.#closing !== null) return;
    this.#log.warn("Stream connection closed", { url, ...how, lastError: this.#lastError });
    if (!wasOpen && this.#lastError === null) this.#lastError = `Cannot connect to ${url}`;
    this.#scheduleReconnect();
  }

  /**
   * Closes the current socket. Deno's client reports a socket closed only once the server answers
   * the close frame, so a server that never does (hung, or cut off without a TCP reset) would
   * leave the consumer waiting for good: after {@link CLOSE_TIMEOUT_MS} the socket is abandoned
   * and treated as closed.
   */
  #closeSocket(reason: string): void {
    const socket = this.#socket;
    if (socket === null) return;
    const url = redactUrl(socket.url);
    try {
      socket.close(1000, reason);
    } catch { /* already closing */ }
    const timer = setTimeout(() => {
      if (this.#socket !== socket || this.#closing !== null) return;
      this.#log.warn("Stream did not close in time; abandoning the connection", {
        timeoutMs: CLOSE_TIMEOUT_MS,
      });
      this.#socketGone(socket, url, { abandoned: true });
    }, CLOSE_TIMEOUT_MS);
    this.#socketClosed.then(() => clearTimeout(timer));
  }

  /** Closes a connection silent for the idle timeout; the consumer reconnects from its cursor. */
  #checkIdle(): void {
    if (this.#socket === null || this.#paused || this.#closing !== null) return;
    const silentMs = performance.now() - this.#lastActivity;
    if (silentMs < this.#idleTimeoutMs) return;
    this.#log.info("Stream silent; reconnecting from the stored cursor", {
      silentMs: Math.round(silentMs),
      opened: this.#openedAt > 0,
      cursor: this.#cursor,
    });
    this.#lastActivity = performance.now(); // one close per timeout, even if it hangs
    this.#closeSocket("no message within the idle timeout");
  }

  #dropConnection(): void {
    this.#queue = [];
    this.#queueHead = 0;
    this.#sizes = [];
    this.#sizesHead = 0;
    this.#waitingBytes = 0;
    this.#parser?.reset();
    if (this.#socket === null) {
      // Paused and already closed: nothing else will reconnect.
      if (this.#paused) {
        this.#paused = false;
        this.#scheduleReconnect();
      }
      return;
    }
    this.#closeSocket("reconnecting from the stored cursor");
  }

  #scheduleReconnect(): void {
    if (this.#closing !== null || this.#reconnectTimer !== null) return;
    const delay = backoffDelay(this.#attempt++, this.#backoff, this.#random);
    this.#setState("backoff");
    this.#log.info("Reconnecting after backoff", { delayMs: delay, attempt: this.#attempt });
    this.#reconnectTimer = setTimeout(() => this.#connect("reconnect"), delay);
  }

  /** Received messages not applied yet: queued here or still in the parse worker. */
  #waiting(): number {
    return this.#queue.length - this.#queueHead + (this.#parser?.pending ?? 0);
  }

  #scheduleDrain(): void {
    this.#drainTimer ??= setTimeout(() => this.#drain(), 0);
  }

  /** Flow control: closes the socket until what was received is applied (module comment). */
  #pause(): void {
    this.#paused = true;
    this.#log.info("Pausing the stream until the index applies what it received", {
      waiting: this.#waiting(),
      waitingBytes: this.#waitingBytes,
      cursor: this.#cursor,
    });
    this.#closeSocket("consumer catching up");
  }

  /**
   * Applies what is queued: all of it, or with {@link StreamConsumerOptions.yieldBetweenBatches}
   * one transaction's worth, running again in a later event-loop turn while more is queued.
   */
  #drain(): void {
    if (this.#drainTimer !== null) clearTimeout(this.#drainTimer);
    this.#drainTimer = null;
    if (!this.#yielding) {
      this.#drainAll();
      return;
    }
    if (!this.#drainOnce()) return;
    if (this.#queueHead < this.#queue.length) {
      this.#scheduleDrain();
      return;
    }
    this.#writeStatus(false);
    if (
      this.#paused && this.#socket === null && this.#closing === null &&
      (this.#parser?.pending ?? 0) === 0
    ) {
      this.#paused = false;
      this.#log.info("Resuming the stream", { cursor: this.#cursor });
      this.#connect("resume");
    }
  }

  /** Applies every queued message now, in batches (the connection is gone or closing). */
  #drainAll(): void {
    while (this.#queueHead < this.#queue.length && this.#drainOnce());
    this.#writeStatus(false);
  }

  /**
   * Folds queued messages into one batch and applies it with its cursor in one transaction.
   * Returns false when the write failed (the connection was dropped to replay from the cursor).
   */
  #drainOnce(): boolean {
    const queue = this.#queue;
    if (this.#queueHead >= queue.length) return true;
    const { ops, commits, cursor, next, moved } = foldMessages(
      queue,
      this.#queueHead,
      this.#cursor,
      (message, at) => this.#decode(message, at),
      this.#maxBatchOps,
    );
    // A decode may drop the connection, which empties the queue: keep the fresh one.
    if (this.#queue === queue) {
      this.#forgetSizes(next - this.#queueHead);
      this.#queueHead = next;
      if (next >= queue.length) {
        this.#queue = [];
        this.#queueHead = 0;
      }
    }
    if (!moved || cursor === null) return true;
    try {
      this.#ctx.writer.applyOps(ops, {
        cursor: { name: this.#protocol.cursorName, value: cursor },
        commits,
      });
    } catch (e) {
      // Nothing of the batch was committed: reconnect and replay from the stored cursor.
      this.#lastError = `Index write failed: ${messageOf(e)}`;
      this.#log.error("Index write failed; reconnecting from the stored cursor", { error: e });
      this.#dropConnection();
      return false;
    }
    this.#cursor = cursor;
    this.#lastEventAt = this.#ctx.now().toISOString();
    this.#statusDirty = true;
    return true;
  }

  /** The `count` oldest waiting messages were folded into a batch: they no longer count. */
  #forgetSizes(count: number): void {
    const end = Math.min(this.#sizes.length, this.#sizesHead + count);
    for (let i = this.#sizesHead; i < end; i++) this.#waitingBytes -= this.#sizes[i];
    this.#sizesHead = end;
    if (end === this.#sizes.length) {
      this.#sizes = [];
      this.#sizesHead = 0;
    } else if (end > 4_096 && end * 2 > this.#sizes.length) {
      this.#sizes = this.#sizes.slice(end);
      this.#sizesHead = 0;
    }
  }

  #decode(message: QueuedMessage, cursor: number | null): DecodedMessage | null {
    try {
      return "raw" in message
        ? this.#protocol.decode(message.raw, cursor, this.#control)
        : this.#protocol.parser!.accept(message.parsed, cursor, this.#control);
    } catch (e) {
      // Protocols report bad input themselves; this is a defect, never a reason to stop.
      this.#lastError = `Message skipped: ${messageOf(e)}`;
      this.#log.error("Message skipped after an unexpected error", { error: e });
      return null;
    }
  }

  #setState(state: ConsumerState): void {
    if (state === this.#state && this.#statusWrittenAt > -Infinity) return;
    this.#state = state;
    this.#writeStatus(true);
  }

  #writeStatus(force: boolean): void {
    const now = performance.now();
    const since = now - this.#statusWrittenAt;
    if (
      !force && !(this.#statusDirty && since >= STATUS_INTERVAL_MS) && since < STATUS_HEARTBEAT_MS
    ) {
      return;
    }
    try {
      writeConsumerStatus(this.#ctx.db, {
        name: this.#protocol.consumer,
        state: this.#state,
        cursor: this.#cursor,
        lastEventAt: this.#lastEventAt,
        lastError: this.#lastError,
        updatedAt: this.#ctx.now().toISOString(),
      });
      this.#statusDirty = false;
      this.#statusWrittenAt = now;
    } catch (e) {
      // A busy database only delays the status row; the next tick retries.
      this.#log.warn("Cannot write consumer status", { error: e });
    }
  }
}

function positiveOption(name: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new RangeError(`${name} must be a positive integer, got ${value}`);
  }
  return value;
}

/** The message of an error value. */
export function messageOf(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/** Writes the status row of a consumer that is not configured (e.g. no Jetstream URL). */
export function writeDisabledStatus(ctx: AppviewContext, consumer: string): void {
  writeConsumerStatus(ctx.db, {
    name: consumer,
    state: "disabled",
    cursor: null,
    lastEventAt: null,
    lastError: null,
    updatedAt: ctx.now().toISOString(),
  });
}
