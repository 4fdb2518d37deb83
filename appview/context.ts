/**
 * What every part of the index receives: configuration, the index store (its views, its one write
 * path and its state, `db/store.ts`), the logger and the clock. Built once by
 * {@link createAppviewContext} (in `appview/server.ts`, the public consumer's thread and tests)
 * and passed down; nothing opens a store at import time.
 *
 * @module
 */

import type { DatabaseSync } from "node:sqlite";
import type { Logger } from "../shared/log.ts";
import type { AppviewConfig } from "./config.ts";
import type { AccountDirectory } from "./ingest/sources/account_directory.ts";
import type { IndexWriter } from "./ingest/apply_ops.ts";
import { openSqliteIndexStore } from "./db/sqlite_store.ts";
import type { IndexStore } from "./db/store.ts";

/** Shared state of one index process. */
export interface AppviewContext {
  readonly config: AppviewConfig;
  /** The index: its views, its one write path and its state, behind async boundaries. */
  readonly store: IndexStore;
  /** The store's SQLite connection; what has moved to `store` reaches it there. */
  readonly db: DatabaseSync;
  /**
   * The single write path of spec 6.2 rule 3 (every ingest source calls it): the store's
   * synchronous writer, which `store.writer` wraps.
   */
  readonly writer: IndexWriter;
  readonly log: Logger;
  /**
   * Keys and handles of the account host's accounts, against which pushes are verified. Absent:
   * the push endpoint asks the configured account host (tests give a table).
   */
  readonly accounts?: AccountDirectory;
  /** Clock (tests inject one). */
  now(): Date;
}

/** What {@link createAppviewContext} needs; the rest it builds. */
export interface AppviewContextOptions {
  config: AppviewConfig;
  /** An open index database (`db/open.ts`); the caller closes it. */
  db: DatabaseSync;
  log: Logger;
  /** Clock. Default: the system's. */
  now?: () => Date;
  accounts?: AccountDirectory;
  /** Ops per write transaction of the writer. Default: the writer's (`DEFAULT_BATCH_SIZE`). */
  batchSize?: number;
}

/**
 * The one way an index context is made: by `server.ts` for the process, by the public consumer's
 * worker thread for its own connection, and by tests. Builds the index store over
 * `db`.
 */
export function createAppviewContext(opts: AppviewContextOptions): AppviewContext {
  const now = opts.now ?? (() => new Date());
  const store = openSqliteIndexStore(opts.db, {
    now,
    log: opts.log.child("writer"),
    batchSize: opts.batchSize,
  });
  return {
    config: opts.config,
    store,
    db: opts.db,
    writer: store.syncWriter,
    log: opts.log,
    now,
    accounts: opts.accounts,
  };
}
