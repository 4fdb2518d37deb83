/**
 * What every part of the index receives: configuration, the index store (its views, its one write
 * path and its state, `db/store.ts`), the logger and the clock. Built once by
 * {@link createAppviewContext} (in `appview/server.ts`, the public consumer's thread, the
 * backfill task and tests) and passed down; nothing opens a store at import time.
 *
 * The context holds no database connection: everything reaches the index through `store`'s
 * async boundaries (docs/architecture.md 9). What only SQLite has (the WAL checkpointer, tests'
 * raw SQL) takes the connection from where it was opened (`SqliteIndexStore.db`).
 *
 * @module
 */

import type { Logger } from "../shared/log.ts";
import type { AppviewConfig } from "./config.ts";
import type { IndexStore } from "./db/store.ts";
import type { AccountDirectory } from "./ingest/sources/account_directory.ts";

/** Shared state of one index process. */
export interface AppviewContext {
  readonly config: AppviewConfig;
  /**
   * The index: views, the single write path of spec 6.2 rule 3 (`store.writer`, which every
   * ingest source calls) and the consumers' and workers' state.
   */
  readonly store: IndexStore;
  readonly log: Logger;
  /**
   * Keys and handles of the account host's accounts, against which pushes are verified. Absent:
   * the push endpoint asks the configured account host (tests give a table).
   */
  readonly accounts?: AccountDirectory;
  /** Clock (tests inject one). */
  now(): Date;
}

/** What {@link createAppviewContext} needs. */
export interface AppviewContextOptions {
  config: AppviewConfig;
  /** An open index store (`db/open.ts`); the caller closes it. */
  store: IndexStore;
  log: Logger;
  /** Clock. Default: the system's. Give the store's writer the same one. */
  now?: () => Date;
  accounts?: AccountDirectory;
}

/**
 * The one way an index context is made: by `server.ts` for the process, by the public consumer's
 * worker thread for its own connection, by the backfill task and by tests.
 */
export function createAppviewContext(opts: AppviewContextOptions): AppviewContext {
  const now = opts.now ?? (() => new Date());
  return {
    config: opts.config,
    store: opts.store,
    log: opts.log,
    now,
    accounts: opts.accounts,
  };
}
