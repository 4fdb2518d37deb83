/**
 * `#identity` events (docs/protocol.md 6.2; docs/behaviour.md 6.1 rule 9): "resolve this DID
 * again", with the account's handle. Sequenced in the durable stream like commits, at the next
 * seq, in one Deno KV atomic operation with the change they announce (the handle), checked
 * against the seq head's versionstamp as the sequencer checks it; stored as a whole frame
 * (`event_log.ts` `isStoredFrame`), so replay and the live broadcast send its bytes unchanged. As
 * `account_events.ts`, this runs without the in-process sequencer queue: a running sequencer sees
 * the head moved, re-reads it and retries, and the broadcaster finds the event by its head poll.
 *
 * @module
 */

import { encodeFrame } from "../../shared/frame.ts";
import { seqEventChunkKey, seqHeadKey } from "../store/keys.ts";
import { retryWhileLocked } from "./sequencer.ts";

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

/** How long to keep trying while other writers move the seq head (as the sequencer). */
const RETRY_MS = 5_000;

/**
 * Commits `fill`'s mutations with an `#identity` event for `did` and `handle` at the next seq.
 * `prepare` is called before each attempt (re-reading what `fill` checks) and returns the
 * operation's fill. Resolves to the event.
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
  const deadline = Date.now() + RETRY_MS;
  for (let attempt = 0;; attempt++) {
    const fill = await opts.prepare();
    const head = await retryWhileLocked(() => kv.get<number>(seqHeadKey()));
    const seq = (head.value ?? 0) + 1;
    const event: IdentityEvent = {
      seq,
      did: opts.did,
      time: new Date(opts.nowMs).toISOString(),
      handle: opts.handle,
    };
    const op = kv.atomic();
    fill(op);
    op.check({ key: seqHeadKey(), versionstamp: head.versionstamp })
      .set(seqHeadKey(), seq)
      .set(seqEventChunkKey(seq, 0), encodeFrame({ op: 1, t: IDENTITY_FRAME_TYPE }, event));
    if ((await retryWhileLocked(() => op.commit())).ok) return event;
    if (Date.now() > deadline) {
      throw new Error(`Identity event for ${opts.did} lost ${attempt + 1} commit races`);
    }
    await new Promise((r) => setTimeout(r, Math.random() * Math.min(20, 1 + attempt)));
  }
}
