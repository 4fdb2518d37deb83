/**
 * A background job run at start and then every interval, one run at a time, its failures
 * logged rather than thrown (the event retention and the blob sweep). Closing stops a run in
 * progress at its next safe point (the run watches the signal it is given), so shutdown does not
 * wait for a sweep over the whole store.
 *
 * @module
 */

import type { Logger } from "../shared/log.ts";

/** Runs `run` now and every `intervalMs` until closed. */
export class PeriodicTask {
  readonly #run: (signal: AbortSignal) => Promise<void>;
  #stop = new AbortController();
  readonly #intervalMs: number;
  readonly #log: Logger;
  readonly #failure: string;
  #timer: ReturnType<typeof setInterval> | null = null;
  #running: Promise<void> | null = null;

  /** `failure` is the warning logged (with the error) when a run throws. */
  constructor(
    opts: {
      run: (signal: AbortSignal) => Promise<void>;
      intervalMs: number;
      log: Logger;
      failure: string;
    },
  ) {
    this.#run = opts.run;
    this.#intervalMs = opts.intervalMs;
    this.#log = opts.log;
    this.#failure = opts.failure;
  }

  /** Starts the periodic runs (the first one right away). */
  start(): void {
    if (this.#timer !== null) return;
    if (this.#stop.signal.aborted) this.#stop = new AbortController(); // started again
    this.#timer = setInterval(() => this.runOnce(), this.#intervalMs);
    this.runOnce();
  }

  /** Runs once now, unless a run is in progress (then waits for that one). */
  runOnce(): Promise<void> {
    this.#running ??= (async () => {
      try {
        await this.#run(this.#stop.signal);
      } catch (err) {
        this.#log.warn(this.#failure, { error: err });
      } finally {
        this.#running = null;
      }
    })();
    return this.#running;
  }

  /** Stops the timer, tells a run in progress to stop and waits for it. */
  async close(): Promise<void> {
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#timer = null;
    this.#stop.abort();
    await this.#running;
  }
}
