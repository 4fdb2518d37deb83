/**
 * `#account` events (docs/protocol.md 6.2): sent when an account is created (active) and on every
 * status change; sequenced in the durable stream like commits, in one
 * Deno KV atomic operation with the change they announce (the account record's new status), as a
 * whole frame (`frame_events.ts`).
 *
 * @module
 */

import { commitFrameEvent, type FrameEventSpec } from "./frame_events.ts";

/** Frame type of account events. */
export const ACCOUNT_FRAME_TYPE = "#account";

/** Statuses an `#account` event may carry here (docs/protocol.md 6.2). */
export type AccountEventStatus = "takendown" | "deactivated" | "deleted";

/** The `#account` frame body. */
export interface AccountEvent {
  seq: number;
  did: string;
  time: string;
  active: boolean;
  /** Absent when active. */
  status?: AccountEventStatus;
}

/**
 * The `#account` event of `did`, for `commitFrameEvents`: `{active: true}` for an active account,
 * else `{active: false, status}`.
 */
export function accountEventSpec(
  did: string,
  active: boolean,
  status?: AccountEventStatus,
): FrameEventSpec<AccountEvent> {
  return {
    type: ACCOUNT_FRAME_TYPE,
    build: (seq, time) => ({
      seq,
      did,
      time,
      active,
      ...(status === undefined ? {} : { status }),
    }),
  };
}

/**
 * Commits `fill`'s mutations with an `#account` event for `did` at the next seq
 * ({@link commitFrameEvent}). `prepare` returns the operation's fill, or null to give up without
 * writing (nothing to change). Resolves to the event, or null when `prepare` gave up.
 */
export function commitAccountEvent(
  kv: Deno.Kv,
  opts: {
    did: string;
    active: boolean;
    status?: AccountEventStatus;
    nowMs: number;
    prepare: () => Promise<((op: Deno.AtomicOperation) => void) | null>;
  },
): Promise<AccountEvent | null> {
  return commitFrameEvent<AccountEvent>(kv, {
    ...accountEventSpec(opts.did, opts.active, opts.status),
    label: `Account event for ${opts.did}`,
    nowMs: opts.nowMs,
    prepare: opts.prepare,
  });
}
