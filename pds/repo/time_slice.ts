/**
 * Cooperative time slicing for the account host's long synchronous loops over a whole
 * repository (the `getRepo` export, compaction): one JavaScript thread serves every request, and
 * a 20,000-record repository took 280 ms of it in one piece. Such a loop asks {@link
 * TimeSlicer.due} on each step and, once a slice of work has passed, awaits {@link
 * TimeSlicer.next}: one turn of the event loop, in which other requests run.
 *
 * @module
 */

/**
 * Work between two turns of the event loop (ms). A turn costs about 2 ms (`setTimeout(0)`; the
 * cheaper `setImmediate` lets timers run but not incoming requests).
 */
export const SLICE_MS = 10;
/** The slice new slicers use (tests shorten it to make slicing happen on small repositories). */
export const timeSlicing = { ms: SLICE_MS };
/** Steps between two clock reads. */
const STEPS_PER_CHECK = 8;

/**
 * How a long loop shares the main thread: slices of `sliceMs` of work (default
 * {@link timeSlicing}`.ms`), each followed by `restMs` in which only the event loop runs
 * (default 0: one turn). With `signal`, {@link TimeSlicer.next} throws the signal's reason once
 * it is aborted (the loop stops at its next rest).
 */
export interface Pace {
  sliceMs?: number;
  restMs?: number;
  signal?: AbortSignal;
}

/**
 * The pace of maintenance no request asks for (automatic compaction; the account's own writes
 * still wait for it, as it runs in the repository's serialised section): about a third of the
 * main thread (the clock is read every 8 steps, and some steps, such as reading a page of stored
 * commits, are not divided). Under 1,000 createRecord/s the requests need about 55-65% of it,
 * and a compaction in 10 ms slices with one turn between them took most of the rest: each one
 * held requests back for 60-200 ms.
 */
export const BACKGROUND_PACE: Required<Omit<Pace, "signal">> = { sliceMs: 4, restMs: 8 };

/** Tells a long loop when to let the event loop run. */
export class TimeSlicer {
  readonly #sliceMs: number;
  readonly #restMs: number;
  readonly #signal: AbortSignal | undefined;
  #start = performance.now();
  #steps = 0;

  constructor(pace?: Pace) {
    this.#sliceMs = pace?.sliceMs ?? timeSlicing.ms;
    this.#restMs = pace?.restMs ?? 0;
    this.#signal = pace?.signal;
  }

  /** Whether the current slice is used up (checks the clock every 8 steps). */
  due(): boolean {
    if (++this.#steps < STEPS_PER_CHECK) return false;
    this.#steps = 0;
    return performance.now() - this.#start >= this.#sliceMs;
  }

  /**
   * Waits the pace's rest (at least one turn of the event loop), then starts a new slice.
   *
   * @throws the pace's `signal` reason when it was aborted
   */
  async next(): Promise<void> {
    await new Promise<void>((resolve) => setTimeout(resolve, this.#restMs));
    this.#signal?.throwIfAborted();
    this.#start = performance.now();
    this.#steps = 0;
  }
}
