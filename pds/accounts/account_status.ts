/**
 * Account status (issue 37): `active`, `takendown` (by the operator) or `deactivated` (by the
 * member), stored on the account record (`status`, absent when active) and announced by an
 * `#account` event in the same atomic operation (`sequencer/account_events.ts`). A deleted
 * account has no record at all.
 *
 * @module
 */

import { accountKey } from "../store/keys.ts";
import { type AccountEvent, commitAccountEvent } from "../sequencer/account_events.ts";
import type { Account } from "./accounts.ts";

/** The states an existing account is in. */
export type AccountStatus = "active" | "takendown" | "deactivated";

/** An account record with its status fields (absent on accounts never taken down). */
export interface AccountWithStatus extends Account {
  /** Absent: active. */
  status?: "takendown" | "deactivated";
  /** The operator's reason for a takedown (never shown to the member or the network). */
  takedownReason?: string;
}

/** The status of a stored account. */
export function accountStatus(account: Account): AccountStatus {
  return (account as AccountWithStatus).status ?? "active";
}

/** Most accounts whose status {@link AccountStatusCache} keeps (then it starts again). */
const STATUS_CACHE_LIMIT = 10_000;

/**
 * The status of each account, read once from the store and kept, for the check every
 * authenticated request makes (`xrpc/account_state.ts`). Reading the account record on every
 * request cost the account host about 0.3 ms of CPU per `createRecord` (`deno task bench commits`:
 * 1,600-1,700 commits/s and 0.72-0.76 ms of host CPU each, against 2,600-2,900 and 0.46-0.54 ms
 * without the read). A status change is sequenced as an `#account` event, so it reaches the cache
 * in one of two ways: {@link invalidate} right after an in-process change, and the broadcaster's
 * reading of every event (`sequencer/services.ts`), which also sees the changes another process
 * made (the operator's `deno task admin`) within its 25 ms head poll.
 */
export class AccountStatusCache {
  readonly #kv: Deno.Kv;
  /** Null: no such account. */
  readonly #entries = new Map<string, AccountStatus | null>();
  /** Bumped by every invalidation, so that a read that raced one does not store a stale value. */
  #generation = 0;

  constructor(kv: Deno.Kv) {
    this.#kv = kv;
  }

  /** The account's status, or null when there is no such account. */
  async get(did: string): Promise<AccountStatus | null> {
    const cached = this.#entries.get(did);
    if (cached !== undefined) return cached;
    const generation = this.#generation;
    const account = (await this.#kv.get<Account>(accountKey(did))).value;
    const status = account === null ? null : accountStatus(account);
    if (generation === this.#generation) {
      if (this.#entries.size >= STATUS_CACHE_LIMIT) this.#entries.clear();
      this.#entries.set(did, status);
    }
    return status;
  }

  /** Forgets what is known of `did` (its status changed, or it was deleted). */
  invalidate(did: string): void {
    this.#generation++;
    this.#entries.delete(did);
  }
}

/** The result of {@link setAccountStatus}. */
export type StatusChange =
  | { changed: true; event: AccountEvent }
  | { changed: false; reason: "unknown" | "unchanged" | "takendown" };

/**
 * Moves the account `did` to `status` and sequences its `#account` event, in one atomic
 * operation. A takedown overrides deactivation; `deactivated`/`active` from the member never
 * lift a takedown (`reason: "takendown"`); setting the current status changes nothing.
 */
export async function setAccountStatus(
  kv: Deno.Kv,
  did: string,
  opts: { status: AccountStatus; by: "operator" | "member"; reason?: string; nowMs: number },
): Promise<StatusChange> {
  let refusal: StatusChange | null = null;
  const event = await commitAccountEvent(kv, {
    did,
    active: opts.status === "active",
    ...(opts.status === "active" ? {} : { status: opts.status }),
    nowMs: opts.nowMs,
    prepare: async () => {
      const entry = await kv.get<AccountWithStatus>(accountKey(did));
      if (entry.value === null) {
        refusal = { changed: false, reason: "unknown" };
        return null;
      }
      const current = accountStatus(entry.value);
      if (opts.by === "member" && current === "takendown") {
        refusal = { changed: false, reason: "takendown" };
        return null;
      }
      if (current === opts.status) {
        refusal = { changed: false, reason: "unchanged" };
        return null;
      }
      const { status: _s, takedownReason: _r, ...rest } = entry.value;
      const next: AccountWithStatus = opts.status === "active" ? rest : {
        ...rest,
        status: opts.status,
        ...(opts.reason === undefined ? {} : { takedownReason: opts.reason }),
      };
      return (op) => op.check(entry).set(entry.key, next);
    },
  });
  return event === null ? refusal! : { changed: true, event };
}
