/**
 * A growing delay per key: after `free` counted attempts, each further attempt must wait a delay
 * that starts at `baseMs` and doubles per attempt up to `capMs`, measured from the key's last
 * attempt. Attempts are counted when they begin (so concurrent ones cannot slip past the count)
 * and a successful one is refunded. A key idle for `forgetMs` is forgotten; at most `maxEntries`
 * keys are kept.
 *
 * In memory: per process, lost on restart. That bounds online guessing, which is its purpose.
 *
 * @module
 */

/** Options of {@link Backoff}. */
export interface BackoffOptions {
  /** Attempts allowed without a delay. */
  free: number;
  /** First delay in ms; each further attempt doubles it. */
  baseMs: number;
  /** Longest delay in ms. */
  capMs: number;
  /** A key whose last attempt is this old (ms, at least `capMs`) is forgotten. */
  forgetMs: number;
  /**
   * Tracked keys before idle ones are swept; when all are live, the tenth with the fewest
   * attempts (the newest among equals) is forgotten.
   */
  maxEntries: number;
}

interface Entry {
  count: number;
  lastAt: number;
}

/** Counts attempts per key and says how long the next one must wait. */
export class Backoff {
  readonly options: Readonly<BackoffOptions>;
  #entries = new Map<string, Entry>();

  constructor(options: BackoffOptions) {
    if (!(options.free >= 0 && options.baseMs > 0 && options.capMs >= options.baseMs)) {
      throw new RangeError(`Invalid backoff: ${JSON.stringify(options)}`);
    }
    if (!(options.forgetMs >= options.capMs && options.maxEntries >= 10)) {
      throw new RangeError(`Invalid backoff: ${JSON.stringify(options)}`);
    }
    this.options = Object.freeze({ ...options });
  }

  /** Keys tracked now. */
  get size(): number {
    return this.#entries.size;
  }

  /** Attempts counted for `key` (0 when unknown or forgotten). */
  attempts(key: string, nowMs: number): number {
    return this.#live(key, nowMs)?.count ?? 0;
  }

  /** Milliseconds `key` must wait before its next attempt (0: it may try now). */
  waitMs(key: string, nowMs: number): number {
    const entry = this.#live(key, nowMs);
    if (!entry) return 0;
    return Math.max(0, entry.lastAt + this.delayMs(entry.count) - nowMs);
  }

  /** The delay after `count` attempts. */
  delayMs(count: number): number {
    const { free, baseMs, capMs } = this.options;
    if (count < free) return 0;
    const doublings = count - free;
    return doublings >= 52 ? capMs : Math.min(capMs, baseMs * 2 ** doublings);
  }

  /** Counts one attempt of `key` beginning now. */
  begin(key: string, nowMs: number): void {
    const entry = this.#live(key, nowMs);
    if (entry) {
      entry.count++;
      entry.lastAt = Math.max(entry.lastAt, nowMs);
      return;
    }
    if (this.#entries.size >= this.options.maxEntries) this.#sweep(nowMs);
    this.#entries.set(key, { count: 1, lastAt: nowMs });
  }

  /** A counted attempt failed now: the delay runs from here. */
  fail(key: string, nowMs: number): void {
    const entry = this.#entries.get(key);
    if (entry) entry.lastAt = Math.max(entry.lastAt, nowMs);
  }

  /** A counted attempt succeeded: it no longer counts (earlier failures still do). */
  refund(key: string): void {
    const entry = this.#entries.get(key);
    if (!entry) return;
    if (entry.count <= 1) this.#entries.delete(key);
    else entry.count--;
  }

  #live(key: string, nowMs: number): Entry | undefined {
    const entry = this.#entries.get(key);
    if (entry && nowMs - entry.lastAt >= this.options.forgetMs) {
      this.#entries.delete(key);
      return undefined;
    }
    return entry;
  }

  #sweep(nowMs: number): void {
    const { forgetMs, maxEntries } = this.options;
    for (const [key, entry] of this.#entries) {
      if (nowMs - entry.lastAt >= forgetMs) this.#entries.delete(key);
    }
    if (this.#entries.size < maxEntries) return;
    // Still full of live entries: forget a tenth of them, those with the fewest attempts first
    // (the newest first among equals). Forgetting the oldest would let a client that sprays
    // failures at many keys wipe the count of the one it is guessing at; to push out a count a
    // spray needs thousands of keys at that count, each attempt paying a password hash.
    const entries = [...this.#entries];
    entries.sort(([, a], [, b]) => a.count - b.count || b.lastAt - a.lastAt);
    const forget = this.#entries.size - Math.floor(maxEntries * 0.9);
    for (let i = 0; i < forget; i++) this.#entries.delete(entries[i][0]);
  }
}
