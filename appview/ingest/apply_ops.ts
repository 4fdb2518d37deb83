/**
 * The index write path (docs/architecture.md 6.9): every change from the three sources (local stream,
 * public stream, push) goes through {@link IndexWriter.applyOps}. Ops are applied in
 * `BEGIN IMMEDIATE ... COMMIT` transactions of up to `batchSize` ops with statements prepared
 * once. Writes are idempotent upserts (spec 6.2 rule 4): the same op twice leaves the same rows
 * and counters.
 * Full-text rows are the exception to "in op order": they are queued during the transaction
 * and written just before COMMIT (`indexers/search_writes.ts`), which keeps FTS5 from writing a
 * segment per op.
 *
 * Bad input never stops ingest: an op with an invalid DID, rkey, CID or handle (`invalid_op`), a
 * record that fails `validateRecord` (`invalid_record`; not checked again when the op says it
 * was, `RecordOp.checked`), or a collection the index does not handle
 * (`unsupported_collection`) is skipped and counted (in memory and in `ingest_skips`). An op
 * whose SQL fails (`apply_error`) rolls back its batch; the batch is then re-run with a savepoint
 * per op so only the failing op is skipped. Failures of BEGIN or COMMIT themselves (a lock held
 * past the busy timeout, a full disk) are thrown: nothing of the batch was applied, and the caller
 * retries from its cursor.
 *
 * Ordering per repository: ops may carry the commit they belong to ({@link CommitRef}, option
 * `commit` or `commits`). Such a commit is applied only when its rev fits the rev of the latest
 * commit applied for that repository (`repo_revs`), as its {@link RevGate} says, and that rev is
 * then stored in the same transaction. So a late push of commit N can no longer re-create a record
 * that the local stream already deleted in N+1, nor a rewound public stream undo newer commits.
 * The stored rev is written once per repository per transaction, and read at most once per
 * repository while no other connection writes: revs this writer read or committed are kept in a
 * bounded cache, which is emptied whenever `PRAGMA data_version` (checked once per transaction,
 * under its write lock) shows a commit by another connection, such as a consumer running as its
 * own process. So this relies on one writer per connection, as {@link IndexWriter} says.
 *
 * Only record ops are gated: the handle and account ops of a commit (`HandleOp` of a push,
 * `AccountOp` of a first commit) and account status ops state current facts, not repository history, and are applied
 * regardless. A commit passed over is counted (`stale`), not skipped.
 *
 * Gaps (docs/behaviour.md 6.2 rule 8): a local-stream commit (`"newer"`) whose `since` is not the
 * stored rev shows that commits of the repository were missed (or, with no stored rev, that the
 * index has no history of it). It is applied as usual, and the repository is queued for a
 * backfill (`backfill_queue`) in the same transaction, so the cursor never passes a gap whose
 * repair was not recorded; {@link IndexWriterOptions.onGap} hears of it after COMMIT. The check
 * is one string comparison per commit.
 *
 * A backfill applies a whole verified repository through {@link IndexWriter.applySnapshot}: in
 * one transaction it checks the repository's rev, asks the snapshot for its ops against the rows
 * the index holds (creates, updates and deletes, so the account's rows end up exactly those of the
 * repository) and applies them through the same per-op path, with counters and notifications as
 * for any op; indexing times of its records are the records' `createdAt` when earlier than now
 * (the reference AppView's `sortAt`), so old content sorts into its place, not on top.
 *
 * @module
 */

import type { DatabaseSync, StatementSync } from "node:sqlite";
import {
  COLLECTION_BLOCK,
  COLLECTION_FOLLOW,
  COLLECTION_LIKE,
  COLLECTION_POST,
  COLLECTION_PROFILE,
  COLLECTION_REPOST,
} from "../../shared/nsid.ts";
import type { IndexOp } from "../../shared/ops.ts";
import { validateRecord } from "../../shared/records.ts";
import { isValidDid, isValidHandle, isValidRecordKey } from "../../shared/syntax.ts";
import { type Logger, silentLogger } from "../../shared/log.ts";
import { prepareCursorWrite } from "../db/state.ts";
import { prepareGapEnqueue } from "../db/backfill_state.ts";
import { ActorIds } from "./indexers/actors.ts";
import { AccountStatusIndexer } from "./indexers/index_account_status.ts";
import { BlockIndexer } from "./indexers/index_blocks.ts";
import { FollowIndexer } from "./indexers/index_graph.ts";
import { InteractionIndexer, LIKE_KIND, REPOST_KIND } from "./indexers/index_interactions.ts";
import { PostIndexer } from "./indexers/index_posts.ts";
import { HandleIndexer, ProfileCounters, ProfileIndexer } from "./indexers/index_profiles.ts";
import { Notifier } from "./indexers/notify.ts";
import { SearchIndexWrites } from "./indexers/search_writes.ts";
import { type SkipReason, SkipTally } from "./skips.ts";
import {
  admitCommit,
  checkBatchSize,
  type CommitRef,
  copyStats,
  countBatch,
  emptyWriterStats,
  type IndexWriterStats,
} from "./write_rules.ts";
import type { CollectionIndexer } from "./types.ts";

export type { SkipReason } from "./skips.ts";
export type { CommitRef, IndexWriterStats, RevGate } from "./write_rules.ts";

/**
 * Default ops per transaction. Large on purpose: index pages dirtied by random keys (DIDs, URIs)
 * are written to the WAL once per transaction, so the page volume per op falls roughly in
 * proportion to the batch (measured at 200k ops of the bench mix: 5,000 ops per transaction
 * 10,200 ops/s, 20,000 ops 12,000 ops/s, 40,000 ops 13,300 ops/s). 20,000 bounds a transaction
 * to about 1.5 s, the longest a backlog may hold the write lock and the event loop of a consumer
 * running inside the server. Callers with few ops (push, a live stream) still commit at once:
 * this only caps a backlog.
 */
export const DEFAULT_BATCH_SIZE = 20_000;

/** Cached repository revs before the cache is emptied (about 100 bytes each). */
export const REV_CACHE_MAX = 200_000;

/** Options of {@link IndexWriter}. */
export interface IndexWriterOptions {
  /** Clock for `indexed_at` and `updated_at` (tests pin it). */
  now?: () => Date;
  log?: Logger;
  /** Ops per transaction, 1 to 100,000. Default {@link DEFAULT_BATCH_SIZE}. */
  batchSize?: number;
  /**
   * Called after a COMMIT that queued repositories for a backfill (gaps, see the module notes),
   * with their DIDs. It must not throw (an exception is logged).
   */
  onGap?: (dids: readonly string[]) => void;
}

/**
 * A verified repository to apply whole (a backfill, {@link IndexWriter.applySnapshot}).
 */
export interface RepoSnapshot {
  /** Repository DID. */
  readonly did: string;
  /** Rev of the repository's commit. */
  readonly rev: string;
  /**
   * The stored rev read before the repository was fetched (null: none). A snapshot older than the
   * stored rev is applied only when the stored rev is still this one: nothing was applied
   * meanwhile, so the account host itself is behind the index (restored from a backup) and is
   * taken as the truth. Otherwise the snapshot is stale: nothing is applied.
   */
  readonly expectedRev: string | null;
  /**
   * The ops that make the account's rows those of the repository, computed inside the
   * transaction (so against the rows as they are there) from the stored rev.
   */
  plan(): readonly IndexOp[];
}

/** Outcome of {@link IndexWriter.applySnapshot}. */
export interface SnapshotResult {
  /** Ops applied; 0 when stale. */
  applied: number;
  skipped: number;
  /** The snapshot was older than what the index applied meanwhile: nothing was applied. */
  stale: boolean;
  /** The rev stored before the snapshot (null: none). */
  previousRev: string | null;
}

/** Ops `[start, end)` of one {@link IndexWriter.applyOps} call that make up one commit. */
export interface CommitSpan {
  readonly start: number;
  readonly end: number;
  readonly commit: CommitRef;
}

/** Options of one {@link IndexWriter.applyOps} call. */
export interface ApplyOptions {
  /** Stream cursor stored in the same transaction as the last op (`db/state.ts` names). */
  cursor?: { name: string; value: number };
  /** Every op of the call belongs to this commit. */
  commit?: CommitRef;
  /**
   * The commits among the ops, in order: spans sorted, not overlapping, within the ops (empty
   * spans allowed). Ops outside every span are applied without gating. A span is never split
   * across transactions. Not together with `commit`.
   */
  commits?: readonly CommitSpan[];
}

/** Outcome of one {@link IndexWriter.applyOps} call. */
export interface ApplyResult {
  /** Ops applied (including no-ops such as a redelivered record or an unknown delete). */
  applied: number;
  /** Ops skipped and counted by reason. */
  skipped: number;
  /**
   * Present when the call carried commits: how many were passed over (already applied, or not
   * the next one for a push). Their record ops count neither as applied nor as skipped.
   */
  stale?: number;
}

/** Applies {@link IndexOp}s to the index database. One writer per connection. */
export class IndexWriter {
  readonly #db: DatabaseSync;
  readonly #now: () => Date;
  readonly #log: Logger;
  readonly #batchSize: number;
  readonly #indexers: ReadonlyMap<string, CollectionIndexer>;
  readonly #handles: HandleIndexer;
  readonly #statuses: AccountStatusIndexer;
  readonly #actors: ActorIds;
  readonly #search: SearchIndexWrites;
  readonly #skips: SkipTally;
  readonly #writeCursor: (name: string, value: number, at: string) => void;
  readonly #savepoint: { begin: StatementSync; release: StatementSync; undo: StatementSync };
  /** An account exists: its profile row makes it a known notification recipient (spec 3.1). */
  readonly #knownAccount: StatementSync;
  readonly #readRev: StatementSync;
  readonly #writeRev: StatementSync;
  readonly #forceRev: StatementSync;
  readonly #enqueueGap: (did: string, reason: "gap" | "unknown", at: string) => void;
  #onGap: ((dids: readonly string[]) => void) | undefined;
  readonly #dataVersion: StatementSync;
  /** `PRAGMA data_version` when {@link #revs} was last known to match the database. */
  #revsVersion = -1;
  /** Committed revs by DID, as this connection last read or wrote them (bounded). */
  #revs = new Map<string, string>();
  /** Revs the open transaction decided on, passed over included (cleared at its start and end). */
  readonly #txRevs = new Map<string, string | null>();
  /** DIDs whose rev the open transaction advanced (written before COMMIT). */
  readonly #txDirty = new Set<string>();
  /** Of those, the ones a commit from the account host advanced (`repo_revs.local`). */
  readonly #txLocal = new Set<string>();
  /** DIDs the open transaction found a gap in, with the kind of gap (queued before COMMIT). */
  readonly #txGaps = new Map<string, "gap" | "unknown">();
  /** The open transaction applies a snapshot: record ops are indexed at their `createdAt`. */
  #backfilling = false;
  readonly #stats: IndexWriterStats = emptyWriterStats();

  constructor(db: DatabaseSync, opts: IndexWriterOptions = {}) {
    const batchSize = checkBatchSize(opts.batchSize ?? DEFAULT_BATCH_SIZE);
    this.#db = db;
    this.#now = opts.now ?? (() => new Date());
    this.#log = opts.log ?? silentLogger;
    this.#batchSize = batchSize;
    const counters = new ProfileCounters(db);
    const actors = new ActorIds(db);
    this.#actors = actors;
    const notifier = new Notifier(db);
    this.#search = new SearchIndexWrites(db);
    this.#indexers = new Map<string, CollectionIndexer>([
      [COLLECTION_POST, new PostIndexer(db, actors, counters, notifier, this.#search)],
      [COLLECTION_LIKE, new InteractionIndexer(db, LIKE_KIND, actors, notifier)],
      [COLLECTION_REPOST, new InteractionIndexer(db, REPOST_KIND, actors, notifier)],
      [COLLECTION_FOLLOW, new FollowIndexer(db, actors, counters, notifier)],
      [COLLECTION_BLOCK, new BlockIndexer(db, actors)],
      [COLLECTION_PROFILE, new ProfileIndexer(db)],
    ]);
    this.#handles = new HandleIndexer(db);
    this.#statuses = new AccountStatusIndexer(db, actors, this.#search);
    this.#skips = new SkipTally(db, this.#indexers);
    this.#writeCursor = prepareCursorWrite(db);
    this.#knownAccount = db.prepare("INSERT INTO profiles (did) VALUES (?) ON CONFLICT DO NOTHING");
    this.#readRev = db.prepare("SELECT rev FROM repo_revs WHERE did = ?");
    this.#writeRev = db.prepare(
      `INSERT INTO repo_revs (did, rev, local) VALUES (?, ?, ?)
       ON CONFLICT (did) DO UPDATE SET rev = excluded.rev, local = max(local, excluded.local)
       WHERE excluded.rev > repo_revs.rev`,
    );
    this.#forceRev = db.prepare(
      `INSERT INTO repo_revs (did, rev, local) VALUES (?, ?, 1)
       ON CONFLICT (did) DO UPDATE SET rev = excluded.rev, local = 1`,
    );
    this.#enqueueGap = prepareGapEnqueue(db);
    this.#onGap = opts.onGap;
    this.#dataVersion = db.prepare("PRAGMA data_version");
    this.#savepoint = {
      begin: db.prepare("SAVEPOINT op"),
      release: db.prepare("RELEASE op"),
      undo: db.prepare("ROLLBACK TO op"),
    };
  }

  /**
   * Applies `ops` in order, in transactions of up to `batchSize` ops (extended to the end of a
   * commit span, which is never split). With `opts.cursor`, the cursor is stored in the
   * transaction of the last batch, so a crash never advances the cursor past ops that were not
   * committed. With `opts.commit` or `opts.commits`, each commit is gated by its rev (module
   * comment, {@link RevGate}) inside the transaction that applies it.
   *
   * @throws RangeError when `commits` spans are out of order or out of bounds (nothing applied)
   * @throws Error when a transaction cannot begin or commit (ops of that batch not applied)
   */
  applyOps(ops: readonly IndexOp[], opts: ApplyOptions = {}): ApplyResult {
    const spans = spansOf(ops, opts);
    const result: ApplyResult = spans.length > 0 || opts.commits !== undefined
      ? { applied: 0, skipped: 0, stale: 0 }
      : { applied: 0, skipped: 0 };
    if (ops.length === 0 && opts.cursor === undefined && spans.length === 0) return result;
    let span = 0; // first span of the batch
    for (let start = 0; start < ops.length || start === 0;) {
      let end = Math.min(ops.length, start + this.#batchSize);
      let next = span;
      while (next < spans.length && spans[next].end <= end && spans[next].start < end) next++;
      if (next < spans.length && spans[next].start < end) end = spans[next++].end;
      if (end === ops.length) next = spans.length; // empty spans at the very end
      const cursor = end === ops.length ? opts.cursor : undefined;
      const batch = this.#runBatch({ ops, start, end, spans, span, spanEnd: next }, cursor);
      result.applied += batch.applied;
      result.skipped += batch.skipped;
      if (result.stale !== undefined) result.stale += batch.stale!;
      if (end === ops.length) break;
      start = end;
      span = next;
    }
    return result;
  }

  /** Totals since this writer was created (a copy). */
  stats(): IndexWriterStats {
    return copyStats(this.#stats);
  }

  /**
   * Sets the listener of gaps ({@link IndexWriterOptions.onGap}), replacing any: the backfill
   * worker, made after the context, listens through this.
   */
  listenForGaps(listener: ((dids: readonly string[]) => void) | undefined): void {
    this.#onGap = listener;
  }

  /**
   * The rev of the latest commit applied for `did` (null: none), as committed. Read outside a
   * transaction (a backfill reads it before fetching: {@link RepoSnapshot.expectedRev}).
   */
  storedRev(did: string): string | null {
    const row = this.#readRev.get(did) as { rev: string } | undefined;
    return row === undefined ? null : row.rev;
  }

  /**
   * Applies a verified repository whole, in one transaction (module notes): unless the snapshot
   * is stale ({@link RepoSnapshot.expectedRev}), its ops replace the account's rows and its rev
   * becomes the stored rev, also when that moves the rev backwards (a restored account host).
   *
   * @throws Error when the transaction cannot begin or commit (nothing applied)
   */
  applySnapshot(snapshot: RepoSnapshot): SnapshotResult {
    const batch: Batch = { ops: [], start: 0, end: 0, spans: [], span: 0, spanEnd: 0, snapshot };
    const result = this.#runBatch(batch, undefined);
    return {
      applied: result.applied,
      skipped: result.skipped,
      stale: result.stale > 0,
      previousRev: result.previousRev ?? null,
    };
  }

  #runBatch(batch: Batch, cursor: ApplyOptions["cursor"]): BatchResult {
    try {
      return this.#transaction(batch, cursor, false);
    } catch (e) {
      if (!(e instanceof OpFailure)) throw e;
      this.#log.warn("Index op failed, re-running its batch op by op", {
        error: e.cause,
        op: e.index < 0 ? "(full-text index writes of the batch)" : describeOp(e.op!),
      });
      this.#stats.retriedBatches++;
      return this.#transaction(batch, cursor, true);
    }
  }

  #transaction(batch: Batch, cursor: ApplyOptions["cursor"], isolate: boolean): BatchResult {
    const { spans, spanEnd, snapshot } = batch;
    let { ops, end } = batch;
    const result: BatchResult = { applied: 0, skipped: 0, stale: 0, staleOps: 0 };
    this.#clearTx();
    this.#db.exec("BEGIN IMMEDIATE");
    try {
      // Under the write lock: no other connection can commit until this transaction ends.
      const version = (this.#dataVersion.get() as { data_version: number }).data_version;
      if (version !== this.#revsVersion) {
        this.#revs.clear();
        this.#revsVersion = version;
      }
      if (snapshot !== undefined) {
        const previous = this.#storedInTx(snapshot.did);
        result.previousRev = previous;
        if (previous !== null && snapshot.rev < previous && previous !== snapshot.expectedRev) {
          this.#db.exec("ROLLBACK");
          result.stale = 1;
          return result;
        }
        ops = snapshot.plan();
        end = ops.length;
        this.#backfilling = true;
      }
      let span = batch.span;
      /** Ops before this index belong to a commit passed over. */
      let staleUntil = -1;
      for (let i = batch.start; i < end; i++) {
        for (; span < spanEnd && spans[span].start === i; span++) {
          if (!this.#admit(spans[span].commit)) {
            result.stale++;
            staleUntil = spans[span].end;
          }
        }
        if (i < staleUntil && ops[i].kind === "record") {
          result.staleOps++;
          continue;
        }
        const applied = isolate ? this.#applyIsolated(ops[i]) : this.#applyOrFail(ops, i);
        if (applied) result.applied++;
        else result.skipped++;
      }
      for (; span < spanEnd; span++) { // commits without ops at the end
        if (!this.#admit(spans[span].commit)) result.stale++;
      }
      this.#flushSearch();
      for (const did of this.#txDirty) {
        this.#writeRev.run(did, this.#txRevs.get(did)!, this.#txLocal.has(did) ? 1 : 0);
      }
      if (snapshot !== undefined) {
        this.#forceRev.run(snapshot.did, snapshot.rev);
        this.#txRevs.set(snapshot.did, snapshot.rev);
        this.#txDirty.add(snapshot.did);
      }
      const at = this.#now().toISOString();
      for (const [did, reason] of this.#txGaps) this.#enqueueGap(did, reason, at);
      this.#skips.flush(at);
      if (cursor !== undefined) {
        this.#writeCursor(cursor.name, cursor.value, this.#now().toISOString());
      }
      this.#db.exec("COMMIT");
      this.#actors.commit();
      for (const did of this.#txDirty) this.#rememberRev(did, this.#txRevs.get(did)!);
      if (this.#txGaps.size > 0) this.#announceGaps([...this.#txGaps.keys()]);
    } catch (e) {
      if (this.#db.isTransaction) this.#db.exec("ROLLBACK");
      this.#search.discard();
      this.#actors.rollback();
      this.#skips.discard();
      throw e;
    } finally {
      this.#clearTx();
    }
    countBatch(this.#stats, result, this.#skips);
    return result;
  }

  #clearTx(): void {
    this.#txRevs.clear();
    this.#txDirty.clear();
    this.#txLocal.clear();
    this.#txGaps.clear();
    this.#backfilling = false;
  }

  #announceGaps(dids: string[]): void {
    try {
      this.#onGap?.(dids);
    } catch (e) {
      this.#log.error("Gap listener failed", { error: e });
    }
  }

  /** The stored rev of `did` as the open transaction sees it (null: none). */
  #storedInTx(did: string): string | null {
    let stored: string | null | undefined = this.#txRevs.get(did) ?? this.#revs.get(did);
    if (stored === undefined) {
      const row = this.#readRev.get(did) as { rev: string } | undefined;
      stored = row === undefined ? null : row.rev;
      if (stored !== null) this.#rememberRev(did, stored);
    }
    return stored;
  }

  /**
   * Decides whether `commit` is applied ({@link RevGate}) against the stored rev of its
   * repository, as seen by the open transaction; when it is, its rev becomes that repository's
   * rev (written before COMMIT). A local-stream commit whose `since` is not the stored rev is a
   * gap: the repository is queued for a backfill (module notes).
   */
  #admit(commit: CommitRef): boolean {
    const tx = {
      revs: this.#txRevs,
      dirty: this.#txDirty,
      local: this.#txLocal,
      gaps: this.#txGaps,
    };
    return admitCommit(commit, this.#storedInTx(commit.did), tx, this.#log);
  }

  #rememberRev(did: string, rev: string): void {
    if (this.#revs.size >= REV_CACHE_MAX) this.#revs = new Map();
    this.#revs.set(did, rev);
  }

  /**
   * Writes the batch's queued full-text changes. A failure is attributed to no single op
   * (index -1): the batch is re-run op by op, which writes them per op and finds the culprit.
   */
  #flushSearch(): void {
    try {
      this.#search.flush();
    } catch (e) {
      throw new OpFailure(-1, e);
    }
  }

  #applyOrFail(ops: readonly IndexOp[], index: number): boolean {
    try {
      return this.#applyOne(ops[index]);
    } catch (e) {
      throw new OpFailure(index, e, ops[index]);
    }
  }

  #applyIsolated(op: IndexOp): boolean {
    this.#savepoint.begin.run();
    const mark = this.#actors.mark();
    try {
      const applied = this.#applyOne(op);
      this.#search.flush(); // inside the op's savepoint: a failing write skips only this op
      this.#savepoint.release.run();
      return applied;
    } catch (e) {
      this.#savepoint.undo.run();
      this.#search.discard();
      this.#actors.undoTo(mark);
      this.#savepoint.release.run();
      this.#log.warn("Index op skipped after an error", { error: e, op: describeOp(op) });
      this.#skips.add("apply_error", op, String(e));
      return false;
    }
  }

  /** Applies one op; returns false when it was skipped (and counted). */
  #applyOne(op: IndexOp): boolean {
    if (!isValidDid(op.did)) return this.#skip("invalid_op", op, `Invalid DID: ${op.did}`);
    let now = this.#now().toISOString();
    if (this.#backfilling && op.kind === "record" && op.record !== null) {
      now = backfillTime(op.record.createdAt, now);
    }
    if (op.kind === "handle") {
      if (op.handle !== null && !isValidHandle(op.handle)) {
        return this.#skip("invalid_op", op, `Invalid handle: ${op.handle}`);
      }
      const holder = this.#handles.apply(
        op.handle === null ? op : { ...op, handle: op.handle.toLowerCase() },
        now,
      );
      if (holder === null) return true;
      return this.#skip(
        "handle_conflict",
        op,
        `Handle ${op.handle} is held by ${holder}; only the account host can move it`,
      );
    }
    if (op.kind === "account") {
      this.#knownAccount.run(op.did);
      return true;
    }
    if (op.kind === "account_status") {
      this.#statuses.apply(op, now);
      return true;
    }
    const indexer = this.#indexers.get(op.collection);
    if (indexer === undefined) {
      return this.#skip("unsupported_collection", op, `Unsupported collection: ${op.collection}`);
    }
    if (!isValidRecordKey(op.rkey)) {
      return this.#skip("invalid_op", op, `Invalid record key: ${op.rkey}`);
    }
    const uri = `at://${op.did}/${op.collection}/${op.rkey}`;
    if (op.action === "delete") {
      indexer.remove({ op, uri, now });
      return true;
    }
    if (typeof op.cid !== "string" || op.cid === "") {
      return this.#skip("invalid_op", op, `Record has no CID: ${uri}`);
    }
    let value: Readonly<Record<string, unknown>>;
    if (op.checked === true && op.record !== null) value = op.record;
    else {
      const checked = validateRecord(op.collection, op.record);
      if (!checked.ok) return this.#skip("invalid_record", op, checked.reason);
      value = checked.value;
    }
    const refused = indexer.put({ op, uri, cid: op.cid, value, now });
    return refused === null ? true : this.#skip("invalid_record", op, refused);
  }

  #skip(reason: SkipReason, op: IndexOp, detail: string): false {
    this.#log.debug("Index op skipped", { reason, detail, op: describeOp(op) });
    this.#skips.add(reason, op, detail);
    return false;
  }
}

/**
 * Ops `[start, end)` of one transaction and the commit spans `[span, spanEnd)` that start there;
 * or a snapshot, whose ops are planned inside the transaction.
 */
interface Batch {
  readonly ops: readonly IndexOp[];
  readonly start: number;
  readonly end: number;
  readonly spans: readonly CommitSpan[];
  readonly span: number;
  readonly spanEnd: number;
  readonly snapshot?: RepoSnapshot;
}

interface BatchResult {
  applied: number;
  skipped: number;
  stale: number;
  staleOps: number;
  /** A snapshot's stored rev before it. */
  previousRev?: string | null;
}

/**
 * Indexing time of a backfilled record: its `createdAt` when that is a time before `now` (ISO
 * 8601, normalised as `toISOString` writes it, so text order stays time order), else `now`.
 */
export function backfillTime(createdAt: unknown, now: string): string {
  if (typeof createdAt !== "string") return now;
  const ms = Date.parse(createdAt);
  if (!Number.isFinite(ms)) return now;
  const at = new Date(Math.max(0, ms)).toISOString();
  return at < now ? at : now;
}

/** The commit spans of a call, checked: sorted, not overlapping, within the ops. */
export function spansOf(ops: readonly IndexOp[], opts: ApplyOptions): readonly CommitSpan[] {
  if (opts.commit !== undefined) {
    if (opts.commits !== undefined) {
      throw new RangeError("Options commit and commits cannot be given together");
    }
    return [{ start: 0, end: ops.length, commit: opts.commit }];
  }
  const spans = opts.commits ?? [];
  let last = 0;
  for (const { start, end } of spans) {
    if (!Number.isInteger(start) || !Number.isInteger(end) || start < last || end < start) {
      throw new RangeError(`Commit span out of order: ${start} to ${end} after ${last}`);
    }
    last = end;
  }
  if (last > ops.length) {
    throw new RangeError(`Commit span ends past the ops: ${last} > ${ops.length}`);
  }
  return spans;
}

/** An op's SQL failed; carries its position so the batch can be re-run around it. */
class OpFailure extends Error {
  override readonly name = "OpFailure";
  constructor(
    readonly index: number,
    override readonly cause: unknown,
    readonly op?: IndexOp,
  ) {
    super(`Index op ${index} failed`);
  }
}

function describeOp(op: IndexOp): Record<string, unknown> {
  return op.kind !== "record"
    ? { kind: op.kind, did: op.did }
    : { kind: op.kind, action: op.action, did: op.did, collection: op.collection, rkey: op.rkey };
}
