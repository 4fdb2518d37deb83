/**
 * The index store's state on PostgreSQL (`StateStore` of appview/db/store.ts): stream cursors and
 * consumer status (`db/state.ts`), the backfill queue and status (`db/backfill_state.ts`) and
 * handle sync's rows (`db/placeholder_handles.ts`), with the SQLite statements' results, one
 * statement per call.
 *
 * Where the statements run is a {@link PgRunner}: the pool, or the connection of a consumer lock
 * (`lease.ts`), on which they queue behind the lock holder's write transactions, so that a
 * consumer's status rows are written only while it holds its lock.
 *
 * Handle sync on several processes (docs/behaviour.md 6.2 rule 12): {@link PgPlaceholderHandles}
 * claims the authors it returns. `due` marks their due rows attempted (at the store's clock) in its
 * own transaction, under the index write lock, so a second handle sync's `due`, which waits for
 * that lock, finds them attempted and takes the next authors: two processes split the work instead
 * of resolving every DID twice. The write lock, which every writer of `posts` takes first, also
 * keeps these multi-row updates from deadlocking with a write transaction updating the same rows
 * in another order (a handle op updates every post of its DID).
 *
 * @module
 */

import {
  type BackfillOutcome,
  backfillOutcomeParams,
  type BackfillReason,
  type BackfillStatus,
  backfillStatusOf,
  type QueueCounts,
  type QueuedRepo,
} from "../backfill_state.ts";
import type { DueAuthor } from "../placeholder_handles.ts";
import { type ConsumerStatus, consumerStatusOf, consumerStatusParams } from "../state.ts";
import type { AsyncMethods, StateStore } from "../store.ts";
import { execute, type PgClient, queryRow, queryRows } from "../../views/pg/query.ts";
import { PG_LOCK_INDEX_WRITE, PG_LOCK_NAMESPACE, PG_PLACEHOLDER_HANDLE_SQL } from "./schema.ts";
import type { BackfillQueue } from "../backfill_state.ts";
import type { PlaceholderHandles } from "../placeholder_handles.ts";

/** Where state statements run (module comment). */
export interface PgRunner {
  /** Runs `fn`, whose statements go out on `sql` one call at a time with nothing in between. */
  run<T>(fn: (sql: PgClient) => Promise<T>): Promise<T>;
  /** Runs `fn` in a transaction (committed when it resolves, rolled back when it rejects). */
  transaction<T>(fn: (sql: PgClient) => Promise<T>): Promise<T>;
}

/** Statements issued through `run`, one at a time (the pool's runner). */
export function poolRunner(sql: PgPool): PgRunner {
  return {
    run: (fn) => fn(sql),
    transaction: async <T>(fn: (sql: PgClient) => Promise<T>) =>
      await sql.begin((tx) => fn(tx)) as T,
  };
}

/** The part of a `postgres` pool the pool runner uses. */
export interface PgPool extends PgClient {
  begin<T>(fn: (tx: PgClient) => Promise<T>): Promise<unknown>;
}

/** Takes the index write lock of the transaction `sql` (as every writer of the index). */
export const WRITE_LOCK_SQL =
  `SELECT pg_advisory_xact_lock(${PG_LOCK_NAMESPACE}, ${PG_LOCK_INDEX_WRITE})`;

const UPSERT_STATUS = `INSERT INTO consumer_status
    (name, state, cursor, last_event_at, last_error, updated_at, down_since)
  VALUES ($1, $2, $3, $4, $5, $6, $7)
  ON CONFLICT (name) DO UPDATE SET state = excluded.state, cursor = excluded.cursor,
    last_event_at = excluded.last_event_at, last_error = excluded.last_error,
    updated_at = excluded.updated_at,
    down_since = CASE WHEN excluded.down_since IS NULL THEN NULL
      ELSE coalesce(consumer_status.down_since, excluded.down_since) END`;

const ENQUEUE = `INSERT INTO backfill_queue (did, reason, target_rev, not_before, queued_at)
  VALUES ($1, $2, $3, $4, $4)
  ON CONFLICT (did) DO UPDATE SET reason = excluded.reason, target_rev = excluded.target_rev,
    queued_at = excluded.queued_at`;

const REQUEST_NOW = `INSERT INTO backfill_queue (did, reason, target_rev, not_before, queued_at)
  VALUES ($1, $2, $3, $4, $4)
  ON CONFLICT (did) DO UPDATE SET reason = excluded.reason, target_rev = excluded.target_rev,
    queued_at = excluded.queued_at, not_before = excluded.not_before, attempts = 0`;

const RECORD_OUTCOME = `INSERT INTO backfill_status (name, done, failed, records, last_did,
    last_error, last_done_at, updated_at)
  VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
  ON CONFLICT (name) DO UPDATE SET done = backfill_status.done + excluded.done,
    failed = backfill_status.failed + excluded.failed,
    records = backfill_status.records + excluded.records,
    last_did = excluded.last_did,
    last_error = CASE WHEN excluded.failed > 0 THEN excluded.last_error
      ELSE backfill_status.last_error END,
    last_done_at = coalesce(excluded.last_done_at, backfill_status.last_done_at),
    updated_at = excluded.updated_at`;

const RECORD_RESTORE = `INSERT INTO backfill_status (name, restored_at, restored_cursor,
    restored_head, updated_at)
  VALUES ($1, $2, $3, $4, $2)
  ON CONFLICT (name) DO UPDATE SET restored_at = excluded.restored_at,
    restored_cursor = excluded.restored_cursor, restored_head = excluded.restored_head,
    updated_at = excluded.updated_at`;

/** Rows of a `localRepoDids` page. */
const LOCAL_REPO_PAGE = 500;

/**
 * Claims the due authors of one range (module comment): up to `$3` authors with a placeholder
 * row due (attempted never or at `$2` or before), their due rows marked attempted at `$4`.
 */
const claimDue = (range: string) =>
  `WITH due AS (
    SELECT author FROM posts
    WHERE ${PG_PLACEHOLDER_HANDLE_SQL} AND ${range}
      AND (handle_attempted_at IS NULL OR handle_attempted_at <= $2)
    GROUP BY author ORDER BY author LIMIT $3
  ), claimed AS (
    UPDATE posts p SET handle_attempted_at = $4
    FROM (SELECT id FROM posts
      WHERE ${PG_PLACEHOLDER_HANDLE_SQL} AND author IN (SELECT author FROM due)
        AND (handle_attempted_at IS NULL OR handle_attempted_at <= $2)
      FOR UPDATE SKIP LOCKED) AS r
    WHERE p.id = r.id
    RETURNING p.author, p.did
  )
  SELECT author, min(did) AS did FROM claimed GROUP BY author ORDER BY author`;

const CLAIM_AFTER = claimDue("author > $1");
const CLAIM_UP_TO = claimDue("author <= $1");

const MARK_ATTEMPTED = `UPDATE posts SET handle_attempted_at = $2
  WHERE author IN (SELECT id FROM actors WHERE did = ANY($1::text[]))
    AND ${PG_PLACEHOLDER_HANDLE_SQL}`;

/** Options of {@link PgState}. */
export interface PgStateOptions {
  /** Clock of handle sync's claims (the store's). */
  now?: () => Date;
}

/** The {@link StateStore} on PostgreSQL (module comment). */
export class PgState implements StateStore {
  readonly #db: PgRunner;
  readonly backfillQueue: AsyncMethods<BackfillQueue>;
  readonly placeholderHandles: AsyncMethods<PlaceholderHandles>;

  constructor(db: PgRunner, opts: PgStateOptions = {}) {
    this.#db = db;
    this.backfillQueue = new PgBackfillQueue(db);
    this.placeholderHandles = new PgPlaceholderHandles(db, opts.now ?? (() => new Date()));
  }

  readCursor(name: string): Promise<number | null> {
    return this.#db.run(async (sql) => {
      const row = await queryRow<{ value: number }>(
        sql,
        "SELECT value FROM cursors WHERE name = $1",
        [name],
      );
      return row === undefined ? null : row.value;
    });
  }

  writeConsumerStatus(status: ConsumerStatus): Promise<void> {
    return this.#db.run(async (sql) => {
      await execute(sql, UPSERT_STATUS, consumerStatusParams(status));
    });
  }

  readConsumerStatus(name: string): Promise<ConsumerStatus | null> {
    return this.#db.run(async (sql) => {
      const row = await queryRow<Record<string, string | number | null>>(
        sql,
        `SELECT name, state, cursor, last_event_at, last_error, updated_at
         FROM consumer_status WHERE name = $1`,
        [name],
      );
      return row === undefined ? null : consumerStatusOf(row);
    });
  }

  readConsumerDownSince(name: string): Promise<string | null> {
    return this.#db.run(async (sql) => {
      const row = await queryRow<{ down_since: string | null }>(
        sql,
        "SELECT down_since FROM consumer_status WHERE name = $1",
        [name],
      );
      return row?.down_since ?? null;
    });
  }

  readBackfillStatus(name: string): Promise<BackfillStatus | null> {
    return this.#db.run(async (sql) => {
      const r = await queryRow<Record<string, unknown>>(
        sql,
        `SELECT done, failed, records, last_did, last_error, last_done_at, restored_at,
           restored_cursor, restored_head, updated_at FROM backfill_status WHERE name = $1`,
        [name],
      );
      return r === undefined ? null : backfillStatusOf(r);
    });
  }

  recordBackfillOutcome(
    name: string,
    outcome: BackfillOutcome,
  ): Promise<void> {
    return this.#db.run(async (sql) => {
      await execute(sql, RECORD_OUTCOME, backfillOutcomeParams(name, outcome));
    });
  }

  recordRestore(
    name: string,
    restore: { cursor: number; head: number | null; at: string },
  ): Promise<void> {
    return this.#db.run(async (sql) => {
      await execute(sql, RECORD_RESTORE, [name, restore.at, restore.cursor, restore.head]);
    });
  }

  isLocalRepo(did: string): Promise<boolean> {
    return this.#db.run(async (sql) => {
      const row = await queryRow<{ local: number }>(
        sql,
        "SELECT local FROM repo_revs WHERE did = $1",
        [did],
      );
      return row?.local === 1;
    });
  }

  async *localRepoDids(): AsyncGenerator<string> {
    let after = "";
    for (;;) {
      const rows = await this.#db.run((sql) =>
        queryRows<{ did: string }>(
          sql,
          "SELECT did FROM repo_revs WHERE local = 1 AND did > $1 ORDER BY did LIMIT $2",
          [after, LOCAL_REPO_PAGE],
        )
      );
      for (const row of rows) yield row.did;
      if (rows.length < LOCAL_REPO_PAGE) return;
      after = rows[rows.length - 1].did;
    }
  }
}

/** `BackfillQueue` (`db/backfill_state.ts`) on PostgreSQL. */
class PgBackfillQueue implements AsyncMethods<BackfillQueue> {
  readonly #db: PgRunner;

  constructor(db: PgRunner) {
    this.#db = db;
  }

  enqueue(did: string, reason: BackfillReason, targetRev: string | null, at: string) {
    return this.#db.run(async (sql) => {
      await execute(sql, ENQUEUE, [did, reason, targetRev, at]);
    });
  }

  requestNow(did: string, reason: BackfillReason, targetRev: string | null, at: string) {
    return this.#db.run(async (sql) => {
      await execute(sql, REQUEST_NOW, [did, reason, targetRev, at]);
    });
  }

  due(now: string, limit: number): Promise<QueuedRepo[]> {
    return this.#db.run(async (sql) => {
      const rows = await queryRows<Record<string, unknown>>(
        sql,
        `SELECT did, reason, target_rev, attempts, not_before, last_error, queued_at
         FROM backfill_queue WHERE not_before <= $1 ORDER BY not_before, did LIMIT $2`,
        [now, limit],
      );
      return rows.map((r) => ({
        did: r.did as string,
        reason: r.reason as BackfillReason,
        targetRev: r.target_rev as string | null,
        attempts: r.attempts as number,
        notBefore: r.not_before as string,
        lastError: r.last_error as string | null,
        queuedAt: r.queued_at as string,
      }));
    });
  }

  done(row: QueuedRepo) {
    return this.#db.run(async (sql) => {
      await execute(sql, "DELETE FROM backfill_queue WHERE did = $1 AND queued_at = $2", [
        row.did,
        row.queuedAt,
      ]);
    });
  }

  failed(did: string, error: string, notBefore: string) {
    return this.#db.run(async (sql) => {
      await execute(
        sql,
        `UPDATE backfill_queue SET attempts = attempts + 1, last_error = $2, not_before = $3
         WHERE did = $1`,
        [did, error.slice(0, 500), notBefore],
      );
    });
  }

  counts(): Promise<QueueCounts> {
    return this.#db.run(async (sql) => {
      const row = await queryRow<QueueCounts>(
        sql,
        `SELECT count(*) AS queued, count(*) FILTER (WHERE attempts > 0) AS retrying
         FROM backfill_queue`,
        [],
      );
      return { queued: row!.queued, retrying: row!.retrying };
    });
  }

  nextDue(): Promise<string | null> {
    return this.#db.run(async (sql) =>
      (await queryRow<{ at: string | null }>(
        sql,
        "SELECT min(not_before) AS at FROM backfill_queue",
        [],
      ))!.at
    );
  }
}

/** `PlaceholderHandles` (`db/placeholder_handles.ts`) on PostgreSQL, claiming (module comment). */
class PgPlaceholderHandles implements AsyncMethods<PlaceholderHandles> {
  readonly #db: PgRunner;
  readonly #now: () => Date;

  constructor(db: PgRunner, now: () => Date) {
    this.#db = db;
    this.#now = now;
  }

  /**
   * Up to `limit` authors above `after` (or, with `wrapped`, at most `after`) with a placeholder
   * row not attempted after `cutoff`, in id order; their due rows are claimed (module comment).
   */
  due(after: number, cutoff: string, limit: number, wrapped = false): Promise<DueAuthor[]> {
    const at = this.#now().toISOString();
    return this.#db.transaction(async (sql) => {
      await sql.unsafe(WRITE_LOCK_SQL);
      return await queryRows<DueAuthor>(sql, wrapped ? CLAIM_UP_TO : CLAIM_AFTER, [
        after,
        cutoff,
        limit,
        at,
      ]);
    });
  }

  /** Records `at` as the attempt time of every placeholder row of `dids`, in one transaction. */
  markAttempted(dids: readonly string[], at: string): Promise<void> {
    if (dids.length === 0) return Promise.resolve();
    return this.#db.transaction(async (sql) => {
      await sql.unsafe(WRITE_LOCK_SQL);
      await execute(sql, MARK_ATTEMPTED, [dids, at]);
    });
  }
}
