/**
 * At most one log line per client address per interval, for events a client can repeat at will
 * (a wrong ingest secret): the first is logged, the repeats within the interval are counted and
 * reported with the next line. The table is bounded; when full, the address seen longest ago is
 * forgotten (so a flood of new addresses cannot silence the log, only make it log again).
 *
 * @module
 */

/** Default spacing of lines per address. */
export const LOG_INTERVAL_MS = 60_000;
/** Default most addresses remembered. */
export const MAX_LOGGED_ADDRESSES = 1_000;

interface Seen {
  at: number;
  suppressed: number;
}

/** Decides which events of an address are logged. */
export class AddressLogLimiter {
  readonly #intervalMs: number;
  readonly #max: number;
  readonly #now: () => number;
  readonly #seen = new Map<string, Seen>();

  constructor(opts: { intervalMs?: number; maxAddresses?: number; now?: () => number } = {}) {
    this.#intervalMs = opts.intervalMs ?? LOG_INTERVAL_MS;
    this.#max = opts.maxAddresses ?? MAX_LOGGED_ADDRESSES;
    this.#now = opts.now ?? Date.now;
  }

  /** Addresses remembered (for tests of the bound). */
  get size(): number {
    return this.#seen.size;
  }

  /**
   * Null when this event of `address` is not to be logged; otherwise how many events of it were
   * not logged since its last line.
   */
  admit(address: string): number | null {
    const now = this.#now();
    const seen = this.#seen.get(address);
    if (seen !== undefined && now - seen.at < this.#intervalMs) {
      seen.suppressed++;
      return null;
    }
    const suppressed = seen?.suppressed ?? 0;
    this.#seen.delete(address);
    if (this.#seen.size >= this.#max) this.#seen.delete(this.#seen.keys().next().value!);
    this.#seen.set(address, { at: now, suppressed: 0 });
    return suppressed;
  }
}
