/**
 * The public-stream consumer in a worker thread, for an index that runs it beside its HTTP API
 * (`deno task appview`, `deno task dev`).
 *
 * Why: on the main thread, the consumer must share the event loop with the API, so it applies
 * one short transaction per turn (`IN_PROCESS_CONSUMER` in `server.ts`: 2,000 ops, about 0.1 s)
 * and pauses the stream when 5,000 messages wait. Short transactions write more WAL pages per op,
 * and the public-ingest benchmark stayed at 11,600-12,100 events/s against the 20,000/s budget
 * (docs/behaviour.md 12; issue 36 item 11). In a worker, with its own connection, the consumer
 * runs as it does in its own process (`deno task consumer:public`): everything queued applied in
 * one go, in transactions of up to 40,000 ops (`THREAD_BATCH_OPS`), and the socket's
 * backpressure instead of pauses.
 * The figures before and after are in docs/performance.md.
 *
 * The cost: SQLite has one writer at a time. A write on the main thread (the local stream, a
 * push, handle sync) that arrives during one of the worker's transactions waits for it (the
 * connection's busy timeout, `db/open.ts`), blocking the main thread for at most one transaction
 * (about 2 s at 40,000 ops on the benchmark machine, only while the public stream is caught up
 * from a backlog: live, its transactions hold what arrived in a moment). Deployments that cannot
 * accept that run `consumer:public` as its own process, where the same wait blocks nothing of the
 * API. (Letting the main thread take its turn between the thread's transactions, without blocking,
 * is the next step: a flag both threads share, so the thread waits before its next transaction.)
 *
 * The worker's log lines go through the main thread's logger (same format and level), its
 * status is mirrored for {@link ThreadedPublicConsumer.status}, and it publishes its
 * `consumer_status` row itself, as a consumer in another process does. A worker that fails
 * (an uncaught error) is logged, its status row says so, and it stops updating it, so `/healthz`
 * reports the consumer stale and answers 503: the operator's orchestrator restarts the index,
 * as it would after the same error on the main thread.
 *
 * @module
 */

import type { LogFields, Logger, LogLevel } from "../../../shared/log.ts";
import type { AppviewConfig } from "../../config.ts";
import { CONSUMER_PUBLIC } from "../../db/state.ts";
import type { StateStore } from "../../db/store.ts";
import type { JetstreamOptions } from "./jetstream.ts";
import type { StreamConsumerStatus } from "./stream_status.ts";

/** The first message to the worker. */
export interface PublicThreadStart {
  config: AppviewConfig;
  /** Structured-cloneable consumer options (no `random`). */
  options: JetstreamOptions;
}

/** A log line of the worker, written by the main thread's logger. */
export interface ThreadLogRecord {
  kind: "log";
  level: LogLevel;
  /** Child names below the logger given to {@link ThreadedPublicConsumer}. */
  path: string[];
  msg: string;
  fields?: LogFields;
}

/** What the worker posts. */
export type PublicThreadMessage =
  | ThreadLogRecord
  | { kind: "status"; status: StreamConsumerStatus }
  | { kind: "failed"; error: string }
  | { kind: "closed"; error?: string };

/** How long {@link ThreadedPublicConsumer.close} waits for the worker to stop cleanly. */
export const THREAD_CLOSE_TIMEOUT_MS = 15_000;

/** The public-stream consumer running in a worker thread (see the module notes). */
export class ThreadedPublicConsumer implements AsyncDisposable {
  readonly #config: AppviewConfig;
  readonly #options: JetstreamOptions;
  readonly #log: Logger;
  readonly #state: StateStore;
  #worker: Worker | null = null;
  #status: StreamConsumerStatus = {
    state: "connecting",
    cursor: null,
    lastEventAt: null,
    lastError: null,
  };
  #closed: (() => void) | null = null;
  #closing: Promise<void> | null = null;
  #failed = false;
  /** The status row write that records a failure (close waits for it). */
  #failWrite: Promise<void> = Promise.resolve();

  /**
   * `state` is the main thread's store state, used only to record a failure of the worker; `log`
   * writes the worker's lines.
   */
  constructor(config: AppviewConfig, options: JetstreamOptions, log: Logger, state: StateStore) {
    if ("random" in options) throw new TypeError("A threaded consumer takes no random source");
    this.#config = config;
    this.#options = options;
    this.#log = log;
    this.#state = state;
  }

  /** The worker's last reported status. */
  status(): StreamConsumerStatus {
    return { ...this.#status };
  }

  /** Whether the worker failed (its error was logged and recorded in the status row). */
  get failed(): boolean {
    return this.#failed;
  }

  /** Starts the worker, which connects from the stored cursor. */
  start(): void {
    if (this.#worker !== null) throw new Error("Public consumer thread already started");
    const worker = new Worker(new URL("./public_consumer_worker.ts", import.meta.url), {
      type: "module",
    });
    worker.onmessage = (event: MessageEvent<PublicThreadMessage>) => this.#onMessage(event.data);
    worker.onerror = (event: ErrorEvent) => {
      event.preventDefault();
      this.#fail(event.message);
    };
    worker.onmessageerror = () => this.#fail("the worker sent a message that cannot be read");
    this.#worker = worker;
    const start: PublicThreadStart = { config: this.#config, options: this.#options };
    worker.postMessage(start);
  }

  /** Stops the consumer (it applies what it received) and the worker. */
  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  async #close(): Promise<void> {
    const worker = this.#worker;
    if (worker === null) return;
    if (!this.#failed) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const closed = new Promise<void>((resolve) => (this.#closed = resolve));
      worker.postMessage("close");
      const timedOut = await Promise.race([
        closed.then(() => false),
        new Promise<boolean>((r) => (timer = setTimeout(() => r(true), THREAD_CLOSE_TIMEOUT_MS))),
      ]);
      clearTimeout(timer);
      if (timedOut) {
        this.#log.error("Public consumer thread did not stop in time; terminating it", {
          timeoutMs: THREAD_CLOSE_TIMEOUT_MS,
        });
      }
    }
    worker.terminate();
    this.#worker = null;
    await this.#failWrite;
  }

  #onMessage(msg: PublicThreadMessage): void {
    switch (msg.kind) {
      case "log": {
        let log = this.#log;
        for (const name of msg.path) log = log.child(name);
        log[msg.level](msg.msg, msg.fields);
        break;
      }
      case "status":
        this.#status = msg.status;
        break;
      case "failed":
        this.#fail(msg.error);
        break;
      case "closed":
        if (msg.error !== undefined) {
          this.#log.error("Public consumer thread failed to stop cleanly", { error: msg.error });
        }
        this.#closed?.();
        break;
    }
  }

  #fail(error: string): void {
    if (this.#failed) return;
    this.#failed = true;
    this.#log.error("Public consumer thread failed; /healthz will report it stale", { error });
    this.#status = { ...this.#status, state: "backoff", lastError: `thread failed: ${error}` };
    this.#failWrite = this.#state.writeConsumerStatus({
      name: CONSUMER_PUBLIC,
      state: this.#status.state,
      cursor: this.#status.cursor,
      lastEventAt: this.#status.lastEventAt,
      lastError: this.#status.lastError,
      updatedAt: new Date().toISOString(),
    }).catch((e) => this.#log.warn("Cannot write consumer status", { error: e }));
    this.#closed?.();
  }
}
