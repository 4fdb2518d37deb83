/**
 * The index store: how everything above the database reaches it (docs/architecture.md 9). An
 * {@link IndexStore} is one backend's implementation of the index's three coarse boundaries, each
 * asynchronous:
 *
 * - `views`: the read side, every method of today's views (`views/views.ts`) returning a Promise;
 * - `writer`: the one write path (`IndexWriter.applyOps`, docs/architecture.md 6.9) and what the
 *   backfill and the consumers ask of it;
 * - `state`: stream cursors, consumer status, the backfill queue and status, and handle sync's
 *   rows.
 *
 * The rule: the boundaries are async, the work inside one call is the backend's. SQLite
 * ({@link openSqliteIndexStore}, `sqlite_store.ts`) runs today's synchronous statements inside one
 * `async` call, so the statements of one view call or one write transaction never have an await
 * between them (no other request interleaves inside a transaction; a view call reads one
 * consistent state). A server backend makes the same calls in a few round trips instead.
 *
 * @module
 */

import type { DatabaseSync } from "node:sqlite";
import type { IndexOp, RecordOp } from "../../shared/ops.ts";
import type { Logger } from "../../shared/log.ts";
import type {
  ApplyOptions,
  ApplyResult,
  IndexWriterStats,
  SnapshotResult,
} from "../ingest/apply_ops.ts";
import type { Views } from "../views/views.ts";
import type { BackfillQueue, BackfillStatus } from "./backfill_state.ts";
import type { PlaceholderHandles } from "./placeholder_handles.ts";
import type { ConsumerStatus } from "./state.ts";

/**
 * `T`'s public methods, each returning a Promise of what it returns: the async form of a
 * synchronous SQLite class, so the two cannot drift. A public member that is not a method has
 * no async form (`never`).
 */
export type AsyncMethods<T> = {
  readonly [K in keyof T]: T[K] extends (...args: infer A) => infer R ? (...args: A) => Promise<R>
    : never;
};

/** The read side: every view of {@link Views}, each method async. */
export type AsyncViews = { readonly [K in keyof Views]: AsyncMethods<Views[K]> };

/**
 * A verified repository to apply whole (a backfill): the store computes its ops against the rows
 * it holds, inside the transaction that applies them (`ingest/backfill/repo_diff.ts`).
 */
export interface VerifiedSnapshot {
  /** Repository DID. */
  readonly did: string;
  /** Rev of the repository's commit. */
  readonly rev: string;
  /** The stored rev read before the repository was fetched (`RepoSnapshot.expectedRev`). */
  readonly expectedRev: string | null;
  /** Ops applied first, as they are (the handle, the account, its status). */
  readonly facts: readonly IndexOp[];
  /** The repository's records, in key order. */
  readonly records: readonly RecordOp[];
}

/** The one write path (docs/architecture.md 6.9), as the callers use it. */
export interface IndexWriterApi {
  /** `IndexWriter.applyOps`: ops in order, the cursor in the same transaction. */
  applyOps(ops: readonly IndexOp[], opts?: ApplyOptions): Promise<ApplyResult>;
  /** `IndexWriter.applySnapshot`, the ops planned from the snapshot's records. */
  applySnapshot(snapshot: VerifiedSnapshot): Promise<SnapshotResult>;
  /** The rev of the latest commit applied for `did` (null: none), as committed. */
  storedRev(did: string): Promise<string | null>;
  /** Totals since this writer was created (kept in memory: synchronous). */
  stats(): IndexWriterStats;
  /** Sets the listener of gaps (`IndexWriter.listenForGaps`), replacing any. */
  listenForGaps(listener: ((dids: readonly string[]) => void) | undefined): void;
}

/**
 * Cursors, consumer status, backfill state and handle sync's rows (`state.ts`,
 * `backfill_state.ts`, `placeholder_handles.ts`). Cursor writes go through
 * {@link IndexWriterApi.applyOps}, in the transaction of the ops they cover.
 */
export interface StateStore {
  readCursor(name: string): Promise<number | null>;
  writeConsumerStatus(status: ConsumerStatus): Promise<void>;
  readConsumerStatus(name: string): Promise<ConsumerStatus | null>;
  readConsumerDownSince(name: string): Promise<string | null>;
  readonly backfillQueue: AsyncMethods<BackfillQueue>;
  readBackfillStatus(name: string): Promise<BackfillStatus | null>;
  recordBackfillOutcome(
    name: string,
    outcome: { did: string; at: string } & ({ records: number } | { error: string }),
  ): Promise<void>;
  recordRestore(
    name: string,
    restore: { cursor: number; head: number | null; at: string },
  ): Promise<void>;
  /** Whether a commit of `did` from the account host was ever applied. */
  isLocalRepo(did: string): Promise<boolean>;
  /** The DIDs of the account host's repositories the index holds, in order, a page at a time. */
  localRepoDids(): AsyncIterable<string>;
  readonly placeholderHandles: AsyncMethods<PlaceholderHandles>;
}

/** One backend of the index. */
export interface IndexStore {
  readonly kind: "sqlite" | "postgres";
  readonly views: AsyncViews;
  readonly writer: IndexWriterApi;
  readonly state: StateStore;
  /** Closes the connection(s); nothing may be called after. */
  close(): Promise<void>;
}

/** The SQLite store: its connection and synchronous writer, for SQLite-only work. */
export interface SqliteIndexStore extends IndexStore {
  readonly kind: "sqlite";
  /** The connection every boundary runs on (tests' raw SQL, the WAL checkpointer's path). */
  readonly db: DatabaseSync;
}

/** Options of a store's writer. */
export interface IndexStoreOptions {
  /** Clock of the writer (`indexed_at`, `updated_at`). */
  now?: () => Date;
  log?: Logger;
  /** Ops per write transaction (`IndexWriterOptions.batchSize`). */
  batchSize?: number;
}
