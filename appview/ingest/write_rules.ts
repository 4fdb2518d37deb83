/**
 * The rules both index writers apply the same way (the SQLite `IndexWriter`, apply_ops.ts, and the
 * PostgreSQL `PgIndexWriter`, pg/pg_writer.ts): the rev gate's decision for a commit
 * (docs/behaviour.md 6.2 rules 4 and 8), the batch size bound and the writer's running totals.
 * Pure: the writers read the stored rev and write what was decided.
 *
 * @module
 */

import type { Logger } from "../../shared/log.ts";
import type { SkipReason, SkipTally } from "./skips.ts";

/**
 * When a commit's record ops are applied, given the rev of the latest commit applied for its
 * repository (none for a repository not seen yet: then always). TIDs compare as strings.
 * - `"newer"` (local stream: authoritative, in `seq` order per repository): rev greater than the
 *   stored rev. A commit at or below it was already applied (by push or earlier) and is passed
 *   over.
 * - `"next"` (push: best effort, may arrive late or early): exactly the next commit, that is
 *   `since` equals the stored rev (both null for a repository's first commit) and rev is greater.
 *   Anything else is passed over and left to the local stream. A push without `since` (an older
 *   account host) cannot be placed: it is applied when its rev is greater than the stored rev, as
 *   `"newer"` (the behaviour before revs were tracked, minus re-applying old commits).
 * - `"newer-or-equal"` (Jetstream: one event per op, the ops of one commit share its rev): rev
 *   greater than or equal to the stored rev.
 */
export type RevGate = "newer" | "next" | "newer-or-equal";

/** The commit a run of ops belongs to. */
export interface CommitRef {
  /** Repository DID. */
  readonly did: string;
  /** The commit's rev (a TID; callers validate it). */
  readonly rev: string;
  /** Rev of the repository's previous commit, null for its first; undefined when not known. */
  readonly since?: string | null;
  readonly mode: RevGate;
}

/** Totals since the writer was created. */
export interface IndexWriterStats {
  applied: number;
  skipped: number;
  skippedByReason: Record<SkipReason, number>;
  /** Transactions committed. */
  batches: number;
  /** Batches re-run op by op after an op failed. */
  retriedBatches: number;
  /** Commits passed over by their {@link RevGate}. */
  stale: number;
  /** Record ops of those commits (neither applied nor skipped). */
  staleOps: number;
}

/** What a transaction decided about the revs of the repositories it touched. */
export interface RevDecisions {
  /** The rev each repository has after the transaction (passed-over commits keep the stored). */
  readonly revs: Map<string, string | null>;
  /** Repositories whose rev changes (written before COMMIT). */
  readonly dirty: Set<string>;
  /** Repositories a local-stream or push commit reached (`repo_revs.local`). */
  readonly local: Set<string>;
  /** Repositories with a gap (queued for a backfill): a missed commit, or no history here. */
  readonly gaps: Map<string, "gap" | "unknown">;
}

/**
 * Decides whether `commit` is applied against `stored`, the rev of its repository as the open
 * transaction sees it (null: none), and records the decision in `tx`. A local-stream commit whose
 * `since` is not the stored rev is applied and its repository is marked as a gap.
 */
export function admitCommit(
  commit: CommitRef,
  stored: string | null,
  tx: RevDecisions,
  log: Logger,
): boolean {
  const { did, rev, since, mode } = commit;
  let admit: boolean;
  if (mode === "newer-or-equal") admit = stored === null || rev >= stored;
  else {
    admit = stored === null || rev > stored;
    if (mode === "next" && since !== undefined) admit &&= since === stored;
  }
  if (admit) {
    tx.revs.set(did, rev);
    if (rev !== stored) tx.dirty.add(did);
    if (mode !== "newer-or-equal") tx.local.add(did);
    if (mode === "newer" && since !== undefined && since !== stored) {
      tx.gaps.set(did, stored === null ? "unknown" : "gap");
    }
  } else {
    tx.revs.set(did, stored);
    log.debug("Commit passed over: already applied or out of order", {
      did,
      rev,
      since,
      stored,
      mode,
    });
  }
  return admit;
}

/** `batchSize` when it is an integer from 1 to 100,000; RangeError otherwise. */
export function checkBatchSize(batchSize: number): number {
  if (!Number.isInteger(batchSize) || batchSize < 1 || batchSize > 100_000) {
    throw new RangeError(`Batch size must be an integer from 1 to 100000: ${batchSize}`);
  }
  return batchSize;
}

/** A writer's totals before its first batch. */
export function emptyWriterStats(): IndexWriterStats {
  return {
    applied: 0,
    skipped: 0,
    skippedByReason: {
      invalid_op: 0,
      invalid_record: 0,
      unsupported_collection: 0,
      apply_error: 0,
      handle_conflict: 0,
    },
    batches: 0,
    retriedBatches: 0,
    stale: 0,
    staleOps: 0,
  };
}

/** Adds a committed batch's counts (and its skips, by reason) to `stats`. */
export function countBatch(
  stats: IndexWriterStats,
  batch: { applied: number; skipped: number; stale: number; staleOps: number },
  skips: SkipTally,
): void {
  stats.batches++;
  stats.applied += batch.applied;
  stats.skipped += batch.skipped;
  stats.stale += batch.stale;
  stats.staleOps += batch.staleOps;
  skips.addTo(stats.skippedByReason);
}

/** A copy of `stats` (what `stats()` answers). */
export function copyStats(stats: IndexWriterStats): IndexWriterStats {
  return { ...stats, skippedByReason: { ...stats.skippedByReason } };
}
