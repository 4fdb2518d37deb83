/**
 * Events sequenced as whole frames (`#account`, `#identity`, `#sync`; docs/protocol.md 6.2): at
 * the next seq, in one Deno KV atomic operation with the change they announce, checked against the seq
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

/** One event of {@link commitFrameEvents}: its frame type and its body at a seq and time. */
export interface FrameEventSpec<E> {
  type: string;
  build: (seq: number, time: string) => E;
}

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
  const events = await commitFrameEvents<E>(kv, {
    label: opts.label,
    nowMs: opts.nowMs,
    events: [{ type: opts.type, build: opts.build }],
    prepare: opts.prepare,
  });
  return events === null ? null : events[0];
}

/**
 * {@link commitFrameEvent} for several events at consecutive seqs, in the order given, in the
 * one atomic operation of `fill` (an account's creation: `#identity` then `#account`).
 */
export async function commitFrameEvents<E>(
  kv: Deno.Kv,
  opts: {
    label: string;
    nowMs: number;
    events: FrameEventSpec<E>[];
    prepare: () => Promise<((op: Deno.AtomicOperation) => void) | null>;
  },
): Promise<E[] | null> {
  const deadline = Date.now() + RETRY_MS;
  for (let attempt = 0;; attempt++) {
    const fill = await opts.prepare();
    if (fill === null) return null;
    const head = await retryWhileLocked(() => kv.get<number>(seqHeadKey()));
    const first = (head.value ?? 0) + 1;
    const time = new Date(opts.nowMs).toISOString();
    const op = kv.atomic();
    fill(op);
    const events = opts.events.map((spec, i) => {
      const event = spec.build(first + i, time);
      op.set(seqEventChunkKey(first + i, 0), encodeFrame({ op: 1, t: spec.type }, event));
      return event;
    });
    op.check({ key: seqHeadKey(), versionstamp: head.versionstamp })
      .set(seqHeadKey(), first + opts.events.length - 1);
    if ((await retryWhileLocked(() => op.commit())).ok) return events;
    if (Date.now() > deadline) {
      throw new Error(`${opts.label} lost ${attempt + 1} commit races`);
    }
    await new Promise((r) => setTimeout(r, Math.random() * Math.min(20, 1 + attempt)));
  }
}
