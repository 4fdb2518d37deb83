/**
 * The backfill queue and the backfill worker's status row (schema: `backfill_queue`,
 * `backfill_status`, migration 10; docs/behaviour.md 6.2 rules 8-11).
 *
 * The queue holds one row per repository to fetch. The write path adds rows inside the
 * transaction of the commit that revealed a gap ({@link prepareGapEnqueue}), so the cursor never
 * moves past a gap whose repair was not recorded; the worker adds the others (`#sync` frames,
 * a restored account host) and takes rows whose `not_before` has come. A new trigger of a queued
 * repository changes its reason, target and `queued_at`, never its backoff: a repository whose
 * fetch keeps failing is not fetched faster because commits keep arriving.
 *
 * @module
 */

import type { DatabaseSync, StatementSync } from "node:sqlite";

/** Why a repository is queued. */
export type BackfillReason = "gap" | "unknown" | "sync" | "restore" | "requested";

/** One queued repository. */
export interface QueuedRepo {
  did: string;
  reason: BackfillReason;
  /** The rev that prompted it (a `#sync` frame, the host's listing), when known. */
  targetRev: string | null;
  attempts: number;
  notBefore: string;
  lastError: string | null;
  /** Changed by every new trigger: a row done while untouched is deleted, else kept. */
  queuedAt: string;
}

/** Name of the local backfill worker's status row. */
export const BACKFILL_LOCAL = "local";

const ENQUEUE = `INSERT INTO backfill_queue (did, reason, target_rev, not_before, queued_at)
  VALUES (?1, ?2, ?3, ?4, ?4)
  ON CONFLICT (did) DO UPDATE SET reason = excluded.reason, target_rev = excluded.target_rev,
    queued_at = excluded.queued_at`;

/**
 * The statement the write path runs for a gap: queues `did` (reason `gap`, or `unknown` for an
 * account it had no rev for) at `at`, in the caller's transaction.
 */
export function prepareGapEnqueue(
  db: DatabaseSync,
): (did: string, reason: "gap" | "unknown", at: string) => void {
  const stmt = db.prepare(ENQUEUE);
  return (did, reason, at) => void stmt.run(did, reason, null, at);
}

/** Counts of the queue, for `/healthz` and the task's progress. */
export interface QueueCounts {
  /** Repositories queued. */
  queued: number;
  /** Of those, how many failed at least once (waiting for their backoff). */
  retrying: number;
}

/** The queue's statements, prepared once. */
export class BackfillQueue {
  readonly #enqueue: StatementSync;
  readonly #due: StatementSync;
  readonly #done: StatementSync;
  readonly #failed: StatementSync;
  readonly #counts: StatementSync;
  readonly #next: StatementSync;
  readonly #now: StatementSync;

  constructor(db: DatabaseSync) {
    this.#enqueue = db.prepare(ENQUEUE);
    this.#now = db.prepare(
      `INSERT INTO backfill_queue (did, reason, target_rev, not_before, queued_at)
       VALUES (?1, ?2, ?3, ?4, ?4)
       ON CONFLICT (did) DO UPDATE SET reason = excluded.reason, target_rev = excluded.target_rev,
         queued_at = excluded.queued_at, not_before = excluded.not_before, attempts = 0`,
    );
    this.#due = db.prepare(
      `SELECT did, reason, target_rev, attempts, not_before, last_error, queued_at
       FROM backfill_queue WHERE not_before <= ? ORDER BY not_before, did LIMIT ?`,
    );
    this.#done = db.prepare("DELETE FROM backfill_queue WHERE did = ? AND queued_at = ?");
    this.#failed = db.prepare(
      `UPDATE backfill_queue SET attempts = attempts + 1, last_error = ?2, not_before = ?3
       WHERE did = ?1`,
    );
    this.#counts = db.prepare(
      `SELECT count(*) AS queued, count(*) FILTER (WHERE attempts > 0) AS retrying
       FROM backfill_queue`,
    );
    this.#next = db.prepare("SELECT min(not_before) AS at FROM backfill_queue");
  }

  /** Queues `did` (or changes the reason and target of its row), due at `at` when new. */
  enqueue(did: string, reason: BackfillReason, targetRev: string | null, at: string): void {
    this.#enqueue.run(did, reason, targetRev, at);
  }

  /**
   * Queues `did` due at `at` even when its row waits for a backoff (an operator's request: the
   * task `deno task backfill`), its attempts counted from 0 again.
   */
  requestNow(did: string, reason: BackfillReason, targetRev: string | null, at: string): void {
    this.#now.run(did, reason, targetRev, at);
  }

  /** At most `limit` rows due at `now`, the longest waiting first. */
  due(now: string, limit: number): QueuedRepo[] {
    return (this.#due.all(now, limit) as Record<string, unknown>[]).map((r) => ({
      did: r.did as string,
      reason: r.reason as BackfillReason,
      targetRev: r.target_rev as string | null,
      attempts: r.attempts as number,
      notBefore: r.not_before as string,
      lastError: r.last_error as string | null,
      queuedAt: r.queued_at as string,
    }));
  }

  /** `row` was backfilled: deleted unless a new trigger came meanwhile (then it runs again). */
  done(row: QueuedRepo): void {
    this.#done.run(row.did, row.queuedAt);
  }

  /** `did` failed: one more attempt counted, retried at `notBefore`. */
  failed(did: string, error: string, notBefore: string): void {
    this.#failed.run(did, error.slice(0, 500), notBefore);
  }

  counts(): QueueCounts {
    return this.#counts.get() as unknown as QueueCounts;
  }

  /** When the earliest row is due; null when the queue is empty. */
  nextDue(): string | null {
    return (this.#next.get() as { at: string | null }).at;
  }
}

/** A backfill worker's status row. */
export interface BackfillStatus {
  done: number;
  failed: number;
  records: number;
  lastDid: string | null;
  lastError: string | null;
  lastDoneAt: string | null;
  restoredAt: string | null;
  restoredCursor: number | null;
  restoredHead: number | null;
  updatedAt: string;
}

/** Reads the status row `name`; null when that worker never reported. */
export function readBackfillStatus(db: DatabaseSync, name: string): BackfillStatus | null {
  const r = db.prepare(
    `SELECT done, failed, records, last_did, last_error, last_done_at, restored_at,
       restored_cursor, restored_head, updated_at FROM backfill_status WHERE name = ?`,
  ).get(name) as Record<string, unknown> | undefined;
  return r === undefined ? null : backfillStatusOf(r);
}

/** A `backfill_status` row (the columns {@link readBackfillStatus} reads). */
export function backfillStatusOf(r: Record<string, unknown>): BackfillStatus {
  return {
    done: r.done as number,
    failed: r.failed as number,
    records: r.records as number,
    lastDid: r.last_did as string | null,
    lastError: r.last_error as string | null,
    lastDoneAt: r.last_done_at as string | null,
    restoredAt: r.restored_at as string | null,
    restoredCursor: r.restored_cursor as number | null,
    restoredHead: r.restored_head as number | null,
    updatedAt: r.updated_at as string,
  };
}

/** Adds one finished backfill (of `records` records) or one failure to the row `name`. */
export function recordBackfillOutcome(
  db: DatabaseSync,
  name: string,
  outcome: BackfillOutcome,
): void {
  db.prepare(
    `INSERT INTO backfill_status (name, done, failed, records, last_did, last_error,
       last_done_at, updated_at)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
     ON CONFLICT (name) DO UPDATE SET done = done + excluded.done,
       failed = failed + excluded.failed, records = records + excluded.records,
       last_did = excluded.last_did,
       last_error = CASE WHEN excluded.failed > 0 THEN excluded.last_error ELSE last_error END,
       last_done_at = coalesce(excluded.last_done_at, last_done_at),
       updated_at = excluded.updated_at`,
  ).run(...backfillOutcomeParams(name, outcome));
}

/** What a backfill ended with: its records, or its error. */
export type BackfillOutcome =
  & { did: string; at: string }
  & ({ records: number } | { error: string });

/**
 * The parameters of the `backfill_status` outcome upsert, in order (`name, done, failed, records,
 * last_did, last_error, last_done_at, updated_at`), on either backend: an error is kept to its
 * first 500 characters.
 */
export function backfillOutcomeParams(
  name: string,
  outcome: BackfillOutcome,
): (string | number | null)[] {
  const ok = "records" in outcome;
  return [
    name,
    ok ? 1 : 0,
    ok ? 0 : 1,
    ok ? outcome.records : 0,
    outcome.did,
    ok ? null : outcome.error.slice(0, 500),
    ok ? outcome.at : null,
    outcome.at,
  ];
}

/** Records that the account host's head (`head`) was found behind the stored cursor. */
export function recordRestore(
  db: DatabaseSync,
  name: string,
  restore: { cursor: number; head: number | null; at: string },
): void {
  db.prepare(
    `INSERT INTO backfill_status (name, restored_at, restored_cursor, restored_head, updated_at)
     VALUES (?1, ?2, ?3, ?4, ?2)
     ON CONFLICT (name) DO UPDATE SET restored_at = excluded.restored_at,
       restored_cursor = excluded.restored_cursor, restored_head = excluded.restored_head,
       updated_at = excluded.updated_at`,
  ).run(name, restore.at, restore.cursor, restore.head);
}

/** Whether a commit of `did` from the account host was ever applied (`repo_revs.local`). */
export function isLocalRepo(db: DatabaseSync, did: string): boolean {
  const row = db.prepare("SELECT local FROM repo_revs WHERE did = ?").get(did) as
    | { local: number }
    | undefined;
  return row?.local === 1;
}

/** The DIDs of the account host's repositories the index holds (`repo_revs.local`), in order. */
export function* localRepoDids(db: DatabaseSync): Generator<string> {
  const page = db.prepare(
    "SELECT did FROM repo_revs WHERE local = 1 AND did > ? ORDER BY did LIMIT 500",
  );
  let after = "";
  for (;;) {
    const rows = page.all(after) as { did: string }[];
    for (const row of rows) yield row.did;
    if (rows.length < 500) return;
    after = rows[rows.length - 1].did;
  }
}
