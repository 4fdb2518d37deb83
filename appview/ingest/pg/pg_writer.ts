/**
 * The index write path on PostgreSQL (issue 40): {@link PgIndexWriter} has the semantics of
 * `IndexWriter` (appview/ingest/apply_ops.ts, whose module comment is the reference): ops applied
 * in order in transactions of up to `batchSize` ops, idempotent upserts, the rev gate per commit,
 * gaps queued for a backfill, skips counted in `ingest_skips`, the cursor, revs and skips written
 * in the transaction of the ops, notifications in the statement pair of the counter change, an
 * op whose SQL fails skipped alone after its batch is re-run op by op.
 *
 * It is built for round trips (one awaited statement costs about a hundred SQLite statements):
 * - the checks and flattening are pure JavaScript (`flatten.ts`, the SQLite write path's own
 *   checks and the indexers' field logic, imported), done for the next transaction while the
 *   database works on the current one;
 * - each call reserves a connection from the pool and sends its transactions on it by hand, so a
 *   transaction is three round trips whatever its size: BEGIN with the index write lock, the
 *   stored revs of its commits and the actor ids it does not know yet; the ops, then revs, gaps,
 *   skips, the cursor and COMMIT, pipelined behind them (behind their answer only when the
 *   database may refuse a handle op); and, only for new DIDs, their actor ids in between;
 * - ops are applied by the database, in order: runs of independent posts, likes, reposts, follows
 *   and their deletes by set-based statements (`fast_path.ts`), everything else by
 *   `index_apply_op` (appview/db/pg/write_functions.ts), which runs the SQLite indexers'
 *   statements op by op. Arrays travel as text literals (`arrayLiteral`).
 *
 * Commits do not wait for the WAL flush (`SET LOCAL synchronous_commit = off`, SQLite's
 * `synchronous = NORMAL`): a crash of the database server may lose the last transactions, never
 * part of one, and the cursors written in them go back with them, so the streams redeliver what
 * was lost.
 *
 * Plans: a write transaction turns off sequential scans, hash joins and merge joins
 * (`SET LOCAL`), so every statement of the write path probes indexes row by row from its input,
 * whatever the statistics say. They are stale exactly when ingest is heaviest: an index being
 * built from empty (a rebuild, a first backfill) grows faster than autovacuum analyses it, and
 * planned on "posts has 400 rows", the set-based statements hashed whole tables per run.
 *
 * One writer at a time: every transaction takes the index write lock
 * (`pg_advisory_xact_lock`, `PG_LOCK_INDEX_WRITE`) before it reads anything, so writers in other
 * processes (an API process's push, consumers, handle sync) wait for each other as SQLite's
 * writers do, ids grow in commit order, and the revs read are the revs committed. Calls on one
 * writer are queued: one transaction at a time.
 *
 * Differences from SQLite: U+0000 in text is stored as U+FFFD (`flatten.ts`); an op whose SQL
 * fails keeps the actor ids it assigned (SQLite rolls them back with the op's savepoint); an index
 * entry longer than PostgreSQL's B-tree limit (about 2,700 bytes: a hostile record's reply URI of
 * that length) fails the op, which is then skipped as `apply_error`.
 *
 * @module
 */

import postgres from "postgres";
import type { DatabaseSync } from "node:sqlite";
import type { IndexOp } from "../../../shared/ops.ts";
import { type Logger, silentLogger } from "../../../shared/log.ts";
import type { PgSql } from "../../db/pg/open.ts";
import type { IndexWriterApi, VerifiedSnapshot } from "../../db/store.ts";
import { PG_LOCK_INDEX_WRITE, PG_LOCK_NAMESPACE } from "../../db/pg/schema.ts";
import { OP_COLUMNS, OP_KIND } from "../../db/pg/write_functions.ts";
import {
  type ApplyOptions,
  type ApplyResult,
  backfillTime,
  type CommitRef,
  type CommitSpan,
  type IndexWriterOptions,
  type IndexWriterStats,
  type SnapshotResult,
  spansOf,
} from "../apply_ops.ts";
import { diffRepo } from "../backfill/repo_diff.ts";
import { type SkipReason, SkipTally } from "../skips.ts";
import {
  admitCommit,
  checkBatchSize,
  copyStats,
  countBatch,
  emptyWriterStats,
} from "../write_rules.ts";
import { INDEXED_COLLECTIONS, type PendingOp, type PreparedOp, prepareOp } from "./flatten.ts";
import { planRuns, type Run } from "./fast_path.ts";
import { readIndexedRecords } from "./indexed_records.ts";

/** Cached actor ids before the cache is emptied (about 100 bytes each). */
export const ACTOR_CACHE_MAX = 200_000;
/** Most ops per call of `index_apply_ops`. */
export const CALL_OPS = 2_000;
/**
 * Default ops per transaction on PostgreSQL (SQLite's is 20,000: there a larger transaction
 * writes fewer WAL pages). A like rewrites its post's row; PostgreSQL writes the new version on
 * the same page, touching no index (a HOT update), only while the page has room, and a page gets
 * room back only from versions no open transaction can see. In transactions of 20,000 ops of the
 * bench mix, 42% of these updates were HOT, each other one inserting entries into the post's
 * seven indexes, the GIN one included; in transactions of 2,000 ops, 90%.
 */
export const PG_DEFAULT_BATCH_SIZE = 2_000;

/** Options of {@link PgIndexWriter}: those of `IndexWriter`, and the set-based fast path. */
export interface PgIndexWriterOptions extends IndexWriterOptions {
  /**
   * Apply runs of independent ops by set-based statements (default true); false sends every op
   * through `index_apply_op` (the reference the fast path is tested against).
   */
  fastPath?: boolean;
}

/** What the database reports of an op: a handle held by another DID, or (isolated) an error. */
export interface OpReport {
  readonly holder: string | null;
  readonly error: string | null;
}

interface Batch {
  readonly ops: readonly IndexOp[];
  readonly start: number;
  readonly end: number;
  readonly spans: readonly CommitSpan[];
  readonly span: number;
  readonly spanEnd: number;
  readonly snapshot?: VerifiedSnapshot;
  /** Its ops checked and flattened ahead of its transaction (`prepareOp`, pure). */
  prepared?: PreparedOp[];
}

interface BatchResult {
  applied: number;
  skipped: number;
  stale: number;
  staleOps: number;
  previousRev?: string | null;
}

/** An op's SQL failed (the batch is re-run op by op). */
class OpFailure extends Error {
  override readonly name = "OpFailure";
  constructor(override readonly cause: unknown) {
    super("Index ops failed");
  }
}

/** A skip of one op of a batch (counted in op order). */
interface SkipEvent {
  readonly index: number;
  readonly reason: SkipReason;
  readonly detail: string;
}

/** Runs `fn` once queries made now are on their way (postgres.js sends them on a later turn). */
async function afterSend(fn: () => void): Promise<void> {
  await new Promise((resolve) => setTimeout(resolve, 0));
  fn();
}

/** Rows of the upserts the skip tally runs (`skips.ts`), collected instead of run. */
type SkipRow = [string, string, number, string, string | null, string];

/** Applies {@link IndexOp}s to the index database on PostgreSQL (module comment). */
export class PgIndexWriter implements IndexWriterApi {
  readonly #sql: PgSql;
  readonly #now: () => Date;
  readonly #log: Logger;
  readonly #batchSize: number;
  readonly #fastPath: boolean;
  #onGap: ((dids: readonly string[]) => void) | undefined;
  /** Committed actor ids by DID (bounded). */
  #ids = new Map<string, number>();
  readonly #skips: SkipTally;
  #skipRows: SkipRow[] = [];
  /**
   * The connection of the call running, reserved from the pool for the call (its transactions
   * are sent on it by hand: BEGIN pipelined with the first reads, COMMIT with the last writes).
   */
  #reserved: postgres.ReservedSql | null = null;
  /** The call running (calls are queued). */
  #queue: Promise<unknown> = Promise.resolve();
  readonly #stats: IndexWriterStats = emptyWriterStats();

  constructor(sql: PgSql, opts: PgIndexWriterOptions = {}) {
    const batchSize = checkBatchSize(opts.batchSize ?? PG_DEFAULT_BATCH_SIZE);
    this.#sql = sql;
    this.#now = opts.now ?? (() => new Date());
    this.#log = opts.log ?? silentLogger;
    this.#batchSize = batchSize;
    this.#fastPath = opts.fastPath ?? true;
    this.#onGap = opts.onGap;
    // The SQLite tally's counting, its upserts collected (flushed in one statement here).
    const collector = {
      prepare: () => ({ run: (...row: SkipRow) => void this.#skipRows.push(row) }),
    } as unknown as DatabaseSync;
    this.#skips = new SkipTally(collector, new Map([...INDEXED_COLLECTIONS].map((c) => [c, c])));
  }

  /**
   * Applies `ops` in order (`IndexWriter.applyOps`): transactions of up to `batchSize` ops,
   * extended to the end of a commit span; the cursor in the transaction of the last batch.
   *
   * @throws RangeError when `commits` spans are out of order or out of bounds (nothing applied)
   * @throws Error when a transaction cannot begin or commit (ops of that batch not applied)
   */
  applyOps(ops: readonly IndexOp[], opts: ApplyOptions = {}): Promise<ApplyResult> {
    return this.#serial(() => this.#applyOps(ops, opts));
  }

  /** Totals since this writer was created (a copy). */
  stats(): IndexWriterStats {
    return copyStats(this.#stats);
  }

  /** Sets the listener of gaps, replacing any (`IndexWriter.listenForGaps`). */
  listenForGaps(listener: ((dids: readonly string[]) => void) | undefined): void {
    this.#onGap = listener;
  }

  /** The rev of the latest commit applied for `did` (null: none), as committed. */
  async storedRev(did: string): Promise<string | null> {
    const [row] = await this.#sql`SELECT rev FROM repo_revs WHERE did = ${did}`;
    return row === undefined ? null : row.rev as string;
  }

  /**
   * Applies a verified repository whole, in one transaction (`IndexWriter.applySnapshot`): the
   * ops that make the account's rows those of the repository, planned against the rows read in
   * that transaction (`repo_diff.ts`), unless the snapshot is stale.
   *
   * @throws Error when the transaction cannot begin or commit (nothing applied)
   */
  applySnapshot(snapshot: VerifiedSnapshot): Promise<SnapshotResult> {
    return this.#serial(async () => {
      const batch: Batch = { ops: [], start: 0, end: 0, spans: [], span: 0, spanEnd: 0, snapshot };
      const result = await this.#runBatch(batch, undefined);
      return {
        applied: result.applied,
        skipped: result.skipped,
        stale: result.stale > 0,
        previousRev: result.previousRev ?? null,
      };
    });
  }

  /** Runs `fn` after the calls before it, with a connection reserved for it. */
  #serial<T>(fn: () => Promise<T>): Promise<T> {
    const withConnection = async () => {
      this.#reserved = await this.#sql.reserve();
      try {
        return await fn();
      } finally {
        this.#reserved.release();
        this.#reserved = null;
      }
    };
    const run = this.#queue.then(withConnection, withConnection);
    this.#queue = run.catch(() => {});
    return run;
  }

  async #applyOps(ops: readonly IndexOp[], opts: ApplyOptions): Promise<ApplyResult> {
    const spans = spansOf(ops, opts);
    const result: ApplyResult = spans.length > 0 || opts.commits !== undefined
      ? { applied: 0, skipped: 0, stale: 0 }
      : { applied: 0, skipped: 0 };
    if (ops.length === 0 && opts.cursor === undefined && spans.length === 0) return result;
    // The batches first (as IndexWriter.applyOps cuts them), so the next one's ops can be checked
    // while the database applies the current one's.
    const batches: Batch[] = [];
    let span = 0;
    for (let start = 0; start < ops.length || start === 0;) {
      let end = Math.min(ops.length, start + this.#batchSize);
      let next = span;
      while (next < spans.length && spans[next].end <= end && spans[next].start < end) next++;
      if (next < spans.length && spans[next].start < end) end = spans[next++].end;
      if (end === ops.length) next = spans.length;
      batches.push({ ops, start, end, spans, span, spanEnd: next });
      if (end === ops.length) break;
      start = end;
      span = next;
    }
    for (const [i, batch] of batches.entries()) {
      const following = batches[i + 1];
      const meanwhile = following === undefined
        ? undefined
        : () => following.prepared ??= prepareAll(ops, following.start, following.end);
      const last = i === batches.length - 1;
      const done = await this.#runBatch(batch, last ? opts.cursor : undefined, meanwhile);
      result.applied += done.applied;
      result.skipped += done.skipped;
      if (result.stale !== undefined) result.stale += done.stale;
    }
    return result;
  }

  async #runBatch(
    batch: Batch,
    cursor: ApplyOptions["cursor"],
    meanwhile?: () => void,
  ): Promise<BatchResult> {
    try {
      return await this.#transaction(batch, cursor, false, meanwhile);
    } catch (e) {
      if (!(e instanceof OpFailure)) throw e;
      this.#log.warn("Index ops failed, re-running their batch op by op", { error: e.cause });
      this.#stats.retriedBatches++;
      return await this.#transaction(batch, cursor, true);
    }
  }

  /**
   * One transaction of `batch` (`IndexWriter.#transaction`) on the writer's connection;
   * `meanwhile` runs while the database applies the ops.
   */
  async #transaction(
    batch: Batch,
    cursor: ApplyOptions["cursor"],
    isolate: boolean,
    meanwhile?: () => void,
  ): Promise<BatchResult> {
    const { spans, spanEnd, snapshot } = batch;
    const result: BatchResult = { applied: 0, skipped: 0, stale: 0, staleOps: 0 };
    const tx = new TxState();
    let prepared = snapshot === undefined
      ? batch.prepared ?? prepareAll(batch.ops, batch.start, batch.end)
      : [];
    if (cursor !== undefined && !Number.isSafeInteger(cursor.value)) {
      throw new RangeError(`Cursor is not a safe integer: ${cursor.value}`);
    }
    this.#skipRows = [];
    const sql = this.#reserved!;
    try {
      let { ops, end } = batch;
      // Round trip: BEGIN, the write lock, then (under it) the stored revs and unknown actor ids.
      const revDids = new Set<string>();
      for (let s = batch.span; s < spanEnd; s++) revDids.add(spans[s].commit.did);
      if (snapshot !== undefined) revDids.add(snapshot.did);
      const unknown = snapshot === undefined ? this.#unknownDids(prepared, tx) : [];
      const [, , , revRows, idRows, held] = await Promise.all([
        sql.unsafe("BEGIN").execute(),
        sql`SELECT set_config('synchronous_commit', 'off', true),
          set_config('enable_seqscan', 'off', true), set_config('enable_hashjoin', 'off', true),
          set_config('enable_mergejoin', 'off', true),
          set_config('plan_cache_mode', 'force_generic_plan', true)`.execute(),
        sql`SELECT pg_advisory_xact_lock(${PG_LOCK_NAMESPACE}, ${PG_LOCK_INDEX_WRITE})`.execute(),
        revDids.size === 0
          ? []
          : sql`SELECT did, rev FROM repo_revs WHERE did = ANY(${[...revDids]}::text[])`.execute(),
        unknown.length === 0
          ? []
          : sql`SELECT id, did FROM actors WHERE did = ANY(${unknown}::text[])`.execute(),
        snapshot === undefined ? null : readIndexedRecords(sql, snapshot.did),
      ]);
      for (const { did, rev } of revRows) tx.stored.set(did as string, rev as string);
      for (const { id, did } of idRows) tx.ids.set(did as string, id as number);
      if (snapshot !== undefined) {
        const previous = tx.storedRev(snapshot.did);
        result.previousRev = previous;
        if (previous !== null && snapshot.rev < previous && previous !== snapshot.expectedRev) {
          await sql.unsafe("ROLLBACK");
          result.stale = 1;
          return result;
        }
        ops = [...snapshot.facts, ...diffRepo(snapshot.did, held!, snapshot.records)];
        end = ops.length;
        prepared = prepareAll(ops, 0, end);
        const more = this.#unknownDids(prepared, tx);
        if (more.length > 0) {
          const rows = await sql`SELECT id, did FROM actors WHERE did = ANY(${more}::text[])`;
          for (const { id, did } of rows) tx.ids.set(did as string, id as number);
        }
      }
      // The rev gate and the clock, op by op in order (as IndexWriter.#transaction).
      const pending: PendingOp[] = [];
      const skips: SkipEvent[] = [];
      const needIds = new Set<string>();
      let span = batch.span;
      let staleUntil = -1;
      const first = snapshot === undefined ? batch.start : 0;
      for (let i = first; i < end; i++) {
        for (; span < spanEnd && spans[span].start === i; span++) {
          if (!this.#admit(spans[span].commit, tx)) {
            result.stale++;
            staleUntil = spans[span].end;
          }
        }
        const op = ops[i];
        if (i < staleUntil && op.kind === "record") {
          result.staleOps++;
          continue;
        }
        const p = prepared[i - first];
        if (p.type === "early") {
          skips.push({ index: i, ...p.skip });
          continue;
        }
        let now = this.#now().toISOString();
        if (snapshot !== undefined && op.kind === "record" && op.record !== null) {
          now = backfillTime(op.record.createdAt, now);
        }
        if (p.type === "skip") skips.push({ index: i, ...p.skip });
        else if (p.type === "noop") result.applied++;
        else {
          for (const did of p.ids) needIds.add(did);
          pending.push({ index: i, flat: p.flat, now, a: null, s: null });
        }
      }
      for (; span < spanEnd; span++) {
        if (!this.#admit(spans[span].commit, tx)) result.stale++;
      }
      // Round trip (only for new DIDs): their actor ids.
      const missing = [...needIds].filter((did) => tx.idOf(did, this.#ids) === null);
      if (missing.length > 0) await this.#assignIds(sql, missing, tx);
      for (const p of pending) {
        p.a = tx.idOf(p.flat.did, this.#ids);
        p.s = p.flat.sdid === null ? null : tx.idOf(p.flat.sdid, this.#ids);
      }
      // Round trip: the ops, then revs, gaps, skips, the cursor and COMMIT. What the database
      // may report (a handle held by another DID; with isolation, failed ops) becomes skips
      // before the writes, so only then do the writes wait for the ops' answer.
      const reporting = isolate || pending.some((p) => p.flat.k === OP_KIND.handleSet);
      const applied = this.#applyPending(sql, pending, isolate);
      if (reporting) {
        if (meanwhile !== undefined) await afterSend(meanwhile);
        this.#countReports(await applied, ops, pending, skips, result);
      } else {
        applied.catch(() => {}); // awaited below, with the writes
        result.applied += pending.length;
      }
      skips.sort((x, y) => x.index - y.index);
      for (const s of skips) {
        this.#log.debug("Index op skipped", { reason: s.reason, detail: s.detail });
        this.#skips.add(s.reason, ops[s.index], s.detail);
        result.skipped++;
      }
      const writes = this.#finalWrites(sql, tx, snapshot, cursor);
      writes.push(sql.unsafe("COMMIT").execute());
      // Behind failed ops the writes fail too (the transaction is aborted): handled here, so
      // they are not unhandled rejections when the ops' failure is thrown first.
      const written = Promise.all(writes);
      written.catch(() => {});
      if (!reporting && meanwhile !== undefined) await afterSend(meanwhile);
      // The ops' failure first: it is what the batch is re-run for.
      if (!reporting) await applied;
      await written;
    } catch (e) {
      this.#skips.discard();
      await this.#rollback(sql);
      throw e;
    } finally {
      this.#skipRows = [];
    }
    for (const [did, id] of tx.newIds) this.#rememberId(did, id);
    if (tx.gaps.size > 0) this.#announceGaps([...tx.gaps.keys()]);
    countBatch(this.#stats, result, this.#skips);
    return result;
  }

  /** The ops' reports as applied ops and skips (`IndexWriter.#applyOne`'s outcomes). */
  #countReports(
    reports: ReadonlyMap<number, OpReport>,
    ops: readonly IndexOp[],
    pending: readonly PendingOp[],
    skips: SkipEvent[],
    result: BatchResult,
  ): void {
    for (const p of pending) {
      const report = reports.get(p.index);
      if (report === undefined) {
        result.applied++;
        continue;
      }
      const op = ops[p.index];
      if (report.error !== null) {
        this.#log.warn("Index op skipped after an error", { error: report.error });
        skips.push({ index: p.index, reason: "apply_error", detail: report.error });
      } else {
        const handle = op.kind === "handle" ? op.handle : null;
        skips.push({
          index: p.index,
          reason: "handle_conflict",
          detail: `Handle ${handle} is held by ${report.holder}; only the account host can move it`,
        });
      }
    }
  }

  /** Sends revs, gaps, skips and the cursor (in the transaction of the ops). */
  #finalWrites(
    sql: postgres.ReservedSql,
    tx: TxState,
    snapshot: VerifiedSnapshot | undefined,
    cursor: ApplyOptions["cursor"],
  ): Promise<unknown>[] {
    const writes: Promise<unknown>[] = [];
    if (tx.dirty.size > 0) {
      const dids = [...tx.dirty];
      writes.push(
        sql`INSERT INTO repo_revs (did, rev, local)
          SELECT * FROM unnest(${dids}::text[], ${dids.map((d) => tx.revs.get(d)!)}::text[],
            ${dids.map((d) => (tx.local.has(d) ? 1 : 0))}::integer[])
          ON CONFLICT (did) DO UPDATE SET rev = excluded.rev,
            local = greatest(repo_revs.local, excluded.local)
          WHERE excluded.rev > repo_revs.rev`.execute(),
      );
    }
    if (snapshot !== undefined) {
      writes.push(
        sql`INSERT INTO repo_revs (did, rev, local) VALUES (${snapshot.did}, ${snapshot.rev}, 1)
          ON CONFLICT (did) DO UPDATE SET rev = excluded.rev, local = 1`.execute(),
      );
      tx.revs.set(snapshot.did, snapshot.rev);
      tx.dirty.add(snapshot.did);
    }
    const at = this.#now().toISOString();
    if (tx.gaps.size > 0) {
      writes.push(
        sql`INSERT INTO backfill_queue (did, reason, target_rev, not_before, queued_at)
          SELECT d, r, NULL, ${at}, ${at} FROM unnest(${[...tx.gaps.keys()]}::text[],
            ${[...tx.gaps.values()]}::text[]) AS g(d, r)
          ON CONFLICT (did) DO UPDATE SET reason = excluded.reason,
            target_rev = excluded.target_rev, queued_at = excluded.queued_at`.execute(),
      );
    }
    this.#skips.flush(at);
    if (this.#skipRows.length > 0) {
      const rows = this.#skipRows;
      const col = (n: number) => rows.map((r) => r[n]);
      writes.push(
        sql`INSERT INTO ingest_skips (reason, collection, count, last_detail, last_uri,
            updated_at)
          SELECT * FROM unnest(${col(0)}::text[], ${col(1)}::text[], ${col(2)}::bigint[],
            ${col(3)}::text[], ${col(4)}::text[], ${col(5)}::text[])
          ON CONFLICT (reason, collection) DO UPDATE SET
            count = ingest_skips.count + excluded.count, last_detail = excluded.last_detail,
            last_uri = excluded.last_uri, updated_at = excluded.updated_at`.execute(),
      );
    }
    if (cursor !== undefined) {
      writes.push(
        sql`INSERT INTO cursors (name, value, updated_at)
          VALUES (${cursor.name}, ${cursor.value}, ${this.#now().toISOString()})
          ON CONFLICT (name) DO UPDATE SET value = excluded.value,
            updated_at = excluded.updated_at`.execute(),
      );
    }
    return writes;
  }

  /**
   * Ends a failed transaction (a no-op when its failed COMMIT already rolled it back). On a lost
   * connection this fails too, and nothing more is needed: the server rolled back.
   */
  async #rollback(sql: postgres.ReservedSql): Promise<void> {
    await sql.unsafe("ROLLBACK").catch(() => {});
  }

  /** DIDs of `prepared` whose id neither the cache nor the transaction knows. */
  #unknownDids(prepared: readonly PreparedOp[], tx: TxState): string[] {
    const out = new Set<string>();
    const check = (did: string | null) => {
      if (did !== null && !this.#ids.has(did) && !tx.ids.has(did)) out.add(did);
    };
    for (const p of prepared) {
      if (p.type !== "apply") continue;
      check(p.flat.did);
      check(p.flat.sdid);
    }
    return [...out];
  }

  /** Assigns actor ids to `dids` (none has one as far as this transaction knows). */
  async #assignIds(sql: postgres.ReservedSql, dids: string[], tx: TxState): Promise<void> {
    const rows = await sql`WITH added AS (
        INSERT INTO actors (did) SELECT d FROM unnest(${dids}::text[]) AS d ORDER BY d
        ON CONFLICT DO NOTHING RETURNING id, did)
      SELECT id, did, true AS added FROM added
      UNION ALL SELECT id, did, false FROM actors WHERE did = ANY(${dids}::text[])`;
    for (const { id, did, added } of rows) {
      if (added) tx.newIds.set(did as string, id as number);
      tx.ids.set(did as string, id as number);
    }
    // A DID another connection interned meanwhile (outside the write lock): visible now.
    const late = dids.filter((did) => !tx.ids.has(did));
    if (late.length > 0) {
      for (
        const { id, did } of await sql`SELECT id, did FROM actors WHERE did = ANY(${late}::text[])`
      ) {
        tx.ids.set(did as string, id as number);
      }
    }
    for (const did of dids) {
      if (!tx.ids.has(did)) throw new Error(`No actor id for ${did}`);
    }
  }

  /** Applies the pending ops in order; returns what the database reported, by op index. */
  async #applyPending(
    sql: postgres.ReservedSql,
    pending: readonly PendingOp[],
    isolate: boolean,
  ): Promise<Map<number, OpReport>> {
    const reports = new Map<number, OpReport>();
    const runs: Run[] = this.#fastPath && !isolate ? planRuns(pending) : generalRuns(pending);
    try {
      const calls: Promise<postgres.Row[]>[] = [];
      let call: Run[] = [];
      let size = 0;
      for (const run of runs) {
        if (size + run.ops.length > CALL_OPS && call.length > 0) {
          calls.push(callApplyOps(sql, call, isolate));
          call = [];
          size = 0;
        }
        call.push(run);
        size += run.ops.length;
      }
      if (call.length > 0) calls.push(callApplyOps(sql, call, isolate));
      for (const rows of await Promise.all(calls)) {
        for (const r of rows) {
          reports.set(r.index as number, {
            holder: r.o_holder as string | null,
            error: r.o_error as string | null,
          });
        }
      }
    } catch (e) {
      if (e instanceof postgres.PostgresError) throw new OpFailure(e);
      throw e;
    }
    return reports;
  }

  /** `IndexWriter.#admit` against the revs this transaction read and decided. */
  #admit(commit: CommitRef, tx: TxState): boolean {
    return admitCommit(commit, tx.storedRev(commit.did), tx, this.#log);
  }

  #rememberId(did: string, id: number): void {
    if (this.#ids.size >= ACTOR_CACHE_MAX) this.#ids = new Map();
    this.#ids.set(did, id);
  }

  #announceGaps(dids: string[]): void {
    try {
      this.#onGap?.(dids);
    } catch (e) {
      this.#log.error("Gap listener failed", { error: e });
    }
  }
}

/** What one transaction read and decided. */
class TxState {
  /** Revs read from `repo_revs`. */
  readonly stored = new Map<string, string>();
  /** Revs decided by this transaction (passed over included). */
  readonly revs = new Map<string, string | null>();
  readonly dirty = new Set<string>();
  readonly local = new Set<string>();
  readonly gaps = new Map<string, "gap" | "unknown">();
  /** Actor ids read or assigned by this transaction. */
  readonly ids = new Map<string, number>();
  /** Of those, the ones it assigned (cached after COMMIT). */
  readonly newIds = new Map<string, number>();

  storedRev(did: string): string | null {
    const decided = this.revs.get(did);
    if (decided !== undefined) return decided;
    return this.stored.get(did) ?? null;
  }

  idOf(did: string, committed: ReadonlyMap<string, number>): number | null {
    return committed.get(did) ?? this.ids.get(did) ?? null;
  }
}

/**
 * `prepareOp` of ops `[start, end)`. An op it throws on (input the types rule out) is skipped as
 * `apply_error`, as SQLite's write path skips an op whose indexing throws.
 */
function prepareAll(ops: readonly IndexOp[], start: number, end: number): PreparedOp[] {
  const out: PreparedOp[] = new Array(end - start);
  for (let i = start; i < end; i++) {
    try {
      out[i - start] = prepareOp(ops[i]);
    } catch (e) {
      out[i - start] = { type: "skip", skip: { reason: "apply_error", detail: String(e) } };
    }
  }
  return out;
}

/** `pending` in runs applied one by one (no fast path, or the re-run after a failure). */
function generalRuns(pending: readonly PendingOp[]): Run[] {
  const runs: Run[] = [];
  for (let i = 0; i < pending.length; i += CALL_OPS) {
    const ops = pending.slice(i, i + CALL_OPS);
    runs.push({ mask: 0, ops, madeKnown: ops.map(() => false) });
  }
  return runs;
}

/**
 * One call of `index_apply_ops` over `runs` (write_functions.ts), sent at once; its rows carry the
 * batch's op index (`index`).
 */
function callApplyOps(
  sql: postgres.ReservedSql,
  runs: readonly Run[],
  isolate: boolean,
): Promise<postgres.Row[]> {
  const ops = runs.flatMap((run) => run.ops);
  const columns: unknown[] = OP_COLUMNS.map(([name]) =>
    ops.map((p) => {
      switch (name) {
        case "a":
          return p.a;
        case "s":
          return p.s;
        case "now":
          return p.now;
        default:
          return p.flat[name];
      }
    })
  );
  const known = runs.flatMap((run) => run.madeKnown.map((m) => (m ? 1 : 0)));
  // Positions are the ops' indexes in the batch (unique in the transaction).
  const bounds = runs.flatMap((run) => [
    run.ops[0].index,
    run.ops[run.ops.length - 1].index,
    run.mask,
  ]);
  const n = OP_COLUMNS.length;
  // Arrays go as text literals (arrayLiteral), cast on the server.
  const params = OP_COLUMNS.map(([, type], i) => `$${i + 2}::text::${type}[]`).join(", ");
  const literals = [ops.map((p) => p.index), ...columns, known, bounds].map((values) =>
    arrayLiteral(values as readonly (string | number | null)[])
  );
  return sql.unsafe(
    `SELECT o_pos, o_holder, o_error FROM index_apply_ops($1::text::integer[], ${params},
      $${n + 2}::text::smallint[], $${n + 3}::text::integer[], $${n + 4})`,
    [...literals, isolate],
    { prepare: true },
  ).execute().then((rows) => rows.map((r) => ({ ...r, index: r.o_pos })));
}

const ARRAY_SPECIALS = /["\\]/;
const ARRAY_ESCAPES = /["\\]/g;

/**
 * A PostgreSQL array literal of `values` (strings quoted, `"` and `\\` escaped, null as NULL):
 * what postgres.js makes of an array parameter, at a fraction of its cost (it runs two regular
 * expressions over every element; here one test, and the replacement only where it is needed).
 */
export function arrayLiteral(values: readonly (string | number | null)[]): string {
  const parts = new Array<string>(values.length);
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (v === null) parts[i] = "NULL";
    else if (typeof v === "number") parts[i] = String(v);
    else parts[i] = ARRAY_SPECIALS.test(v) ? `"${v.replace(ARRAY_ESCAPES, "\\$&")}"` : `"${v}"`;
  }
  return `{${parts.join(",")}}`;
}
