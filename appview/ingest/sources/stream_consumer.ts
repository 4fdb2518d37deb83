/**
 * What the two stream consumers (local `subscribeRepos`, public Jetstream) share: a WebSocket
 * client that reconnects with capped exponential backoff and jitter, batches the messages that
 * queued up while the previous batch was being applied, applies them through the one write path
 * with the stream cursor in the same transaction (so the cursor never runs ahead of committed
 * ops), and publishes its state in `consumer_status` for `/healthz` (also when the consumer runs
 * in its own process).
 *
 * One batch is applied at a time: a drain starts after the one before it has finished (the
 * write path is async, `db/store.ts`), and closing waits for the drain in flight.
 *
 * A consumer running alone applies everything queued in one go: while it writes, the event loop
 * reads nothing more, which is the stream's backpressure (on SQLite the writes resolve without
 * yielding to the event loop, as when they were synchronous). Beside the HTTP API
 * ({@link StreamConsumerOptions.yieldBetweenBatches}) it applies one transaction per event-loop
 * turn, so requests are answered while the index catches up. Then the socket keeps delivering
 * between transactions, so there is flow control: when more than
 * {@link StreamConsumerOptions.maxQueuedMessages} received messages, or more than
 * {@link StreamConsumerOptions.maxQueuedBytes} of them, wait to be applied, the consumer closes
 * the connection (a WebSocket cannot be paused), applies what it holds, and
 * reconnects from its cursor without backoff. Memory stays bounded and nothing is skipped: the
 * stream replays from the cursor. That reconnect is a `"resume"` (`ConnectReason`): the
 * cursor is exactly what was applied, so a protocol that rewinds its cursor after a lost
 * connection must not rewind it here, or a backlog denser than the queue bound per rewind would
 * replay only what was applied, pause again, and never move (issue 36).
 *
 * The protocol (frame decoding, cursor rules, URL) is a {@link StreamProtocol}
 * (`stream_protocol.ts`): see `local_stream.ts` and `jetstream.ts`. The consumer composes the
 * connection (`stream_socket.ts`: connect, reconnect, backoff, idle timeout), the queue with its
 * flow-control bounds (`stream_queue.ts`: queue, sizes, paused flag, folding into batches) and
 * the status row (`stream_status.ts`: status rows, heartbeat); it drains the queue into the
 * write path and decides when to pause and resume.
 *
 * @module
 */

import type { Logger } from "../../../shared/log.ts";
import type { AppviewContext } from "../../context.ts";
import { OffThreadParser } from "./parse_worker.ts";
import type { DecodedMessage, StreamControl, StreamProtocol } from "./stream_protocol.ts";
import { messageOf } from "./stream_protocol.ts";
import {
  MAX_BATCH_OPS,
  MAX_QUEUED_BYTES,
  MAX_QUEUED_MESSAGES,
  MessageQueue,
  type QueuedMessage,
} from "./stream_queue.ts";
import {
  type BackoffOptions,
  CLOSE_TIMEOUT_MS,
  DEFAULT_BACKOFF,
  IDLE_TIMEOUT_MS,
  StreamSocket,
} from "./stream_socket.ts";
import { StatusPublisher, type StreamConsumerStatus } from "./stream_status.ts";

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

/** A reconnecting WebSocket stream consumer feeding the index write path. */
export class StreamConsumer implements AsyncDisposable {
  readonly #ctx: AppviewContext;
  readonly #protocol: StreamProtocol;
  readonly #log: Logger;
  readonly #maxBatchOps: number;
  readonly #yielding: boolean;
  readonly #control: StreamControl;
  readonly #status: StatusPublisher;
  readonly #socket: StreamSocket;
  readonly #queue: MessageQueue;
  readonly #parser: OffThreadParser | null;
  #drainTimer: ReturnType<typeof setTimeout> | null = null;
  /** The last drain started (settled when idle): the next starts after it. */
  #draining: Promise<void> = Promise.resolve();
  /** Work the batch being folded waits for before it is applied (`StreamControl.waitFor`). */
  #pending: Promise<unknown>[] = [];
  #started = false;
  #closing: Promise<void> | null = null;

  constructor(ctx: AppviewContext, protocol: StreamProtocol, opts: StreamConsumerOptions = {}) {
    this.#ctx = ctx;
    this.#protocol = protocol;
    this.#log = ctx.log.child(`consumer.${protocol.consumer}`);
    this.#maxBatchOps = positiveOption("maxBatchOps", opts.maxBatchOps, MAX_BATCH_OPS);
    this.#yielding = opts.yieldBetweenBatches ?? false;
    this.#queue = new MessageQueue({
      maxMessages: positiveOption("maxQueuedMessages", opts.maxQueuedMessages, MAX_QUEUED_MESSAGES),
      maxBytes: positiveOption("maxQueuedBytes", opts.maxQueuedBytes, MAX_QUEUED_BYTES),
    });
    this.#status = new StatusPublisher(ctx, protocol.consumer, this.#log);
    this.#socket = new StreamSocket({
      protocol,
      log: this.#log,
      status: this.#status,
      host: {
        closing: () => this.#closing !== null,
        paused: () => this.#queue.paused,
        receive: (data) => this.#receive(data),
        gone: (wasOpen, url, how) => this.#socketGone(wasOpen, url, how),
      },
      backoff: opts.backoff ?? DEFAULT_BACKOFF,
      random: opts.random ?? Math.random,
      idleTimeoutMs: positiveOption("idleTimeoutMs", opts.idleTimeoutMs, IDLE_TIMEOUT_MS),
    });
    this.#control = {
      log: this.#log,
      fail: (reason) => {
        this.#status.lastError = reason;
        this.#status.dirty = true;
      },
      disconnect: (reason) => {
        this.#status.lastError = reason;
        this.#dropConnection();
      },
      rewind: (cursor, reason) => {
        // Through the write path, as every cursor write (no ops: only the cursor row moves).
        const stored = this.#ctx.store.writer.applyOps([], {
          cursor: { name: protocol.cursorName, value: cursor },
        }).then(() => {
          this.#status.cursor = cursor;
          this.#status.lastError = reason;
          this.#status.dirty = true;
          this.#dropConnection();
        });
        // The batch waits for it; a failure is the protocol's to report (it drops the connection).
        this.#pending.push(stored.catch(() => {}));
        return stored;
      },
      waitFor: (work) => {
        this.#pending.push(work);
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
          this.#status.lastError = reason;
          this.#dropConnection();
        },
      })
      : null;
  }

  /** Current state (the same values the status row holds). */
  status(): StreamConsumerStatus {
    return this.#status.snapshot();
  }

  /** Whether messages are currently parsed in a worker thread (see `StreamParser`). */
  get parsesInWorker(): boolean {
    return this.#parser?.active ?? false;
  }

  /** Reads the stored cursor and connects; resolves once connecting has begun. */
  start(): Promise<void> {
    if (this.#started) throw new Error(`Consumer ${this.#protocol.consumer} already started`);
    this.#started = true;
    return this.#start();
  }

  async #start(): Promise<void> {
    this.#status.cursor = await this.#ctx.store.state.readCursor(this.#protocol.cursorName);
    if (this.#closing !== null) return;
    this.#parser?.start();
    this.#status.start();
    this.#socket.start();
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
    if (this.#drainTimer !== null) clearTimeout(this.#drainTimer);
    this.#drainTimer = null;
    this.#status.stop();
    await this.#socket.close();
    // Apply what was received: let the worker answer for the messages it holds.
    await this.#parser?.settle(CLOSE_TIMEOUT_MS);
    this.#parser?.close();
    if (this.#drainTimer !== null) clearTimeout(this.#drainTimer);
    this.#drainTimer = null;
    await this.#serialized(() => this.#drainAll());
    if (this.#started) this.#status.setState("disabled");
    await this.#status.flush();
    this.#log.info("Consumer stopped", { cursor: this.#status.cursor });
  }

  /** A message arrived: queue it (or hand it to the parse worker); pause past the bounds. */
  #receive(data: string | ArrayBuffer): void {
    const size = typeof data === "string" ? data.length : data.byteLength;
    this.#queue.received(size);
    if (this.#parser?.active) this.#parser.push(data);
    else {
      this.#queue.push({ raw: data });
      this.#scheduleDrain();
    }
    if (this.#yielding && !this.#queue.paused && this.#queue.overLimit(this.#waiting())) {
      this.#pause();
    }
  }

  /** The connection is gone: apply what it delivered, then reconnect. */
  #socketGone(wasOpen: boolean, url: string, how: Record<string, unknown>): void {
    if (this.#queue.paused && this.#closing === null) {
      // Flow control: reconnect (from the cursor) once what was received is applied.
      this.#scheduleDrain();
      return;
    }
    void this.#serialized(async () => {
      await this.#drainAll();
      if (this.#closing !== null) return;
      this.#log.warn("Stream connection closed", {
        url,
        ...how,
        lastError: this.#status.lastError,
      });
      if (!wasOpen && this.#status.lastError === null) {
        this.#status.lastError = `Cannot connect to ${url}`;
      }
      this.#socket.scheduleReconnect();
    });
  }

  #dropConnection(): void {
    this.#queue.clear();
    this.#parser?.reset();
    if (!this.#socket.connected) {
      // Paused and already closed: nothing else will reconnect.
      if (this.#queue.paused) {
        this.#queue.paused = false;
        this.#socket.scheduleReconnect();
      }
      return;
    }
    this.#socket.closeSocket("reconnecting from the stored cursor");
  }

  /** Received messages not applied yet: queued here or still in the parse worker. */
  #waiting(): number {
    return this.#queue.size + (this.#parser?.pending ?? 0);
  }

  #scheduleDrain(): void {
    this.#drainTimer ??= setTimeout(() => this.#drain(), 0);
  }

  /**
   * Runs `drain` once the drain started before it has finished: one batch in flight at a time.
   * The returned Promise never rejects (a failure is logged).
   */
  #serialized(drain: () => Promise<void>): Promise<void> {
    this.#draining = this.#draining.then(drain).catch((e) => {
      this.#log.error("Consumer drain failed", { error: e });
    });
    return this.#draining;
  }

  /** Flow control: closes the socket until what was received is applied (module comment). */
  #pause(): void {
    this.#queue.paused = true;
    this.#log.info("Pausing the stream until the index applies what it received", {
      waiting: this.#waiting(),
      waitingBytes: this.#queue.waitingBytes,
      cursor: this.#status.cursor,
    });
    this.#socket.closeSocket("consumer catching up");
  }

  /**
   * Applies what is queued: all of it, or with {@link StreamConsumerOptions.yieldBetweenBatches}
   * one transaction's worth, running again in a later event-loop turn while more is queued.
   */
  #drain(): void {
    if (this.#drainTimer !== null) clearTimeout(this.#drainTimer);
    this.#drainTimer = null;
    void this.#serialized(async () => {
      if (!this.#yielding) {
        await this.#drainAll();
        return;
      }
      if (!(await this.#drainOnce())) return;
      if (this.#queue.size > 0) {
        this.#scheduleDrain();
        return;
      }
      this.#status.write(false);
      if (
        this.#queue.paused && !this.#socket.connected && this.#closing === null &&
        (this.#parser?.pending ?? 0) === 0
      ) {
        this.#queue.paused = false;
        this.#log.info("Resuming the stream", { cursor: this.#status.cursor });
        this.#socket.connect("resume");
      }
    });
  }

  /**
   * Applies every queued message now, in batches (the connection is gone or closing). Only
   * inside {@link #serialized}.
   */
  async #drainAll(): Promise<void> {
    while (this.#queue.size > 0 && await this.#drainOnce());
    this.#status.write(false);
  }

  /**
   * Folds queued messages into one batch and applies it with its cursor in one transaction,
   * after the work its messages asked for (`StreamControl.waitFor`). Returns false when that
   * failed (the connection was dropped to replay from the cursor). Only inside
   * {@link #serialized}.
   */
  async #drainOnce(): Promise<boolean> {
    const folded = this.#queue.take(
      this.#status.cursor,
      (message, at) => this.#decode(message, at),
      this.#maxBatchOps,
    );
    if (this.#pending.length > 0) {
      const pending = this.#pending;
      this.#pending = [];
      try {
        await Promise.all(pending);
      } catch (e) {
        return this.#writeFailed(e);
      }
    }
    if (folded === null) return true;
    const { ops, commits, cursor, moved } = folded;
    if (!moved || cursor === null) return true;
    try {
      await this.#ctx.store.writer.applyOps(ops, {
        cursor: { name: this.#protocol.cursorName, value: cursor },
        commits,
      });
    } catch (e) {
      return this.#writeFailed(e);
    }
    this.#status.cursor = cursor;
    this.#status.lastEventAt = this.#ctx.now().toISOString();
    this.#status.dirty = true;
    return true;
  }

  /** Nothing of the batch was committed: reconnect and replay from the stored cursor. */
  #writeFailed(e: unknown): false {
    this.#status.lastError = `Index write failed: ${messageOf(e)}`;
    this.#log.error("Index write failed; reconnecting from the stored cursor", { error: e });
    this.#dropConnection();
    return false;
  }

  #decode(message: QueuedMessage, cursor: number | null): DecodedMessage | null {
    try {
      return "raw" in message
        ? this.#protocol.decode(message.raw, cursor, this.#control)
        : this.#protocol.parser!.accept(message.parsed, cursor, this.#control);
    } catch (e) {
      // Protocols report bad input themselves; this is a defect, never a reason to stop.
      this.#status.lastError = `Message skipped: ${messageOf(e)}`;
      this.#log.error("Message skipped after an unexpected error", { error: e });
      return null;
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
