/**
 * Failed-login limiting per client address: after `maxFailures` failed logins within `windowMs`
 * an address is refused (429) until the window that began with its first failure ends. A success
 * does not reset the count, so an attacker cannot interleave logins to a known account.
 *
 * In memory: per process, lost on restart. That bounds online guessing, which is its purpose.
 *
 * @module
 */

/** Options of {@link LoginLimiter}. */
export interface LoginLimiterOptions {
  /** Failures allowed per window (default 10). */
  maxFailures?: number;
  /** Window length in ms (default 15 minutes). */
  windowMs?: number;
  /** Tracked addresses before expired entries are swept (default 10,000). */
  maxEntries?: number;
}

/** Counts failed logins per address. */
export class LoginLimiter {
  readonly maxFailures: number;
  readonly windowMs: number;
  #maxEntries: number;
  #entries = new Map<string, { count: number; resetAt: number }>();

  constructor(opts: LoginLimiterOptions = {}) {
    this.maxFailures = opts.maxFailures ?? 10;
    this.windowMs = opts.windowMs ?? 15 * 60 * 1000;
    this.#maxEntries = opts.maxEntries ?? 10_000;
  }

  /** Seconds until `address` may try again, or 0 when it may try now. */
  retryAfterSeconds(address: string, nowMs: number): number {
    const entry = this.#entries.get(address);
    if (!entry) return 0;
    if (nowMs >= entry.resetAt) {
      this.#entries.delete(address);
      return 0;
    }
    return entry.count >= this.maxFailures ? Math.ceil((entry.resetAt - nowMs) / 1000) : 0;
  }

  /** Records one failed login of `address`. */
  recordFailure(address: string, nowMs: number): void {
    const entry = this.#entries.get(address);
    if (entry && nowMs < entry.resetAt) {
      entry.count++;
      return;
    }
    if (this.#entries.size >= this.#maxEntries) this.#sweep(nowMs);
    this.#entries.set(address, { count: 1, resetAt: nowMs + this.windowMs });
  }

  #sweep(nowMs: number): void {
    for (const [address, entry] of this.#entries) {
      if (nowMs >= entry.resetAt) this.#entries.delete(address);
    }
    // Still full of live entries: forget the oldest rather than grow without bound.
    while (this.#entries.size >= this.#maxEntries) {
      const oldest = this.#entries.keys().next().value;
      if (oldest === undefined) break;
      this.#entries.delete(oldest);
    }
  }
}
