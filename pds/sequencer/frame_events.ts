/**
 * Events sequenced as whole frames (`#account`, `#identity`; docs/protocol.md 6.2): at the next
 * seq, in one Deno KV atomic operation with the change they announce, checked against the seq
 * head's versionstamp exactly as the sequencer checks it. Written without the in-process
 * {@link Sequencer} queue, so the operator's command line (another process on the same store)
 * uses the very same code; the sequencer of a running host sees the head moved, re-reads it and
 * retries (its check fails once), and the broadcaster finds the event by its head poll. Stored as
 * a whole frame (header then body, `event_log.ts` `isStoredFrame`), so replay and the live
 * broadcast send its bytes unchanged.
 *
 * @module
 */

import { encodeFrame } from "../../shared/frame.ts";
import { seqEventChunkKey, seqHeadKey } from "../store/keys.ts";
import { retryWhileLocked } from "./sequencer.ts";

/** How long to keep trying while other writers move the seq head (as the sequencer). */
const RETRY_MS = 5_000;

/**
 * Commits `fill`'s mutations with the event `build(seq, time)` of frame type `type` at the next
 * seq. `prepare` is called before each attempt (re-reading what `fill` checks); it returns the
 * operation's fill, or null to give up without writing (nothing to change). Resolves to the
 * event, or null when `prepare` gave up. `label` names the event in the error after too many
 * lost races (e.g. "Account event for did:plc:...").
 */
export async function commitFrameEvent<E>(
  kv: Deno.Kv,
  opts: {
    type: string;
    label: string;
    nowMs: number;
    build: (seq: number, time: string) => E;
    prepare: () => Promise<((op: Deno.AtomicOperation) => void) | null>;
  },
): Promise<E | null> {
  const deadline = Date.now() + RETRY_MS;
  for (let attempt = 0;; attempt++) {
    const fill = await opts.prepare();
    if (fill === null) return null;
    const head = await retryWhileLocked(() => kv.get<number>(seqHeadKey()));
    const seq = (head.value ?? 0) + 1;
    const event = opts.build(seq, new Date(opts.nowMs).toISOString());
    const op = kv.atomic();
    fill(op);
    op.check({ key: seqHeadKey(), versionstamp: head.versionstamp })
      .set(seqHeadKey(), seq)
      .set(seqEventChunkKey(seq, 0), encodeFrame({ op: 1, t: opts.type }, event));
    if ((await retryWhileLocked(() => op.commit())).ok) return event;
    if (Date.now() > deadline) {
      throw new Error(`${opts.label} lost ${attempt + 1} commit races`);
    }
    await new Promise((r) => setTimeout(r, Math.random() * Math.min(20, 1 + attempt)));
  }
}
