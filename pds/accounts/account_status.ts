/**
 * Account status (issue 37): `active`, `takendown` (by the operator) or `deactivated` (by the
 * member), stored on the account record (`status`, absent when active) and announced by an
 * `#account` event in the same atomic operation (`sequencer/account_events.ts`). A deleted
 * account has no record at all.
 *
 * @module
 */

import { accountKey, repoRootKey } from "../store/keys.ts";
import { type AccountEvent, accountEventSpec } from "../sequencer/account_events.ts";
import { commitFrameEvents, type FrameEventSpec } from "../sequencer/frame_events.ts";
import { identityEventSpec } from "../sequencer/identity_events.ts";
import { commitCar, syncEventSpec } from "../sequencer/sync_events.ts";
import type { BlockStore } from "../repo/block_store.ts";
import type { RepoRoot } from "../repo/repo_root.ts";
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
 *
 * A member's activation (`by: "member"`, `active`, with `blocks`) is announced as the reference
 * host announces it: `#identity` (the handle), `#account`, then `#sync` (the repository's current
 * commit) at consecutive seqs in the same operation (docs/behaviour.md 6.1 rule 10), so a
 * consumer that dropped the account while it was deactivated learns its handle and state again.
 */
export async function setAccountStatus(
  kv: Deno.Kv,
  did: string,
  opts: {
    status: AccountStatus;
    by: "operator" | "member";
    reason?: string;
    nowMs: number;
    blocks?: BlockStore;
  },
): Promise<StatusChange> {
  let refusal: StatusChange | null = null;
  const account = accountEventSpec(
    did,
    opts.status === "active",
    opts.status === "active" ? undefined : opts.status,
  );
  const activation = opts.status === "active" && opts.by === "member" &&
    opts.blocks !== undefined;
  let events: FrameEventSpec<unknown>[] = [account];
  const written = await commitFrameEvents<unknown>(kv, {
    label: `Account event for ${did}`,
    nowMs: opts.nowMs,
    // Read after each `prepare`, which decides them from what it read.
    get events() {
      return events;
    },
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
      const root = activation ? await kv.get<RepoRoot>(repoRootKey(did)) : null;
      events = [account];
      if (activation) {
        events = [identityEventSpec(did, entry.value.handle), account];
        if (root?.value != null) {
          const car = await commitCar(opts.blocks!, did, root.value);
          events.push(syncEventSpec(did, root.value.rev, car));
        }
      }
      return (op) => {
        op.check(entry).set(entry.key, next);
        // The #sync names this commit: a commit landing meanwhile makes the operation retry.
        if (root !== null) op.check(root);
      };
    },
  });
  if (written === null) return refusal!;
  const event = written.find((e): e is AccountEvent =>
    (e as { active?: unknown }).active !== undefined
  )!;
  return { changed: true, event };
}
