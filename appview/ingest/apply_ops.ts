/**
 * The index write path (STYLE.md practice 9): every change from the three sources (local stream,
 * public stream, push) goes through {@link IndexWriter.applyOps}. Ops are applied in
 * `BEGIN IMMEDIATE ... COMMIT` transactions of up to `batchSize` ops with statements prepared
 * once. Writes are idempotent upserts (spec 6.2 rule 4): the same op twice leaves the same rows
 * and counters.
 *
 * Bad input never stops ingest: an op with an invalid DID, rkey, CID or handle (`invalid_op`), a
 * record that fails `validateRecord` (`invalid_record`), or a collection the index does not handle
 * (`unsupported_collection`) is skipped and counted (in memory and in `ingest_skips`). An op
 * whose SQL fails (`apply_error`) rolls back its batch; the batch is then re-run with a savepoint
 * per op so only the failing op is skipped. Failures of BEGIN or COMMIT themselves (a lock held
 * past the busy timeout, a full disk) are thrown: nothing of the batch was applied, and the caller
 * retries from its cursor.
 *
 * @module
 */

import type { DatabaseSync, StatementSync } from "node:sqlite";
import {
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
import { FollowIndexer } from "./index_graph.ts";
import { InteractionIndexer, LIKE_KIND, REPOST_KIND } from "./index_interactions.ts";
import { PostIndexer } from "./index_posts.ts";
import { HandleIndexer, ProfileCounters, ProfileIndexer } from "./index_profiles.ts";
import { Notifier } from "./notify.ts";
import { type SkipReason, SkipTally } from "./skips.ts";
import type { CollectionIndexer } from "./types.ts";

export { isPlaceholderHandle, placeholderHandle } from "./handles.ts";
export type { SkipReason } from "./skips.ts";

/**
 * Default ops per transaction. Large on purpose: index pages dirtied by random keys (DIDs, URIs)
 * are written to the WAL once per transaction, so the page volume per op falls roughly in
 * proportion to the batch (measured: 500 ops ~19 KiB of WAL per op, 5,000 ops ~4 KiB). Callers
 * with few ops (push, a live stream) still commit at once: this only caps a backlog.
 */
export const DEFAULT_BATCH_SIZE = 5_000;

/** Options of {@link IndexWriter}. */
export interface IndexWriterOptions {
  /** Clock for `indexed_at` and `updated_at` (tests pin it). */
  now?: () => Date;
  log?: Logger;
  /** Ops per transaction, 1 to 10,000. Default {@link DEFAULT_BATCH_SIZE}. */
  batchSize?: number;
}

/** Options of one {@link IndexWriter.applyOps} call. */
export interface ApplyOptions {
  /** Stream cursor stored in the same transaction as the last op (`db/state.ts` names). */
  cursor?: { name: string; value: number };
}

/** Outcome of one {@link IndexWriter.applyOps} call. */
export interface ApplyResult {
  /** Ops applied (including no-ops such as a redelivered record or an unknown delete). */
  applied: number;
  /** Ops skipped and counted by reason. */
  skipped: number;
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
}

/** Applies {@link IndexOp}s to the index database. One writer per connection. */
export class IndexWriter {
  readonly #db: DatabaseSync;
  readonly #now: () => Date;
  readonly #log: Logger;
  readonly #batchSize: number;
  readonly #indexers: ReadonlyMap<string, CollectionIndexer>;
  readonly #handles: HandleIndexer;
  readonly #skips: SkipTally;
  readonly #writeCursor: (name: string, value: number, at: string) => void;
  readonly #savepoint: { begin: StatementSync; release: StatementSync; undo: StatementSync };
  /** An account exists: its profile row makes it a known notification recipient (spec 3.1). */
  readonly #knownAccount: StatementSync;
  readonly #stats: IndexWriterStats = {
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
  };

  constructor(db: DatabaseSync, opts: IndexWriterOptions = {}) {
    const batchSize = opts.batchSize ?? DEFAULT_BATCH_SIZE;
    if (!Number.isInteger(batchSize) || batchSize < 1 || batchSize > 10_000) {
      throw new RangeError(`Batch size must be an integer from 1 to 10000: ${batchSize}`);
    }
    this.#db = db;
    this.#now = opts.now ?? (() => new Date());
    this.#log = opts.log ?? silentLogger;
    this.#batchSize = batchSize;
    const counters = new ProfileCounters(db);
    const notifier = new Notifier(db);
    this.#indexers = new Map<string, CollectionIndexer>([
      [COLLECTION_POST, new PostIndexer(db, counters, notifier)],
      [COLLECTION_LIKE, new InteractionIndexer(db, LIKE_KIND, notifier)],
      [COLLECTION_REPOST, new InteractionIndexer(db, REPOST_KIND, notifier)],
      [COLLECTION_FOLLOW, new FollowIndexer(db, counters, notifier)],
      [COLLECTION_PROFILE, new ProfileIndexer(db)],
    ]);
    this.#handles = new HandleIndexer(db);
    this.#skips = new SkipTally(db, this.#indexers);
    this.#writeCursor = prepareCursorWrite(db);
    this.#knownAccount = db.prepare("INSERT INTO profiles (did) VALUES (?) ON CONFLICT DO NOTHING");
    this.#savepoint = {
      begin: db.prepare("SAVEPOINT op"),
      release: db.prepare("RELEASE op"),
      undo: db.prepare("ROLLBACK TO op"),
    };
  }

  /**
   * Applies `ops` in order, in transactions of up to `batchSize` ops. With `opts.cursor`, the
   * cursor is stored in the transaction of the last batch, so a crash never advances the cursor
   * past ops that were not committed.
   *
   * @throws Error when a transaction cannot begin or commit (ops of that batch not applied)
   */
  applyOps(ops: readonly IndexOp[], opts: ApplyOptions = {}): ApplyResult {
    const result: ApplyResult = { applied: 0, skipped: 0 };
    if (ops.length === 0 && opts.cursor === undefined) return result;
    for (let start = 0; start < ops.length || start === 0; start += this.#batchSize) {
      const end = Math.min(ops.length, start + this.#batchSize);
      const cursor = end === ops.length ? opts.cursor : undefined;
      const batch = this.#runBatch(ops, start, end, cursor);
      result.applied += batch.applied;
      result.skipped += batch.skipped;
      if (end === ops.length) break;
    }
    return result;
  }

  /** Totals since this writer was created (a copy). */
  stats(): IndexWriterStats {
    return { ...this.#stats, skippedByReason: { ...this.#stats.skippedByReason } };
  }

  #runBatch(
    ops: readonly IndexOp[],
    start: number,
    end: number,
    cursor: ApplyOptions["cursor"],
  ): ApplyResult {
    try {
      return this.#transaction(ops, start, end, cursor, false);
    } catch (e) {
      if (!(e instanceof OpFailure)) throw e;
      this.#log.warn("Index op failed, re-running its batch op by op", {
        error: e.cause,
        op: describeOp(ops[e.index]),
      });
      this.#stats.retriedBatches++;
      return this.#transaction(ops, start, end, cursor, true);
    }
  }

  #transaction(
    ops: readonly IndexOp[],
    start: number,
    end: number,
    cursor: ApplyOptions["cursor"],
    isolate: boolean,
  ): ApplyResult {
    const result: ApplyResult = { applied: 0, skipped: 0 };
    this.#db.exec("BEGIN IMMEDIATE");
    try {
      for (let i = start; i < end; i++) {
        const applied = isolate ? this.#applyIsolated(ops[i]) : this.#applyOrFail(ops, i);
        if (applied) result.applied++;
        else result.skipped++;
      }
      this.#skips.flush(this.#now().toISOString());
      if (cursor !== undefined) {
        this.#writeCursor(cursor.name, cursor.value, this.#now().toISOString());
      }
      this.#db.exec("COMMIT");
    } catch (e) {
      if (this.#db.isTransaction) this.#db.exec("ROLLBACK");
      this.#skips.discard();
      throw e;
    }
    this.#stats.batches++;
    this.#stats.applied += result.applied;
    this.#stats.skipped += result.skipped;
    this.#skips.addTo(this.#stats.skippedByReason);
    return result;
  }

  #applyOrFail(ops: readonly IndexOp[], index: number): boolean {
    try {
      return this.#applyOne(ops[index]);
    } catch (e) {
      throw new OpFailure(index, e);
    }
  }

  #applyIsolated(op: IndexOp): boolean {
    this.#savepoint.begin.run();
    try {
      const applied = this.#applyOne(op);
      this.#savepoint.release.run();
      return applied;
    } catch (e) {
      this.#savepoint.undo.run();
      this.#savepoint.release.run();
      this.#log.warn("Index op skipped after an error", { error: e, op: describeOp(op) });
      this.#skips.add("apply_error", op, String(e));
      return false;
    }
  }

  /** Applies one op; returns false when it was skipped (and counted). */
  #applyOne(op: IndexOp): boolean {
    if (!isValidDid(op.did)) return this.#skip("invalid_op", op, `Invalid DID: ${op.did}`);
    const now = this.#now().toISOString();
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
    const checked = validateRecord(op.collection, op.record);
    if (!checked.ok) return this.#skip("invalid_record", op, checked.reason);
    const refused = indexer.put({ op, uri, cid: op.cid, value: checked.value, now });
    return refused === null ? true : this.#skip("invalid_record", op, refused);
  }

  #skip(reason: SkipReason, op: IndexOp, detail: string): false {
    this.#log.debug("Index op skipped", { reason, detail, op: describeOp(op) });
    this.#skips.add(reason, op, detail);
    return false;
  }
}

/** An op's SQL failed; carries its position so the batch can be re-run around it. */
class OpFailure extends Error {
  override readonly name = "OpFailure";
  constructor(readonly index: number, override readonly cause: unknown) {
    super(`Index op ${index} failed`);
  }
}

function describeOp(op: IndexOp): Record<string, unknown> {
  return op.kind !== "record"
    ? { kind: op.kind, did: op.did }
    : { kind: op.kind, action: op.action, did: op.did, collection: op.collection, rkey: op.rkey };
}
