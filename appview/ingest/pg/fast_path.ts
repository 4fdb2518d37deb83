/**
 * The PostgreSQL write path's set-based fast path: runs of independent post, like, repost and
 * follow ops (creates and deletes) applied by a few statements per run instead of a dozen per op.
 * Op by op, PostgreSQL spends most of its time starting statements and rewriting one post row per
 * like; per run, one statement inserts every like and one updates each liked post once.
 *
 * A run gives the rows and results that applying its ops one by one (`index_apply_op`, the SQLite
 * indexers' statements) gives, because:
 * - Its ops are independent: no two touch the same record (post, like, repost) or a follower's
 *   follows (any two follow ops of one follower end a run), and no two can create the same
 *   notification. So each op's outcome (inserted, updated, unchanged, deleted) depends only on the
 *   state before the run, and the statements of one kind can apply them in any order.
 * - Notifications go first, in op order (so their ids grow as op by op), each decided on the
 *   state before the run: the row the op writes was not there (or held another CID: a post
 *   update), and the recipient was known (spec 3.1) before the op: known before the run, or
 *   made known by an earlier op of the run. A post makes its author known and a follow both
 *   accounts, whatever their outcome (a post or follow already there had made them known when it
 *   was applied), so the writer computes the second part.
 * - Counters commute: a post counts the likes there when it is inserted and each like inserted
 *   after it adds one, so the final count is the same whichever of the two comes first; grouped
 *   decrements clamped at zero equal single ones clamped at zero while counters are exact (they
 *   are: every row change moves them). A counter that an op raises creates its profile row, as
 *   op by op.
 * - Posts are inserted in op order, so their ids grow as op by op.
 * Some ops wait in a run and are applied op by op after its set-based statements: blocks and
 * account status (no fast op reads or writes what they write), and profile records, as long as no
 * later op of the run is a post of that account (posts copy the profile's avatar, the profile
 * reads the latest post's handle) or notifies it (a profile row makes an account a known
 * recipient). What cannot be planned from the ops alone runs op by op between runs: handles (a
 * take-over changes other accounts' rows), account ops and deletions (a purge changes everything
 * about an account), like and repost updates.
 *
 * Lookups are scalar subqueries (one index probe per input row), never `EXISTS`, which the planner
 * may turn into a hash of the whole table.
 *
 * The parity test (`pg_writer_test.ts`) runs every scenario on both paths against SQLite.
 *
 * @module
 */

import { DEFERRABLE_KINDS, OP_KIND, RUN_PARTS } from "../../db/pg/write_functions.ts";
import type { PendingOp } from "./flatten.ts";

/** Ops applied together: a run by set-based statements, or ops one by one. */
export interface Run {
  /** The {@link RUN_PARTS} the run needs; 0 for ops applied one by one. */
  mask: number;
  readonly ops: PendingOp[];
  /** Per op of a fast run: its notification's recipient was made known earlier in the run. */
  readonly madeKnown: boolean[];
}

/** Longest run (a call of `index_apply_ops` holds whole runs). */
export const MAX_RUN_OPS = 2_000;

/**
 * The keys an op of a fast run claims (two ops of a run never share one) and the parts it needs;
 * null: applied one by one.
 */
function keysOf(p: PendingOp): { keys: string[]; parts: number } | null {
  const { k, did, rkey, sdid, srkey } = p.flat;
  switch (k) {
    case OP_KIND.postPut:
      return {
        keys: [`p ${did} ${rkey}`],
        parts: RUN_PARTS.posts | (sdid === null ? 0 : RUN_PARTS.notify),
      };
    case OP_KIND.postDelete:
      return { keys: [`p ${did} ${rkey}`], parts: RUN_PARTS.postDeletes };
    case OP_KIND.likePut:
    case OP_KIND.repostPut: {
      if (p.flat.flag === 1) return null; // an update drops the old row first: op by op
      const t = k === OP_KIND.likePut ? "l" : "r";
      return {
        // The record, and the notification's key (recipient, kind, author, subject): ON CONFLICT
        // in op order would keep the first as op by op does; the key keeps that off the table.
        keys: [`${t} ${did} ${rkey}`, `n${t} ${sdid} ${did} ${srkey}`],
        parts: RUN_PARTS.notify | (k === OP_KIND.likePut ? RUN_PARTS.likes : RUN_PARTS.reposts),
      };
    }
    case OP_KIND.likeDelete:
      return { keys: [`l ${did} ${rkey}`], parts: RUN_PARTS.likeDeletes };
    case OP_KIND.repostDelete:
      return { keys: [`r ${did} ${rkey}`], parts: RUN_PARTS.repostDeletes };
    case OP_KIND.followPut:
      return {
        keys: [`f ${did}`],
        parts: RUN_PARTS.notify | RUN_PARTS.followRemovals | RUN_PARTS.follows,
      };
    case OP_KIND.followDelete:
      return { keys: [`f ${did}`], parts: RUN_PARTS.followRemovals };
    default:
      return null;
  }
}

const DEFERRABLE: ReadonlySet<number> = new Set(DEFERRABLE_KINDS);
const PROFILE_KINDS: ReadonlySet<number> = new Set([OP_KIND.profilePut, OP_KIND.profileDelete]);

/** Splits `pending` into fast runs and op-by-op stretches, in order (module comment). */
export function planRuns(pending: readonly PendingOp[]): Run[] {
  const runs: Run[] = [];
  let run = null as Run | null;
  let general: Run | null = null;
  let keys = new Set<string>();
  let known = new Set<string>();
  /** Accounts whose profile record a deferred op of the run changes. */
  let profiles = new Set<string>();
  const newRun = () => {
    run = { mask: 0, ops: [], madeKnown: [] };
    runs.push(run);
    keys = new Set();
    known = new Set();
    profiles = new Set();
    return run;
  };
  for (const p of pending) {
    const { k, did, sdid } = p.flat;
    if (DEFERRABLE.has(k)) {
      // Applied after the run's set-based statements (module comment).
      const r: Run = run === null || run.ops.length >= MAX_RUN_OPS ? newRun() : run;
      r.mask |= RUN_PARTS.deferred;
      r.ops.push(p);
      r.madeKnown.push(false);
      if (PROFILE_KINDS.has(k)) profiles.add(did);
      general = null;
      continue;
    }
    const claim = keysOf(p);
    if (claim === null) {
      if (general === null || general.ops.length >= MAX_RUN_OPS) {
        general = { mask: 0, ops: [], madeKnown: [] };
        runs.push(general);
      }
      general.ops.push(p);
      general.madeKnown.push(false);
      run = null;
      continue;
    }
    general = null;
    const notifies = (claim.parts & RUN_PARTS.notify) !== 0;
    // A profile change waiting for the end of the run must not be passed by what it affects:
    // the author's posts (they copy its avatar, it reads their handle) and whether the author
    // is a known recipient.
    const passesProfile = profiles.size > 0 &&
      (((k === OP_KIND.postPut || k === OP_KIND.postDelete) && profiles.has(did)) ||
        (notifies && profiles.has(sdid!)));
    const r: Run = run === null || run.ops.length >= MAX_RUN_OPS || passesProfile ||
        claim.keys.some((key) => keys.has(key))
      ? newRun()
      : run;
    for (const key of claim.keys) keys.add(key);
    r.mask |= claim.parts;
    r.ops.push(p);
    r.madeKnown.push(notifies && known.has(sdid!));
    if (k === OP_KIND.postPut) known.add(did);
    if (k === OP_KIND.followPut) {
      known.add(did);
      known.add(sdid!);
    }
  }
  return runs;
}
