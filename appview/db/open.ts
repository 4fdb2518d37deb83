/**
 * Opening the index: {@link openIndexStore} picks the backend of the configuration (PostgreSQL
 * when `APPVIEW_DATABASE_URL` is set, `pg/store.ts`; else SQLite, `sqlite_store.ts`);
 * {@link openIndexDb} opens the SQLite database with its connection settings, then runs the
 * ordered migrations.
 *
 * @module
 */

import { DatabaseSync } from "node:sqlite";
import { redactUrl } from "../../shared/log.ts";
import type { AppviewConfig } from "../config.ts";
import { runMigrations } from "./migrations.ts";
import { openSqliteIndexStore } from "./sqlite_store.ts";
import type { IndexStore, IndexStoreOptions } from "./store.ts";

/** How long a writer waits for another connection's lock before failing (ms). */
export const BUSY_TIMEOUT_MS = 5_000;
/**
 * Page size of a new database (bytes). 8 KiB halves the WAL frames (and write calls) per
 * ingest transaction against SQLite's 4 KiB default, measured with `deno task bench ingest`.
 * It only applies when the file is created: an existing database keeps its page size.
 */
export const PAGE_SIZE_BYTES = 8_192;
/**
 * WAL pages before an automatic checkpoint on the writing connection (8 KiB pages: 64 MiB, the
 * size {@link JOURNAL_SIZE_LIMIT_BYTES} keeps). The background checkpointer
 * (`runtime/wal_checkpointer.ts`) copies most frames back first, so this checkpoint copies only the last
 * transaction or so; what it buys is a WAL that restarts from its beginning: SQLite rewinds the
 * WAL only when a write transaction starts with every frame copied back, which a writer busy
 * with back-to-back transactions otherwise never sees. Appending to an ever larger WAL made
 * COMMIT several times slower per page (ingest benchmarks, 3 interleaved rounds each at 8,000
 * against 32,000 pages: `applyOps` sustained 21,500 against 19,100 ops/s, local stream
 * 21,800 against 19,800 overall).
 */
export const WAL_AUTOCHECKPOINT_PAGES = 8_000;
/** Size the WAL file is truncated back to after a checkpoint (bytes). */
export const JOURNAL_SIZE_LIMIT_BYTES = 64 * 1024 * 1024;
/**
 * Page cache per connection, in KiB (negative `cache_size`; allocated as used). 256 MiB keeps
 * the indexes that ingest touches at random in memory (measured at 200k ops: reads per op 24
 * KiB at 64 MiB, 4 KiB at 256 MiB).
 */
export const CACHE_SIZE_KIB = 256 * 1024;

/**
 * Opens (creating when absent) the index database at `path` (a file path, or `:memory:`),
 * applies the connection settings and runs pending migrations.
 *
 * Settings: WAL journal (so the query API reads while ingest writes; `:memory:` stays in its
 * memory journal), `synchronous=NORMAL` (durable at checkpoints; a power cut loses at most the
 * last transactions, which the streams' cursors redeliver), a busy timeout for consumers running
 * in other processes, foreign keys off (the schema has none: ops arrive in any order), 8 KiB pages
 * for a new file, a 64 MiB autocheckpoint, a 256 MiB page cache and an in-memory temp store.
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
    // Before anything is written: a no-op on an existing database.
    db.exec(`PRAGMA page_size = ${PAGE_SIZE_BYTES}`);
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

/** Warning logged when `APPVIEW_DB_PATH` is set beside `APPVIEW_DATABASE_URL`. */
export const WARN_DB_PATH_IGNORED =
  "APPVIEW_DB_PATH is ignored: the index is on PostgreSQL (APPVIEW_DATABASE_URL is set)";

/**
 * Opens the index store of `config`: on PostgreSQL at `config.databaseUrl` when set (a pool of
 * `config.dbPoolMax` connections; the PostgreSQL code is loaded only then), else the SQLite
 * database at `config.dbPath` (its folder made when missing). The caller closes it
 * (`IndexStore.close`).
 */
export async function openIndexStore(
  config: AppviewConfig,
  opts: IndexStoreOptions = {},
): Promise<IndexStore> {
  if (config.databaseUrl !== null) {
    if (config.dbPathIgnored) opts.log?.warn(WARN_DB_PATH_IGNORED);
    const { openPgIndexStore } = await import("./pg/store.ts");
    const store = await openPgIndexStore(config.databaseUrl, {
      ...opts,
      poolMax: config.dbPoolMax,
    });
    opts.log?.info("Index on PostgreSQL", { database: redactUrl(config.databaseUrl) });
    return store;
  }
  await makeParentDir(config.dbPath);
  return openSqliteIndexStore(openIndexDb(config.dbPath), opts);
}

/** Whether `path` names a database file directly (not `:memory:` or a `file:` URI). */
export function isFilePath(path: string): boolean {
  return path !== ":memory:" && !path.startsWith("file:");
}

async function makeParentDir(path: string): Promise<void> {
  if (!isFilePath(path)) return;
  const slash = path.lastIndexOf("/");
  if (slash > 0) await Deno.mkdir(path.slice(0, slash), { recursive: true });
}
