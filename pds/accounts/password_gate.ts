/**
 * A bound on concurrent password hashing. Each scrypt call takes tens of milliseconds of CPU and
 * 16 MiB; unauthenticated requests ask for them (sign-up, login, also with an unknown
 * identifier). At most `running` run at once and `waiting` queue behind them; beyond that a
 * request is refused at once ({@link GateFullError}) rather than queued without bound, so a flood
 * of logins cannot starve the rest of the host of CPU.
 *
 * @module
 */

import { ConcurrencyGate } from "../concurrency_gate.ts";
import { burnPasswordCheck, hashAppPassword, hashPassword, verifyPassword } from "./password.ts";

export { GateFullError } from "../concurrency_gate.ts";

/** The password operations that cost a hash. */
export interface PasswordWork {
  hash(password: string): Promise<string>;
  verify(password: string, stored: string): Promise<boolean>;
  /** The work of a check, for an unknown identifier (uniform timing). */
  burn(password: string): Promise<void>;
}

/** The real operations of `password.ts`. */
export const SCRYPT_WORK: PasswordWork = Object.freeze({
  hash: hashPassword,
  verify: verifyPassword,
  burn: burnPasswordCheck,
});

/** Options of {@link PasswordGate}. */
export interface PasswordGateOptions {
  /** Hashes computed at once. */
  running: number;
  /** Hashes waiting for a place. */
  waiting: number;
  /** The operations (default {@link SCRYPT_WORK}; tests substitute their own). */
  work?: PasswordWork;
}

/** {@link PasswordWork} through a {@link ConcurrencyGate}. */
export class PasswordGate implements PasswordWork {
  readonly #gate: ConcurrencyGate;
  readonly #work: PasswordWork;

  constructor(opts: PasswordGateOptions) {
    this.#gate = new ConcurrencyGate({ running: opts.running, waiting: opts.waiting });
    this.#work = opts.work ?? SCRYPT_WORK;
  }

  /** Hashes running now. */
  get active(): number {
    return this.#gate.active;
  }

  /** Hashes waiting now. */
  get queued(): number {
    return this.#gate.queued;
  }

  /** @throws {GateFullError} */
  hash(password: string): Promise<string> {
    return this.#gate.run(() => this.#work.hash(password));
  }

  /** @throws {GateFullError} */
  verify(password: string, stored: string): Promise<boolean> {
    return this.#gate.run(() => this.#work.verify(password, stored));
  }

  /** @throws {GateFullError} */
  burn(password: string): Promise<void> {
    return this.#gate.run(() => this.#work.burn(password));
  }

  /** An app password's hash (`hashAppPassword`, always scrypt). @throws {GateFullError} */
  hashAppPassword(did: string, password: string): Promise<string> {
    return this.#gate.run(() => hashAppPassword(did, password));
  }
}
