/**
 * A stream consumer's published state: its row in `consumer_status` (for `/healthz`, also when
 * the consumer runs in its own process), written on every state change, at most every
 * {@link STATUS_INTERVAL_MS} while events flow, and at least every {@link STATUS_HEARTBEAT_MS} as a
 * heartbeat. Writes go out one at a time, in the order they were made (a row is never overwritten
 * by an older one); {@link StatusPublisher.flush} waits for them.
 *
 * @module
 */

import type { Logger } from "../../../shared/log.ts";
import type { AppviewContext } from "../../context.ts";
import type { ConsumerState } from "../../db/state.ts";

/** Status rows are written on every state change and at most this often while live. */
export const STATUS_INTERVAL_MS = 1_000;
/** A running consumer rewrites its status row at least this often (a heartbeat for `/healthz`). */
export const STATUS_HEARTBEAT_MS = 10_000;

/** Snapshot of a consumer's state, as written to `consumer_status`. */
export interface StreamConsumerStatus {
  state: ConsumerState;
  cursor: number | null;
  lastEventAt: string | null;
  lastError: string | null;
}

/** The state a consumer shows, and the writing of its `consumer_status` row. */
export class StatusPublisher {
  readonly #ctx: AppviewContext;
  readonly #consumer: string;
  readonly #log: Logger;
  #state: ConsumerState = "connecting";
  /** The stream cursor applied so far. */
  cursor: number | null = null;
  lastEventAt: string | null = null;
  lastError: string | null = null;
  /** Something changed since the row was last written. */
  dirty = false;
  #writtenAt = -Infinity;
  #timer: ReturnType<typeof setInterval> | null = null;
  /** The last row write made: the next one starts after it. */
  #writing: Promise<void> = Promise.resolve();

  constructor(ctx: AppviewContext, consumer: string, log: Logger) {
    this.#ctx = ctx;
    this.#consumer = consumer;
    this.#log = log;
  }

  /** Current state (the same values the status row holds). */
  snapshot(): StreamConsumerStatus {
    return {
      state: this.#state,
      cursor: this.cursor,
      lastEventAt: this.lastEventAt,
      lastError: this.lastError,
    };
  }

  /** Starts the periodic write (changes while live, and the heartbeat). */
  start(): void {
    this.#timer = setInterval(() => this.write(false), STATUS_INTERVAL_MS);
  }

  /** Stops the periodic write. */
  stop(): void {
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#timer = null;
  }

  setState(state: ConsumerState): void {
    if (state === this.#state && this.#writtenAt > -Infinity) return;
    this.#state = state;
    this.write(true);
  }

  write(force: boolean): void {
    const now = performance.now();
    const since = now - this.#writtenAt;
    if (
      !force && !(this.dirty && since >= STATUS_INTERVAL_MS) && since < STATUS_HEARTBEAT_MS
    ) {
      return;
    }
    const row = {
      name: this.#consumer,
      state: this.#state,
      cursor: this.cursor,
      lastEventAt: this.lastEventAt,
      lastError: this.lastError,
      updatedAt: this.#ctx.now().toISOString(),
    };
    const dirty = this.dirty;
    const writtenAt = this.#writtenAt;
    this.dirty = false;
    this.#writtenAt = now;
    this.#writing = this.#writing.then(() => this.#ctx.store.state.writeConsumerStatus(row)).catch(
      (e) => {
        // A busy database only delays the status row; the next tick retries.
        this.#log.warn("Cannot write consumer status", { error: e });
        if (this.#writtenAt !== now) return; // a later write was made meanwhile
        this.dirty ||= dirty;
        this.#writtenAt = writtenAt;
      },
    );
  }

  /** Resolves once every row write made so far is done (or failed and was logged). */
  flush(): Promise<void> {
    return this.#writing;
  }
}

/** Writes the status row of a consumer that is not configured (e.g. no Jetstream URL). */
export function writeDisabledStatus(ctx: AppviewContext, consumer: string): Promise<void> {
  return ctx.store.state.writeConsumerStatus({
    name: consumer,
    state: "disabled",
    cursor: null,
    lastEventAt: null,
    lastError: null,
    updatedAt: ctx.now().toISOString(),
  });
}
