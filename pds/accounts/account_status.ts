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
