/**
 * A request rate limit per key (a client address): a token bucket of `perHour` tokens, refilled
 * continuously at `perHour` an hour. A burst of up to `perHour` requests passes; after that one
 * every `3600 / perHour` seconds. At most `maxEntries` keys are kept; a full bucket is forgotten.
 *
 * In memory: per process, lost on restart.
 *
 * @module
 */

const HOUR_MS = 60 * 60 * 1000;

interface Bucket {
  tokens: number;
  at: number;
}

/** Counts requests per key against an hourly rate. */
export class RateLimiter {
  readonly perHour: number;
  readonly #maxEntries: number;
  readonly #buckets = new Map<string, Bucket>();

  constructor(opts: { perHour: number; maxEntries?: number }) {
    if (!(opts.perHour >= 1)) throw new RangeError(`Invalid rate: ${opts.perHour} an hour`);
    this.perHour = opts.perHour;
    this.#maxEntries = Math.max(10, opts.maxEntries ?? 10_000);
  }

  /** Keys tracked now. */
  get size(): number {
    return this.#buckets.size;
  }

  /**
   * Takes one request of `key`: 0 when it may proceed (and is counted), else the whole seconds
   * until it may (nothing is counted).
   */
  take(key: string, nowMs: number): number {
    const tokens = this.#tokens(key, nowMs);
    if (tokens < 1) return Math.ceil(((1 - tokens) * HOUR_MS) / this.perHour / 1000);
    if (!this.#buckets.has(key) && this.#buckets.size >= this.#maxEntries) this.#sweep(nowMs);
    this.#buckets.set(key, { tokens: tokens - 1, at: nowMs });
    return 0;
  }

  #tokens(key: string, nowMs: number): number {
    const bucket = this.#buckets.get(key);
    if (!bucket) return this.perHour;
    const refill = (Math.max(0, nowMs - bucket.at) * this.perHour) / HOUR_MS;
    return Math.min(this.perHour, bucket.tokens + refill);
  }

  #sweep(nowMs: number): void {
    for (const key of this.#buckets.keys()) {
      if (this.#tokens(key, nowMs) >= this.perHour) this.#buckets.delete(key);
    }
    if (this.#buckets.size < this.#maxEntries) return;
    // Still full: forget the tenth with the most tokens left (the least limited clients).
    const entries = [...this.#buckets.keys()].map((k) => [k, this.#tokens(k, nowMs)] as const);
    entries.sort(([, a], [, b]) => b - a);
    const forget = this.#buckets.size - Math.floor(this.#maxEntries * 0.9);
    for (let i = 0; i < forget; i++) this.#buckets.delete(entries[i][0]);
  }
}
