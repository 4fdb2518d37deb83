/**
 * Opening the index database: connection settings, then the ordered migrations.
 *
 * @module
 */

import { DatabaseSync } from "node:sqlite";
import { runMigrations } from "./migrations.ts";

/** How long a writer waits for another connection's lock before failing (ms). */
export const BUSY_TIMEOUT_MS = 5_000;
/**
 * WAL pages before an automatic checkpoint (4 KiB pages: 16 MiB). Larger than SQLite's default
 * 1,000 so sustained ingest checkpoints less often; bounded so readers' WAL stays small.
 */
export const WAL_AUTOCHECKPOINT_PAGES = 4_000;
/** Size the WAL file is truncated back to after a checkpoint (bytes). */
export const JOURNAL_SIZE_LIMIT_BYTES = 64 * 1024 * 1024;
/** Page cache per connection, in KiB (negative `cache_size`). */
export const CACHE_SIZE_KIB = 64 * 1024;

/**
 * Opens (creating when absent) the index database at `path` (a file path, or `:memory:`),
 * applies the connection settings and runs pending migrations.
 *
 * Settings: WAL journal (so the query API reads while ingest writes; `:memory:` stays in its
 * memory journal), `synchronous=NORMAL` (durable at checkpoints; a power cut loses at most the
 * last transactions, which the streams' cursors redeliver), a busy timeout for consumers running
 * in other processes, foreign keys off (the schema has none: ops arrive in any order), a 16 MiB
 * autocheckpoint and an in-memory temp store.
 *
 * @example
 * ```ts
 * const db = openIndexDb(":memory:");
 * db.close();
 * ```
 */
export function openIndexDb(path: string): DatabaseSync {
  const db = new DatabaseSync(path);
  try {
    db.exec(`PRAGMA busy_timeout = ${BUSY_TIMEOUT_MS}`);
    db.exec("PRAGMA journal_mode = WAL");
    db.exec("PRAGMA synchronous = NORMAL");
    db.exec("PRAGMA foreign_keys = OFF");
    db.exec(`PRAGMA wal_autocheckpoint = ${WAL_AUTOCHECKPOINT_PAGES}`);
    db.exec(`PRAGMA journal_size_limit = ${JOURNAL_SIZE_LIMIT_BYTES}`);
    db.exec(`PRAGMA cache_size = -${CACHE_SIZE_KIB}`);
    db.exec("PRAGMA temp_store = MEMORY");
    runMigrations(db);
  } catch (e) {
    db.close();
    throw e;
  }
  return db;
}
