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
   * Runs `task` once a place is free and returns its result.
   *
   * @throws {GateFullError} at once when `running` tasks run and `waiting` wait.
   */
  async run<T>(task: () => Promise<T>): Promise<T> {
    if (this.#active < this.running) {
      this.#active++;
    } else if (this.#queue.length < this.waiting) {
      // The finishing task hands its place over: #active stays as it is.
      await new Promise<void>((resolve) => this.#queue.push(resolve));
    } else {
      throw new GateFullError(
        `${this.#active} running and ${this.#queue.length} waiting (the most allowed)`,
      );
    }
    try {
      return await task();
    } finally {
      const next = this.#queue.shift();
      if (next) next();
      else this.#active--;
    }
  }
}
