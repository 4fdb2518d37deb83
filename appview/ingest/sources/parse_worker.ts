/**
 * Stream messages parsed in a worker thread ({@link OffThreadParser}). A consumer's CPU goes to
 * two things: decoding frames and writing the index. On the main thread they add up; with the
 * cursor-independent part of decoding ({@link StreamParser}) in a worker, the two overlap on two
 * cores.
 *
 * - Messages are sent in batches (those that arrive in one turn of the event loop, at most
 *   {@link MAX_PARSE_BATCH}), because each message to a worker has a fixed cost.
 * - Results come back in the order the messages were pushed (one worker, first in first out).
 * - {@link OffThreadParser.reset} forgets everything in flight (the consumer dropped its
 *   connection and will resume from its stored cursor, so those messages come again).
 * - Messages go to the worker only once it has said it is ready (its module loaded). A worker
 *   that cannot start or load (e.g. no read permission for its module) is only logged: nothing
 *   was sent to it, and the consumer decodes on the main thread.
 * - If a ready worker fails, `onFailure` is called once and the parser is inactive from then on:
 *   the consumer decodes on the main thread and resumes from its cursor, so nothing in flight is
 *   lost.
 *
 * @module
 */

import type { Logger } from "../../../shared/log.ts";
import type { StreamParser } from "./stream_protocol.ts";

/** Most messages in one batch to the worker. */
export const MAX_PARSE_BATCH = 512;

/** A batch sent to a parse worker. */
export interface ParseRequest {
  id: number;
  frames: (string | ArrayBuffer)[];
  options: unknown;
}

/** A parse worker's answer to a {@link ParseRequest}. */
export interface ParseResult {
  id: number;
  /** The results, one per message, or their JSON text ({@link encodeParsed}). */
  parsed: unknown[] | string;
}

/**
 * The results of a batch as a parse worker posts them. Decoded events are plain JSON data (ops
 * with lex JSON records), and as JSON text they cost both threads less than as a structured
 * clone: in the stream bench, about 2% less CPU per frame. Anything else (a frame the
 * worker only describes, with values from the input that JSON may not carry exactly, or a value
 * JSON cannot encode at all, such as a BigInt) goes as the objects themselves.
 */
export function encodeParsed(parsed: unknown[]): unknown[] | string {
  if (!parsed.every(isEvent)) return parsed;
  try {
    return JSON.stringify(parsed);
  } catch {
    return parsed;
  }
}

function isEvent(result: unknown): boolean {
  return (result as { t?: unknown } | null)?.t === "event";
}

/** What a parse worker posts once, when its module has loaded. */
export const PARSE_WORKER_READY = { ready: true } as const;

/** Parses stream messages in a worker thread, delivering results in order. */
export class OffThreadParser {
  readonly #parser: StreamParser;
  readonly #deliver: (parsed: unknown[]) => void;
  readonly #onFailure: (reason: string) => void;
  readonly #log: Logger;
  #worker: Worker | null = null;
  /** The worker has posted {@link PARSE_WORKER_READY}. */
  #ready = false;
  #failed = false;
  #batch: (string | ArrayBuffer)[] = [];
  #flushTimer: ReturnType<typeof setTimeout> | null = null;
  #nextId = 0;
  /** Results of batches with a lower id are dropped (set by {@link reset}). */
  #firstValidId = 0;
  /** Batches sent and not answered. */
  #inFlight = 0;
  /** Messages in the batches sent and not answered, by batch id. */
  readonly #inFlightMessages = new Map<number, number>();
  #inFlightMessageCount = 0;
  #idleWaiters: (() => void)[] = [];

  constructor(opts: {
    parser: StreamParser;
    deliver: (parsed: unknown[]) => void;
    onFailure: (reason: string) => void;
    log: Logger;
  }) {
    this.#parser = opts.parser;
    this.#deliver = opts.deliver;
    this.#onFailure = opts.onFailure;
    this.#log = opts.log;
  }

  /** Messages pushed whose results are still to be delivered (queued or in the worker). */
  get pending(): number {
    return this.#batch.length + this.#inFlightMessageCount;
  }

  /** True while messages go to the worker (started, ready and not failed). */
  get active(): boolean {
    return this.#worker !== null && this.#ready && !this.#failed;
  }

  /**
   * Starts the worker; false when it cannot start. It becomes {@link active} once it reports
   * ready; until then (and for good if it never loads) the consumer decodes inline.
   */
  start(): boolean {
    if (this.#worker !== null || this.#failed) return !this.#failed;
    try {
      const worker = new Worker(this.#parser.workerUrl, { type: "module" });
      worker.onmessage = (event: MessageEvent<ParseResult | typeof PARSE_WORKER_READY>) => {
        if ("ready" in event.data) this.#onReady();
        else this.#onResult(event.data);
      };
      worker.onerror = (event: ErrorEvent) => {
        event.preventDefault();
        this.#fail(`Parse worker failed: ${event.message}`);
      };
      worker.onmessageerror = () => this.#fail("Parse worker sent a message that cannot be read");
      this.#worker = worker;
      return true;
    } catch (e) {
      this.#failed = true;
      this.#log.warn("Cannot start the parse worker; decoding on the main thread", { error: e });
      return false;
    }
  }

  /** Queues a message for parsing (sent at the end of this event-loop turn). */
  push(frame: string | ArrayBuffer): void {
    this.#batch.push(frame);
    if (this.#batch.length >= MAX_PARSE_BATCH) this.#flush();
    else this.#flushTimer ??= setTimeout(() => this.#flush(), 0);
  }

  /** Forgets the messages pushed so far: their results will not be delivered. */
  reset(): void {
    this.#batch = [];
    this.#firstValidId = this.#nextId;
    this.#inFlightMessages.clear();
    this.#inFlightMessageCount = 0;
  }

  /**
   * Resolves (at the latest after `ms`) once a started worker is ready or has failed and every
   * batch sent to it has been answered; sends what is queued first.
   */
  async settle(ms: number): Promise<void> {
    this.#flush();
    const starting = this.#worker !== null && !this.#ready && !this.#failed;
    if (!starting && (this.#inFlight === 0 || !this.active)) return;
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      new Promise<void>((r) => this.#idleWaiters.push(r)),
      new Promise<void>((r) => (timer = setTimeout(r, ms))),
    ]);
    clearTimeout(timer);
  }

  /** Stops the worker; nothing more is delivered. */
  close(): void {
    if (this.#flushTimer !== null) clearTimeout(this.#flushTimer);
    this.#flushTimer = null;
    this.#batch = [];
    this.#firstValidId = this.#nextId;
    this.#inFlightMessages.clear();
    this.#inFlightMessageCount = 0;
    this.#worker?.terminate();
    this.#worker = null;
    this.#wakeIdle();
  }

  #flush(): void {
    if (this.#flushTimer !== null) clearTimeout(this.#flushTimer);
    this.#flushTimer = null;
    if (this.#batch.length === 0 || !this.active) return;
    const frames = this.#batch;
    this.#batch = [];
    const request: ParseRequest = { id: this.#nextId++, frames, options: this.#parser.options };
    const transfer = frames.filter((f): f is ArrayBuffer => f instanceof ArrayBuffer);
    this.#inFlight++;
    this.#inFlightMessages.set(request.id, frames.length);
    this.#inFlightMessageCount += frames.length;
    this.#worker!.postMessage(request, transfer);
  }

  #onReady(): void {
    this.#ready = true;
    this.#flush();
    if (this.#inFlight === 0) this.#wakeIdle();
  }

  #onResult(result: ParseResult): void {
    this.#inFlight--;
    const messages = this.#inFlightMessages.get(result.id);
    if (messages !== undefined) {
      this.#inFlightMessages.delete(result.id);
      this.#inFlightMessageCount -= messages;
    }
    if (result.id >= this.#firstValidId && this.active) {
      const { parsed } = result;
      this.#deliver(typeof parsed === "string" ? JSON.parse(parsed) : parsed);
    }
    if (this.#inFlight === 0) this.#wakeIdle();
  }

  #fail(reason: string): void {
    if (this.#failed) return;
    this.#failed = true;
    // Before it was ready nothing was sent to it (unless pushed early): nothing to recover.
    const lost = this.#ready || this.#batch.length > 0;
    if (lost) {
      this.#log.error("Parse worker failed; decoding on the main thread from now on", { reason });
    } else {
      this.#log.warn("Cannot start the parse worker; decoding on the main thread", { reason });
    }
    this.#worker?.terminate();
    this.#worker = null;
    this.#batch = [];
    this.#inFlight = 0;
    this.#inFlightMessages.clear();
    this.#inFlightMessageCount = 0;
    this.#wakeIdle();
    if (lost) this.#onFailure(reason);
  }

  #wakeIdle(): void {
    const waiters = this.#idleWaiters;
    this.#idleWaiters = [];
    for (const wake of waiters) wake();
  }
}
