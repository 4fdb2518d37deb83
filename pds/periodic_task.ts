/**
 * A background job run at start and then every interval, one run at a time, its failures
 * logged rather than thrown (the event retention and the blob sweep).
 *
 * @module
 */

import type { Logger } from "../shared/log.ts";

/** Runs `run` now and every `intervalMs` until closed. */
export class PeriodicTask {
  readonly #run: () => Promise<void>;
  readonly #intervalMs: number;
  readonly #log: Logger;
  readonly #failure: string;
  #timer: ReturnType<typeof setInterval> | null = null;
  #running: Promise<void> | null = null;

  /** `failure` is the warning logged (with the error) when a run throws. */
  constructor(
    opts: { run: () => Promise<void>; intervalMs: number; log: Logger; failure: string },
  ) {
    this.#run = opts.run;
    this.#intervalMs = opts.intervalMs;
    this.#log = opts.log;
    this.#failure = opts.failure;
  }

  /** Starts the periodic runs (the first one right away). */
  start(): void {
    if (this.#timer !== null) return;
    this.#timer = setInterval(() => this.runOnce(), this.#intervalMs);
    this.runOnce();
  }

  /** Runs once now, unless a run is in progress (then waits for that one). */
  runOnce(): Promise<void> {
    this.#running ??= (async () => {
      try {
        await this.#run();
      } catch (err) {
        this.#log.warn(this.#failure, { error: err });
      } finally {
        this.#running = null;
      }
    })();
    return this.#running;
  }

  /** Stops the timer and waits for a run in progress. */
  async close(): Promise<void> {
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#timer = null;
    await this.#running;
  }
}
