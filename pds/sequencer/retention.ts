/**
 * Event retention (`PDS_EVENT_RETENTION_DAYS`): stored stream events older than the window are
 * deleted, oldest first. The seq head is never touched, so seqs stay gapless going forward; a
 * consumer whose cursor falls before the oldest kept event gets `#info OutdatedCursor` and the
 * replay from the oldest (see `stream.ts`).
 *
 * Event times are in the stored bodies; as seq order is commit order, the cut-off seq is found by
 * binary search over the kept range (a few reads), then the older chunks are deleted in batches.
 *
 * @module
 */

import type { Logger } from "../../shared/log.ts";
import { PeriodicTask } from "../periodic_task.ts";
import { seqEventChunkKey, seqEventPrefix } from "../store/keys.ts";
import { readEventBodies, readHeadSeq, readOldestSeq, storedEventTime } from "./event_log.ts";

/** How often the retention worker runs by default (one hour). */
export const DEFAULT_PRUNE_INTERVAL_MS = 60 * 60 * 1000;
/** Keys deleted per atomic operation (Deno KV allows 1,000 mutations). */
const DELETE_BATCH = 500;
const DAY_MS = 24 * 60 * 60 * 1000;

/** Deletes stored events whose time is before `now - retentionDays`; returns how many. */
export async function pruneEvents(
  kv: Deno.Kv,
  opts: { retentionDays: number; now: number; signal?: AbortSignal },
): Promise<number> {
  const cutoff = opts.now - opts.retentionDays * DAY_MS;
  const oldest = await readOldestSeq(kv);
  if (oldest === null) return 0;
  const head = await readHeadSeq(kv);
  // Find the first kept seq: the smallest seq whose event time is at or after the cut-off.
  let lo = oldest;
  let hi = head + 1;
  while (lo < hi) {
    const mid = Math.floor((lo + hi) / 2);
    const time = await eventTimeAtOrAfter(kv, mid);
    if (time === null || time >= cutoff) hi = mid;
    else lo = mid + 1;
  }
  if (lo <= oldest) return 0;
  return await deleteEventsBefore(kv, lo, DELETE_BATCH, opts.signal);
}

/** Time (ms) of the first stored event with seq >= `seq`, or null when there is none. */
async function eventTimeAtOrAfter(kv: Deno.Kv, seq: number): Promise<number | null> {
  const [e] = await readEventBodies(kv, seq - 1, 1);
  if (!e) return null;
  const time = Date.parse(storedEventTime(e.body) ?? "");
  return Number.isNaN(time) ? null : time;
}

/**
 * Deletes every stored event with a seq below `seq`, at most `batch` keys per atomic operation
 * (more only for one event of more chunks, which was written in one operation). A batch is cut
 * only at an event boundary, so an interruption never leaves part of an event behind. When
 * `signal` aborts, it stops at the next event boundary and deletes the events read so far (the
 * oldest go first, so what is left is still one run of consecutive seqs); returns how many.
 */
export async function deleteEventsBefore(
  kv: Deno.Kv,
  seq: number,
  batch = DELETE_BATCH,
  signal?: AbortSignal,
): Promise<number> {
  let count = 0;
  let keys: Deno.KvKey[] = [];
  let current: Deno.KvKey[] = [];
  let currentSeq = -1;
  const flush = async () => {
    if (keys.length === 0) return;
    const op = kv.atomic();
    for (const key of keys) op.delete(key);
    await op.commit();
    keys = [];
  };
  const endEvent = async () => {
    if (current.length === 0) return;
    if (keys.length + current.length > batch) await flush();
    keys.push(...current);
    current = [];
  };
  const iter = kv.list({ start: seqEventPrefix(), end: seqEventChunkKey(seq, 0) });
  for await (const entry of iter) {
    const entrySeq = entry.key[1] as number;
    if (entrySeq !== currentSeq) {
      await endEvent();
      if (signal?.aborted) break;
      currentSeq = entrySeq;
      count++;
    }
    current.push(entry.key);
  }
  await endEvent();
  await flush();
  return count;
}

/** Runs {@link pruneEvents} at start and then every `intervalMs`. */
export class RetentionWorker extends PeriodicTask {
  constructor(opts: {
    kv: Deno.Kv;
    log: Logger;
    retentionDays: number;
    now: () => number;
    intervalMs?: number;
  }) {
    super({
      intervalMs: opts.intervalMs ?? DEFAULT_PRUNE_INTERVAL_MS,
      log: opts.log,
      failure: "pruning stream events failed",
      run: async (signal) => {
        const deleted = await pruneEvents(opts.kv, {
          retentionDays: opts.retentionDays,
          now: opts.now(),
          signal,
        });
        if (deleted > 0) {
          opts.log.info("pruned old stream events", {
            deleted,
            retentionDays: opts.retentionDays,
          });
        }
      },
    });
  }
}
