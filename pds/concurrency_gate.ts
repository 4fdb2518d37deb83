/**
 * A bound on concurrent expensive work (the `getRepo` export holds a whole repository in
 * memory): at most `running` tasks at once, at most `waiting` queued behind them in arrival
 * order; a task beyond both is refused at once ({@link GateFullError}) instead of queueing
 * without bound.
 *
 * @module
 */

/** Thrown by {@link ConcurrencyGate.run} when every running and waiting place is taken. */
export class GateFullError extends Error {
  override readonly name = "GateFullError";
}

/** Runs tasks with at most `running` at once and at most `waiting` queued. */
export class ConcurrencyGate {
  readonly running: number;
  readonly waiting: number;
  #active = 0;
  readonly #queue: (() => void)[] = [];

  constructor(opts: { running: number; waiting: number }) {
    if (!(opts.running >= 1) || !(opts.waiting >= 0)) {
      throw new RangeError(`Invalid gate: ${opts.running} running, ${opts.waiting} waiting`);
    }
    this.running = opts.running;
    this.waiting = opts.waiting;
  }

  /** Tasks running now. */
  get active(): number {
    return this.#active;
  }

  /** Tasks waiting for a place. */
  get queued(): number {
    return this.#queue.length;
  }

  /**
   * Runs `task` once a place is free and returns its result; see {@link acquire} for `signal`.
   *
   * @throws {GateFullError} at once when `running` tasks run and `waiting` wait.
   */
  async run<T>(task: () => Promise<T>, signal?: AbortSignal): Promise<T> {
    const release = await this.acquire(signal);
    try {
      return await task();
    } finally {
      release();
    }
  }

  /**
   * Takes a place once one is free and returns the function that gives it back (calling it
   * again does nothing): for work that outlives one function call, such as a response body
   * sent after its handler returned. When `signal` aborts while the caller still waits (say,
   * the client that asked went away), it leaves the queue and the call rejects with the
   * signal's reason.
   *
   * @throws {GateFullError} at once when `running` tasks run and `waiting` wait.
   */
  async acquire(signal?: AbortSignal): Promise<() => void> {
    signal?.throwIfAborted();
    if (this.#active < this.running) {
      this.#active++;
    } else if (this.#queue.length < this.waiting) {
      // A released place is handed over to the first waiter: #active stays as it is.
      await new Promise<void>((resolve, reject) => {
        if (!signal) return void this.#queue.push(resolve);
        const onAbort = () => {
          const i = this.#queue.indexOf(wake);
          if (i >= 0) this.#queue.splice(i, 1);
          reject(signal.reason);
        };
        const wake = () => {
          signal.removeEventListener("abort", onAbort);
          resolve();
        };
        signal.addEventListener("abort", onAbort, { once: true });
        this.#queue.push(wake);
      });
    } else {
      throw new GateFullError(
        `${this.#active} running and ${this.#queue.length} waiting (the most allowed)`,
      );
    }
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      const next = this.#queue.shift();
      if (next) next();
      else this.#active--;
    };
  }
}
