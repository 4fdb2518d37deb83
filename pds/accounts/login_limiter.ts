/**
 * Failed-login limiting. Failures are counted per (client address, normalised identifier) pair
 * and per identifier across all addresses: after `maxFailures` failures of one pair, or
 * `maxFailuresPerIdentifier` of one identifier, within `windowMs`, logins of that pair (or of that
 * identifier from anywhere) are refused (429) until the window that began with its first failure
 * ends. Keying by identifier means one client guessing passwords (or many clients behind one
 * reverse proxy address) cannot lock other accounts out, and the per-identifier count stops
 * guesses at one account spread over many addresses. A success does not reset a count, so an
 * attacker cannot interleave logins to a known account.
 *
 * In memory: per process, lost on restart. That bounds online guessing, which is its purpose.
 *
 * @module
 */

/** Options of {@link LoginLimiter}. */
export interface LoginLimiterOptions {
  /** Failures allowed per (address, identifier) pair per window (default 10). */
  maxFailures?: number;
  /** Failures allowed per identifier, from all addresses, per window (default 50). */
  maxFailuresPerIdentifier?: number;
  /** Window length in ms (default 15 minutes). */
  windowMs?: number;
  /**
   * Tracked pairs (and identifiers) before expired entries are swept (default 10,000); when all
   * are live, the tenth with the fewest failures (the newest among equals) is forgotten.
   */
  maxEntries?: number;
}

/** Which count refused a login. */
export type LoginLimitScope = "address" | "identifier";

/** Longest identifier kept as a key (handles are at most 253 characters, hosted DIDs far less). */
const MAX_IDENTIFIER_KEY = 300;

interface Entry {
  count: number;
  resetAt: number;
}

/** Counts failed logins per (address, identifier) pair and per identifier. */
export class LoginLimiter {
  readonly maxFailures: number;
  readonly maxFailuresPerIdentifier: number;
  readonly windowMs: number;
  #maxEntries: number;
  #pairs = new Map<string, Entry>();
  #identifiers = new Map<string, Entry>();

  constructor(opts: LoginLimiterOptions = {}) {
    this.maxFailures = opts.maxFailures ?? 10;
    this.maxFailuresPerIdentifier = opts.maxFailuresPerIdentifier ?? 50;
    this.windowMs = opts.windowMs ?? 15 * 60 * 1000;
    this.#maxEntries = opts.maxEntries ?? 10_000;
  }

  /**
   * Seconds until `address` may try `identifier` again and the count that refuses it, or null
   * when it may try now.
   */
  check(
    address: string,
    identifier: string,
    nowMs: number,
  ): { retryAfter: number; scope: LoginLimitScope } | null {
    const id = normalizeIdentifier(identifier);
    const byId = this.#retry(this.#identifiers, id, this.maxFailuresPerIdentifier, nowMs);
    const byPair = this.#retry(this.#pairs, pairKey(address, id), this.maxFailures, nowMs);
    if (byId === 0 && byPair === 0) return null;
    return byId >= byPair
      ? { retryAfter: byId, scope: "identifier" }
      : { retryAfter: byPair, scope: "address" };
  }

  /** Seconds until `address` may try `identifier` again, or 0 when it may try now. */
  retryAfterSeconds(address: string, identifier: string, nowMs: number): number {
    return this.check(address, identifier, nowMs)?.retryAfter ?? 0;
  }

  /** Records one failed login of `identifier` from `address`. */
  recordFailure(address: string, identifier: string, nowMs: number): void {
    const id = normalizeIdentifier(identifier);
    this.#bump(this.#identifiers, id, nowMs);
    this.#bump(this.#pairs, pairKey(address, id), nowMs);
  }

  #retry(map: Map<string, Entry>, key: string, max: number, nowMs: number): number {
    const entry = map.get(key);
    if (!entry) return 0;
    if (nowMs >= entry.resetAt) {
      map.delete(key);
      return 0;
    }
    return entry.count >= max ? Math.ceil((entry.resetAt - nowMs) / 1000) : 0;
  }

  #bump(map: Map<string, Entry>, key: string, nowMs: number): void {
    const entry = map.get(key);
    if (entry && nowMs < entry.resetAt) {
      entry.count++;
      return;
    }
    if (map.size >= this.#maxEntries) this.#sweep(map, nowMs);
    map.set(key, { count: 1, resetAt: nowMs + this.windowMs });
  }

  #sweep(map: Map<string, Entry>, nowMs: number): void {
    for (const [key, entry] of map) {
      if (nowMs >= entry.resetAt) map.delete(key);
    }
    if (map.size < this.#maxEntries) return;
    // Still full of live entries: forget a tenth of them, those with the fewest failures first
    // (the newest first among equals). Forgetting the oldest would let a client that sprays
    // failures at many identifiers wipe the count that locks the account it is guessing at.
    // The order only decides which of equal counts go; what bounds the attack is its cost: to
    // push out an account's count a spray needs thousands of identifiers at that count, each
    // failure paying a password hash, within the window.
    const entries = [...map];
    entries.sort(([, a], [, b]) => a.count - b.count || b.resetAt - a.resetAt);
    const forget = map.size - Math.floor(this.#maxEntries * 0.9);
    for (let i = 0; i < forget; i++) map.delete(entries[i][0]);
  }
}

/** The form an identifier is counted under: trimmed, lower-case, bounded. */
export function normalizeIdentifier(identifier: string): string {
  return identifier.trim().toLowerCase().slice(0, MAX_IDENTIFIER_KEY);
}

function pairKey(address: string, identifier: string): string {
  return `${address}\n${identifier}`;
}
