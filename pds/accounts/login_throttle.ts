/**
 * Failed-login throttling: a growing delay instead of a lockout, in three scopes.
 *
 * - per (client address, account): ten free failures, then 1 s doubling up to 15 minutes. One
 *   client guessing at one account slows to a few guesses an hour, and its failures do not
 *   touch other accounts (behind one proxy address, other members still log in).
 * - per account, from all addresses: fifty free failures, then 1 s doubling up to 5 minutes.
 *   Guesses spread over many addresses slow down; the owner waits at most the cap, never a
 *   lockout. Each address adds at most its free failures to this count, so an attacker hammering
 *   from one address (an IPv6 /64 is one) cannot make the owner wait at all.
 * - per client address, over all accounts: fifty free failures, then 1 s doubling up to 15
 *   minutes, against one address trying a password at many accounts.
 *
 * The account is its DID whatever identifier form names it (handle in any case, or DID); an
 * unknown identifier is counted under its normalised form, so it costs the same as a known one.
 * An attempt is counted when it begins, before the password hash, so concurrent attempts cannot
 * pass the count; a successful login is refunded (earlier failures still count, so a client
 * cannot clear its count by logging in to an account of its own).
 *
 * @module
 */

import { Backoff, type BackoffOptions } from "./backoff.ts";

/** Options of {@link LoginThrottle}: each scope's {@link BackoffOptions} over its defaults. */
export interface LoginThrottleOptions {
  pair?: Partial<BackoffOptions>;
  account?: Partial<BackoffOptions>;
  address?: Partial<BackoffOptions>;
}

/** Which count refused a login: the client's address, or the account over all addresses. */
export type LoginThrottleScope = "address" | "account";

/** A refused login: whole seconds to wait and the count that refused it. */
export interface LoginRefusal {
  retryAfter: number;
  scope: LoginThrottleScope;
}

/** A counted login attempt; report its outcome once the password was checked. */
export interface LoginAttempt {
  /** The password was wrong (or the account unknown): the delays run from now. */
  failed(nowMs: number): void;
  /** The password was right, or was never checked: this attempt no longer counts. */
  refund(): void;
}

const SECOND = 1000;
const MINUTE = 60 * SECOND;
const HOUR = 60 * MINUTE;

/** Default options of each scope. */
export const LOGIN_THROTTLE_DEFAULTS: Readonly<Record<keyof LoginThrottleOptions, BackoffOptions>> =
  Object.freeze({
    pair: { free: 10, baseMs: SECOND, capMs: 15 * MINUTE, forgetMs: HOUR, maxEntries: 10_000 },
    account: { free: 50, baseMs: SECOND, capMs: 5 * MINUTE, forgetMs: HOUR, maxEntries: 10_000 },
    address: { free: 50, baseMs: SECOND, capMs: 15 * MINUTE, forgetMs: HOUR, maxEntries: 10_000 },
  });

/** Longest identifier kept as a key (handles are at most 253 characters, hosted DIDs far less). */
const MAX_IDENTIFIER_KEY = 300;

/** Counts login attempts per (address, account), per account and per address. */
export class LoginThrottle {
  readonly #pairs: Backoff;
  readonly #accounts: Backoff;
  readonly #addresses: Backoff;

  constructor(opts: LoginThrottleOptions = {}) {
    this.#pairs = new Backoff({ ...LOGIN_THROTTLE_DEFAULTS.pair, ...opts.pair });
    this.#accounts = new Backoff({ ...LOGIN_THROTTLE_DEFAULTS.account, ...opts.account });
    this.#addresses = new Backoff({ ...LOGIN_THROTTLE_DEFAULTS.address, ...opts.address });
  }

  /**
   * Begins a login of `account` (see {@link accountKey}) from `address` (a client key, an IPv6
   * /64 as one): the refusal when it must wait, or the counted attempt.
   */
  begin(address: string, account: string, nowMs: number): LoginRefusal | LoginAttempt {
    const pair = `${address}\n${account}`;
    const byAddress = Math.max(
      this.#pairs.waitMs(pair, nowMs),
      this.#addresses.waitMs(address, nowMs),
    );
    const byAccount = this.#accounts.waitMs(account, nowMs);
    if (byAddress > 0 || byAccount > 0) {
      return byAddress >= byAccount
        ? { retryAfter: Math.ceil(byAddress / SECOND), scope: "address" }
        : { retryAfter: Math.ceil(byAccount / SECOND), scope: "account" };
    }
    // An address adds to the account's count only its free failures: beyond them its own delay
    // slows it, and the owner elsewhere is not made to wait for it.
    const addsToAccount = this.#pairs.attempts(pair, nowMs) < this.#pairs.options.free;
    this.#pairs.begin(pair, nowMs);
    this.#addresses.begin(address, nowMs);
    if (addsToAccount) this.#accounts.begin(account, nowMs);
    let settled = false;
    return {
      failed: (now) => {
        if (settled) return;
        settled = true;
        this.#pairs.fail(pair, now);
        this.#addresses.fail(address, now);
        if (addsToAccount) this.#accounts.fail(account, now);
      },
      refund: () => {
        if (settled) return;
        settled = true;
        this.#pairs.refund(pair);
        this.#addresses.refund(address);
        if (addsToAccount) this.#accounts.refund(account);
      },
    };
  }
}

/** True when {@link LoginThrottle.begin} refused the login. */
export function isLoginRefusal(x: LoginRefusal | LoginAttempt): x is LoginRefusal {
  return "retryAfter" in x;
}

/**
 * The key an account is counted under: its DID when the identifier names an account, else the
 * identifier trimmed, lower-cased and bounded.
 */
export function accountKey(did: string | null, identifier: string): string {
  if (did !== null) return did;
  return `?${identifier.trim().toLowerCase().slice(0, MAX_IDENTIFIER_KEY)}`;
}
