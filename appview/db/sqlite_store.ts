/**
 * The SQLite index store (`store.ts`): today's synchronous classes behind the async boundaries.
 * Each boundary call runs one synchronous call at once and returns its result as a Promise, so
 * the statements of a view call or a write transaction run back to back, with no await between
 * them, exactly as before the boundaries existed; the cost is one resolved Promise per call.
 *
 * @module
 */

import type { DatabaseSync } from "node:sqlite";
import type { IndexOp } from "../../shared/ops.ts";
import {
  type ApplyOptions,
  type ApplyResult,
  IndexWriter,
  type SnapshotResult,
} from "../ingest/apply_ops.ts";
import { diffRepo, IndexedRecords } from "../ingest/backfill/repo_diff.ts";
import { createViews } from "../views/views.ts";
import {
  BackfillQueue,
  type BackfillStatus,
  isLocalRepo,
  localRepoDids,
  readBackfillStatus,
  recordBackfillOutcome,
  recordRestore,
} from "./backfill_state.ts";
import { PlaceholderHandles } from "./placeholder_handles.ts";
import {
  type ConsumerStatus,
  readConsumerDownSince,
  readConsumerStatus,
  readCursor,
  writeConsumerStatus,
} from "./state.ts";
import type {
  AsyncMethods,
  AsyncViews,
  IndexStoreOptions,
  IndexWriterApi,
  SqliteIndexStore,
  StateStore,
  VerifiedSnapshot,
} from "./store.ts";

/** Runs `fn` now and returns its result as a Promise (a throw becomes a rejection). */
function run<T>(fn: () => T): Promise<T> {
  try {
    return Promise.resolve(fn());
  } catch (e) {
    return Promise.reject(e);
  }
}

/**
 * Wraps `target`'s methods ({@link AsyncMethods}): each runs the synchronous method at once,
 * inside the call, and returns its result as a Promise (a throw becomes a rejection).
 */
export function asyncMethods<T extends object>(target: T): AsyncMethods<T> {
  const proto = Object.getPrototypeOf(target);
  const out: Record<string, unknown> = {};
  for (const name of Object.getOwnPropertyNames(proto)) {
    const fn = Object.getOwnPropertyDescriptor(proto, name)?.value;
    if (name === "constructor" || typeof fn !== "function") continue;
    out[name] = (...args: unknown[]) => run(() => fn.apply(target, args));
  }
  return Object.freeze(out) as AsyncMethods<T>;
}

/**
 * The index store over `db` (an open index database, `open.ts`), with a writer built from
 * `opts`. `close()` closes `db`.
 */
export function openSqliteIndexStore(
  db: DatabaseSync,
  opts: IndexStoreOptions = {},
): SqliteStore {
  return new SqliteStore(db, opts);
}

/** The SQLite {@link IndexStore}. */
export class SqliteStore implements SqliteIndexStore {
  readonly kind = "sqlite";
  readonly db: DatabaseSync;
  /** The synchronous writer the async one wraps (tests and benchmarks may call it directly). */
  readonly syncWriter: IndexWriter;
  readonly writer: IndexWriterApi;
  readonly state: StateStore;
  #views: AsyncViews | null = null;

  constructor(db: DatabaseSync, opts: IndexStoreOptions = {}) {
    this.db = db;
    this.syncWriter = new IndexWriter(db, opts);
    this.writer = new SqliteWriter(db, this.syncWriter);
    this.state = new SqliteState(db);
  }

  /** The views, prepared on first use (a consumer's store never reads them). */
  get views(): AsyncViews {
    if (this.#views === null) {
      const views = createViews(this.db);
      this.#views = {
        posts: asyncMethods(views.posts),
        timeline: asyncMethods(views.timeline),
        profiles: asyncMethods(views.profiles),
        search: asyncMethods(views.search),
        threads: asyncMethods(views.threads),
        notifications: asyncMethods(views.notifications),
        graph: asyncMethods(views.graph),
        viewer: asyncMethods(views.viewer),
        safety: asyncMethods(views.safety),
      };
    }
    return this.#views;
  }

  close(): Promise<void> {
    if (this.db.isOpen) this.db.close();
    return Promise.resolve();
  }
}

class SqliteWriter implements IndexWriterApi {
  readonly #db: DatabaseSync;
  readonly #sync: IndexWriter;
  #indexed: IndexedRecords | null = null;

  constructor(db: DatabaseSync, sync: IndexWriter) {
    this.#db = db;
    this.#sync = sync;
  }

  applyOps(ops: readonly IndexOp[], opts?: ApplyOptions): Promise<ApplyResult> {
    return run(() => this.#sync.applyOps(ops, opts));
  }

  applySnapshot(snapshot: VerifiedSnapshot): Promise<SnapshotResult> {
    const { did, rev, expectedRev, facts, records } = snapshot;
    return run(() => {
      const indexed = this.#indexed ??= new IndexedRecords(this.#db);
      return this.#sync.applySnapshot({
        did,
        rev,
        expectedRev,
        plan: () => [...facts, ...diffRepo(did, indexed.read(did), records)],
      });
    });
  }

  storedRev(did: string): Promise<string | null> {
    return run(() => this.#sync.storedRev(did));
  }

  stats() {
    return this.#sync.stats();
  }

  listenForGaps(listener: ((dids: readonly string[]) => void) | undefined): void {
    this.#sync.listenForGaps(listener);
  }
}

class SqliteState implements StateStore {
  readonly #db: DatabaseSync;
  readonly backfillQueue: AsyncMethods<BackfillQueue>;
  readonly placeholderHandles: AsyncMethods<PlaceholderHandles>;

  constructor(db: DatabaseSync) {
    this.#db = db;
    this.backfillQueue = asyncMethods(new BackfillQueue(db));
    this.placeholderHandles = asyncMethods(new PlaceholderHandles(db));
  }

  readCursor(name: string): Promise<number | null> {
    return run(() => readCursor(this.#db, name));
  }

  writeConsumerStatus(status: ConsumerStatus): Promise<void> {
    return run(() => writeConsumerStatus(this.#db, status));
  }

  readConsumerStatus(name: string): Promise<ConsumerStatus | null> {
    return run(() => readConsumerStatus(this.#db, name));
  }

  readConsumerDownSince(name: string): Promise<string | null> {
    return run(() => readConsumerDownSince(this.#db, name));
  }

  readBackfillStatus(name: string): Promise<BackfillStatus | null> {
    return run(() => readBackfillStatus(this.#db, name));
  }

  recordBackfillOutcome(...args: Parameters<StateStore["recordBackfillOutcome"]>): Promise<void> {
    return run(() => recordBackfillOutcome(this.#db, ...args));
  }

  recordRestore(...args: Parameters<StateStore["recordRestore"]>): Promise<void> {
    return run(() => recordRestore(this.#db, ...args));
  }

  isLocalRepo(did: string): Promise<boolean> {
    return run(() => isLocalRepo(this.#db, did));
  }

  async *localRepoDids() {
    yield* localRepoDids(this.#db);
  }
}
