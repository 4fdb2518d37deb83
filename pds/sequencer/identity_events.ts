/**
 * `#identity` events (docs/protocol.md 6.2; docs/behaviour.md 6.1 rule 9): "resolve this DID
 * again", with the account's handle: sent when an account is created and when its handle changes. Sequenced in the durable stream like commits, in one Deno KV
 * atomic operation with the change they announce (the handle), as a whole frame
 * (`frame_events.ts`).
 *
 * @module
 */

import { commitFrameEvent, type FrameEventSpec } from "./frame_events.ts";

/** Frame type of identity events. */
export const IDENTITY_FRAME_TYPE = "#identity";

/** The `#identity` frame body. */
export interface IdentityEvent {
  seq: number;
  did: string;
  time: string;
  /** The account's current handle. */
  handle: string;
}

/** The `#identity` event of `did` with `handle`, for `commitFrameEvents`. */
export function identityEventSpec(did: string, handle: string): FrameEventSpec<IdentityEvent> {
  return { type: IDENTITY_FRAME_TYPE, build: (seq, time) => ({ seq, did, time, handle }) };
}

/**
 * Commits `fill`'s mutations with an `#identity` event for `did` and `handle` at the next seq
 * ({@link commitFrameEvent}). `prepare` is called before each attempt (re-reading what `fill`
 * checks) and returns the operation's fill. Resolves to the event.
 */
export async function commitIdentityEvent(
  kv: Deno.Kv,
  opts: {
    did: string;
    handle: string;
    nowMs: number;
    prepare: () => Promise<(op: Deno.AtomicOperation) => void>;
  },
): Promise<IdentityEvent> {
  const event = await commitFrameEvent<IdentityEvent>(kv, {
    ...identityEventSpec(opts.did, opts.handle),
    label: `Identity event for ${opts.did}`,
    nowMs: opts.nowMs,
    prepare: opts.prepare,
  });
  return event!; // prepare never gives up
}
