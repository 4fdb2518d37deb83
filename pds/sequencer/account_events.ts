/**
 * `#account` events (docs/protocol.md 6.2): sequenced in the durable stream like commits, at the
 * next seq, in one Deno KV atomic operation with the change they announce (the account record's
 * new status), checked against the seq head's versionstamp exactly as the sequencer checks it.
 * This module writes them without the in-process {@link Sequencer} queue, so the operator's
 * command line (another process on the same store) uses the very same code; the sequencer of a
 * running host sees the head moved, re-reads it and retries (its check fails once), and the
 * broadcaster finds the event by its head poll.
 *
 * The event is stored as a whole frame (header then body, `event_log.ts` `isStoredFrame`), so
 * replay and live broadcast send its bytes unchanged.
 *
 * @module
 */

import { encodeFrame } from "../../shared/frame.ts";
import { seqEventChunkKey, seqHeadKey } from "../store/keys.ts";
import { retryWhileLocked } from "./sequencer.ts";

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

/** How long to keep trying while other writers move the seq head (as the sequencer). */
const RETRY_MS = 5_000;

/**
 * Commits `fill`'s mutations with an `#account` event for `did` at the next seq. `prepare` is
 * called before each attempt (re-reading what `fill` checks); it returns the operation's fill,
 * or null to give up without writing (nothing to change). Resolves to the event, or null when
 * `prepare` gave up.
 */
export async function commitAccountEvent(
  kv: Deno.Kv,
  opts: {
    did: string;
    active: boolean;
    status?: AccountEventStatus;
    nowMs: number;
    prepare: () => Promise<((op: Deno.AtomicOperation) => void) | null>;
  },
): Promise<AccountEvent | null> {
  const deadline = Date.now() + RETRY_MS;
  for (let attempt = 0;; attempt++) {
    const fill = await opts.prepare();
    if (fill === null) return null;
    const head = await retryWhileLocked(() => kv.get<number>(seqHeadKey()));
    const seq = (head.value ?? 0) + 1;
    const event: AccountEvent = {
      seq,
      did: opts.did,
      time: new Date(opts.nowMs).toISOString(),
      active: opts.active,
      ...(opts.status === undefined ? {} : { status: opts.status }),
    };
    const op = kv.atomic();
    fill(op);
    op.check({ key: seqHeadKey(), versionstamp: head.versionstamp })
      .set(seqHeadKey(), seq)
      .set(seqEventChunkKey(seq, 0), encodeFrame({ op: 1, t: ACCOUNT_FRAME_TYPE }, event));
    if ((await retryWhileLocked(() => op.commit())).ok) return event;
    if (Date.now() > deadline) {
      throw new Error(`Account event for ${opts.did} lost ${attempt + 1} commit races`);
    }
    await new Promise((r) => setTimeout(r, Math.random() * Math.min(20, 1 + attempt)));
  }
}
