/**
 * Timestamp identifiers (TIDs) for record keys and commit revisions (spec 4.1 rule 2).
 *
 * A TID is a 64-bit integer: top bit 0, then 53 bits of microseconds since the Unix epoch, then a
 * 10-bit clock identifier. It is written big-endian in the "base32-sortable" alphabet
 * `234567abcdefghijklmnopqrstuvwxyz` as exactly 13 characters, so string order equals numeric
 * order. The first 11 characters hold the timestamp, the last 2 the clock identifier.
 *
 * The value is kept as two JS numbers (timestamp, clock id) instead of a BigInt: both parts are
 * exact in a double, and the encoding needs only integer division by 32.
 *
 * @module
 */

const ALPHABET = "234567abcdefghijklmnopqrstuvwxyz";
const DIGIT: Record<string, number> = Object.fromEntries(
  [...ALPHABET].map((c, i) => [c, i]),
);
const TID_RE = /^[234567abcdefghij][234567abcdefghijklmnopqrstuvwxyz]{12}$/;
/** Largest timestamp a TID can hold (53 bits). */
const MAX_MICROS = Number.MAX_SAFE_INTEGER;
const CLOCK_ID_LIMIT = 1024;

/** Thrown when a string is not a TID or a generator is misconfigured. */
export class TidError extends Error {
  /** Always `"TidError"`. */
  override readonly name = "TidError";
}

/** Options of {@link TidGenerator}. */
export interface TidGeneratorOptions {
  /** Clock in microseconds since the Unix epoch; defaults to `Date.now() * 1000`. */
  nowMicros?: () => number;
  /** Clock identifier in [0, 1023]; defaults to a random value in [0, 31]. */
  clockId?: number;
}

/**
 * A monotonic TID source: every `next()` result is strictly greater than the previous one, even
 * when the clock stalls or steps back, and even when many TIDs are drawn in one microsecond.
 *
 * When the clock value is not past the last TID, the generator bumps the timestamp part by one
 * microsecond and keeps its clock identifier. The clock identifier therefore never wraps, the
 * overflow always carries into the timestamp, and two generators with different clock
 * identifiers can never produce the same TID.
 *
 * @example
 * ```ts
 * const gen = new TidGenerator({ clockId: 7 });
 * const a = gen.next();
 * const b = gen.next();
 * console.assert(a < b);
 * ```
 */
export class TidGenerator {
  readonly #now: () => number;
  readonly #clockId: number;
  #lastMicros = -1;

  /** Creates a generator; see {@link TidGeneratorOptions}. */
  constructor(opts: TidGeneratorOptions = {}) {
    const clockId = opts.clockId ?? Math.floor(Math.random() * 32);
    if (!Number.isInteger(clockId) || clockId < 0 || clockId >= CLOCK_ID_LIMIT) {
      throw new TidError(`Clock id must be an integer in [0, 1023]: ${clockId}`);
    }
    this.#clockId = clockId;
    this.#now = opts.nowMicros ?? (() => Date.now() * 1000);
  }

  /** Returns a TID strictly greater than every TID this generator returned before. */
  next(): string {
    let micros = Math.floor(this.#now());
    if (!(micros > this.#lastMicros)) micros = this.#lastMicros + 1;
    if (micros > MAX_MICROS) throw new TidError(`TID timestamp overflows 53 bits: ${micros}`);
    this.#lastMicros = micros;
    return encodeTid(micros, this.#clockId);
  }

  /**
   * Returns a TID strictly greater than both `prev` (for example the last commit revision read
   * from storage, which may come from before a restart or a clock step) and every TID this
   * generator returned before.
   */
  nextAfter(prev: string): string {
    const prevMicros = tidTimestampMicros(prev);
    const prevClock = DIGIT[prev[11]] * 32 + DIGIT[prev[12]];
    // Same timestamp is enough when our clock id sorts after prev's.
    const floor = prevClock < this.#clockId ? prevMicros - 1 : prevMicros;
    if (floor > this.#lastMicros) this.#lastMicros = floor;
    return this.next();
  }
}

/**
 * Encodes a timestamp (microseconds, 0 to 2^53-1) and a clock identifier (0 to 1023) as a TID.
 *
 * @example
 * ```ts
 * encodeTid(1688137381887007, 6); // "3jzfcijpj2z2a"
 * ```
 */
export function encodeTid(micros: number, clockId: number): string {
  if (!Number.isSafeInteger(micros) || micros < 0) {
    throw new TidError(`TID timestamp must be an integer in [0, 2^53): ${micros}`);
  }
  if (!Number.isInteger(clockId) || clockId < 0 || clockId >= CLOCK_ID_LIMIT) {
    throw new TidError(`Clock id must be an integer in [0, 1023]: ${clockId}`);
  }
  let out = ALPHABET[clockId & 31];
  out = ALPHABET[clockId >> 5] + out;
  let n = micros;
  for (let i = 0; i < 11; i++) {
    const digit = n % 32;
    out = ALPHABET[digit] + out;
    n = (n - digit) / 32;
  }
  return out;
}

const processGenerator = new TidGenerator();

/** Returns the next TID of the process-wide generator (monotonic within the process). */
export function nextTid(): string {
  return processGenerator.next();
}

/**
 * Reports whether `s` is TID syntax: 13 base32-sortable characters, first one in `2-7a-j`.
 * Case-sensitive; the legacy dashed form is invalid.
 */
export function isValidTid(s: string): boolean {
  return typeof s === "string" && TID_RE.test(s);
}

/**
 * Returns the timestamp part of a TID in microseconds since the Unix epoch.
 *
 * @throws {TidError} when `tid` is not a TID or its timestamp does not fit 53 bits.
 */
export function tidTimestampMicros(tid: string): number {
  if (!isValidTid(tid)) throw new TidError(`Invalid TID: ${JSON.stringify(tid)}`);
  let n = 0;
  for (let i = 0; i < 11; i++) n = n * 32 + DIGIT[tid[i]];
  if (n > MAX_MICROS) throw new TidError(`TID timestamp overflows 53 bits: ${tid}`);
  return n;
}

/**
 * Returns the clock identifier (low 10 bits) of a TID.
 *
 * @throws {TidError} when `tid` is not a TID.
 */
export function tidClockId(tid: string): number {
  if (!isValidTid(tid)) throw new TidError(`Invalid TID: ${JSON.stringify(tid)}`);
  return DIGIT[tid[11]] * 32 + DIGIT[tid[12]];
}
