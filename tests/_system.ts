/**
 * The whole system in one test process: a real account host and a real index, each on its own
 * loopback port with its own store files in a temp dir, with the push path and the local stream
 * each switchable, and the index on either backend (issue 40: SQLite in the temp dir, or a fresh
 * database on the test file's throwaway PostgreSQL cluster, `forEachBackend`'s). Also an index
 * context of either backend for tests that drive the index's parts directly, and raw SQL and table
 * dumps on both.
 *
 * @module
 */

import { loadAppviewConfig } from "../appview/config.ts";
import { type AppviewContext, createAppviewContext } from "../appview/context.ts";
import { openIndexStore } from "../appview/db/open.ts";
import type { PgIndexStore } from "../appview/db/pg/store.ts";
import type { IndexStore, SqliteIndexStore } from "../appview/db/store.ts";
import type { AccountDirectory } from "../appview/ingest/sources/account_directory.ts";
import { type RunningAppview, startAppview } from "../appview/server.ts";
import {
  type Backend,
  type DumpOptions,
  dumpTables,
  freshBackendDatabase,
  TestAccountDirectory,
  toPgPlaceholders,
} from "../appview/_test_helpers.ts";
import { type RunningPds, startPds } from "../pds/server.ts";
import { SocialClient, type SocialClientOptions } from "../shared/client.ts";
import { createLogger, type Logger } from "../shared/log.ts";
import { freePort, makeTempDir, type TempDir, waitFor } from "../runtime/_test_helpers.ts";

export type { Backend };

/** Sorted table rows, per table (see {@link dumpIndex}). */
export type IndexDump = Record<string, Record<string, unknown>[]>;

/** Options of {@link dumpIndex}. */
export interface IndexDumpOptions extends DumpOptions {
  /**
   * On SQLite, `dumpSqliteIndex`'s form instead of `dumpTables`': the form of PostgreSQL's dump
   * (its FTS5 table left out, post and notification ids as their rank), so that dumps of the two
   * backends compare.
   */
  portable?: boolean;
}

/**
 * The variables that put a new, empty index on `backend`: on SQLite the file `dbPath`
 * (`APPVIEW_DB_PATH`; `:memory:` for one in memory), on PostgreSQL a fresh database on this test
 * file's cluster (`APPVIEW_DATABASE_URL`; register the tests with `forEachBackend` and end the
 * file with `endBackendTests`, which stops the cluster).
 */
export async function freshIndexEnv(
  backend: Backend,
  dbPath: string,
): Promise<Record<string, string>> {
  return backend === "sqlite"
    ? { APPVIEW_DB_PATH: dbPath }
    : { APPVIEW_DATABASE_URL: await freshBackendDatabase() };
}

/**
 * Runs one SQL statement on the index of `store` and answers its rows as plain objects: `?`
 * placeholders on both backends (outside quotes; `$1`, `$2`, ... on PostgreSQL, whose `int8`
 * values come back as numbers). Keep to SQL both engines run (`coalesce`, `substr`, no `GLOB`).
 */
export async function indexRows<T = Record<string, unknown>>(
  store: IndexStore,
  sql: string,
  ...params: unknown[]
): Promise<T[]> {
  if (store.kind === "sqlite") {
    const rows = (store as SqliteIndexStore).db.prepare(sql).all(...(params as never[]));
    return rows.map((r) => ({ ...r })) as T[];
  }
  const rows = await (store as PgIndexStore).sql.unsafe(toPgPlaceholders(sql), params as never[]);
  return rows.map((r) => ({ ...r })) as T[];
}

/**
 * Every table of the index of `store`, rows sorted, actor ids shown as DIDs, for comparing two
 * states of one backend: on SQLite `dumpTables`' form (its FTS5 table as rowids included), on
 * PostgreSQL `dumpPgIndex`'s (post and notification ids as their rank: its sequences skip
 * numbers, docs/behaviour.md 10.9). `opts` leaves tables and columns out on both; `portable`
 * gives both backends one form.
 */
export async function dumpIndex(
  store: IndexStore,
  opts: IndexDumpOptions = {},
): Promise<IndexDump> {
  if (store.kind === "sqlite" && !opts.portable) {
    return dumpTables((store as SqliteIndexStore).db, opts);
  }
  const { dumpPgIndex, dumpSqliteIndex } = await import("../appview/db/pg/_test_helpers.ts");
  const dump = store.kind === "sqlite"
    ? dumpSqliteIndex((store as SqliteIndexStore).db)
    : await dumpPgIndex((store as PgIndexStore).sql);
  const exclude = new Set(opts.exclude ?? []);
  const omit = new Set(opts.omitColumns ?? []);
  const out: IndexDump = {};
  for (const [table, rows] of Object.entries(dump)) {
    if (exclude.has(table)) continue;
    const keyed = rows.map((row) => {
      const kept = Object.fromEntries(Object.entries(row).filter(([k]) => !omit.has(k)));
      return [JSON.stringify(kept), kept] as const;
    });
    keyed.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
    out[table] = keyed.map(([, r]) => r);
  }
  return out;
}

/** A context over an index of either backend, with raw SQL and dumps on both. */
export interface IndexContext extends AppviewContext, AsyncDisposable {
  readonly backend: Backend;
  /** {@link indexRows} on this index. */
  rows<T = Record<string, unknown>>(sql: string, ...params: unknown[]): Promise<T[]>;
  /** {@link dumpIndex} of this index. */
  dump(opts?: IndexDumpOptions): Promise<IndexDump>;
}

/**
 * Opens the index that `databaseEnv` names ({@link freshIndexEnv}'s variables; the same again to
 * reopen it, a restart) as the servers do (`openIndexStore`), under a context whose pushes are
 * verified against the test accounts (`TestAccountDirectory`) unless `accounts` is given.
 */
export async function openIndexContext(
  databaseEnv: Readonly<Record<string, string>>,
  opts: {
    log?: Logger;
    now?: () => Date;
    env?: Record<string, string>;
    accounts?: AccountDirectory;
  } = {},
): Promise<IndexContext> {
  const config = loadAppviewConfig({ DATA_DIR: "/nonexistent", ...opts.env, ...databaseEnv });
  const log = opts.log ?? createLogger("test", { level: "error", sink: () => {} });
  const store = await openIndexStore(config, { now: opts.now, log: log.child("writer") });
  const ctx = createAppviewContext({
    config,
    store,
    log,
    now: opts.now,
    accounts: opts.accounts ?? new TestAccountDirectory(),
  });
  return {
    ...ctx,
    backend: store.kind,
    rows: (sql, ...params) => indexRows(store, sql, ...params),
    dump: (o) => dumpIndex(store, o),
    [Symbol.asyncDispose]: () => store.close(),
  };
}

/** Options of {@link startSystem}. */
export interface SystemOptions {
  /** The account host pushes commits to the index (default true). */
  push?: boolean;
  /** The index consumes the account host's subscribeRepos (default true). */
  stream?: boolean;
  /** Clock of the account host in ms (tests shift it to mint expired tokens). */
  pdsNow?: () => number;
  /** Further account host variables (`PDS_INVITE_REQUIRED`, `PDS_CORS_ORIGINS`, ...). */
  pdsEnv?: Record<string, string>;
  /** Serve the built web app at the index's `/` (default false: the API alone). */
  web?: boolean;
  /** The index runs handle sync (default true). */
  handleSync?: boolean;
  /**
   * The index's backend (default SQLite, a file in the temp dir): PostgreSQL is a fresh database
   * on this test file's cluster ({@link freshIndexEnv}).
   */
  backend?: Backend;
}

/** A running account host + index pair. */
export interface TestSystem extends AsyncDisposable {
  readonly pds: RunningPds;
  readonly appview: RunningAppview;
  readonly pdsUrl: string;
  readonly appviewUrl: string;
  readonly backend: Backend;
  /** {@link indexRows} on the index. */
  rows<T = Record<string, unknown>>(sql: string, ...params: unknown[]): Promise<T[]>;
  /** {@link dumpIndex} of the index. */
  dump(opts?: IndexDumpOptions): Promise<IndexDump>;
  /** Log lines of both servers. */
  readonly lines: string[];
  /** A new client of both servers. */
  client(opts?: Partial<SocialClientOptions>): SocialClient;
  close(): Promise<void>;
}

/** The ingest secret the account host and the index share. */
export const INGEST_SECRET = "e2e-ingest-secret";

/**
 * Starts an account host and an index wired to each other; returns once the index's components
 * run (on PostgreSQL the local consumer first takes its consumer lock).
 */
export async function startSystem(opts: SystemOptions = {}): Promise<TestSystem> {
  const backend = opts.backend ?? "sqlite";
  const dir: TempDir = await makeTempDir("social-e2e-");
  const lines: string[] = [];
  const log: Logger = createLogger("e2e", { level: "debug", sink: (l) => lines.push(l) });
  const appPort = freePort();
  const appviewUrl = `http://127.0.0.1:${appPort}`;
  const pds = await startPds({
    env: {
      DATA_DIR: dir.path,
      PDS_JWT_SECRET: "e2e-jwt-secret-0123456789",
      PDS_HANDLE_DOMAINS: ".test",
      APPVIEW_PUBLIC_URL: appviewUrl,
      APPVIEW_INTERNAL_URL: opts.push === false ? "off" : appviewUrl,
      APPVIEW_INGEST_SECRET: INGEST_SECRET,
      // The web app's page calls the account host from the index's origin.
      ...(opts.web ? { PDS_CORS_ORIGINS: appviewUrl } : {}),
      ...opts.pdsEnv,
    },
    hostname: "127.0.0.1",
    port: 0,
    now: opts.pdsNow,
    log: log.child("pds"),
  });
  let appview: RunningAppview;
  try {
    const database = await freshIndexEnv(backend, `${dir.path}/appview.sqlite`);
    appview = await startAppview({
      config: loadAppviewConfig({
        DATA_DIR: dir.path,
        APPVIEW_HOSTNAME: "127.0.0.1",
        APPVIEW_PORT: String(appPort),
        APPVIEW_PUBLIC_URL: appviewUrl,
        PDS_PUBLIC_URL: pds.url,
        APPVIEW_INGEST_SECRET: INGEST_SECRET,
        APPVIEW_CORS_ORIGINS: "http://localhost",
        APPVIEW_WEB_DIR: opts.web ? "" : "off",
        ...database,
      }),
      log: log.child("appview"),
      components: {
        http: true,
        localConsumer: opts.stream !== false,
        publicConsumer: false,
        handleSync: opts.handleSync !== false,
      },
      handleSyncIntervalMs: 100,
    });
    if (opts.stream !== false) {
      const running = appview;
      await waitFor(() => running.localConsumer !== null, {
        message: "the local consumer took its lock",
      }).catch(async (err) => {
        await running.close();
        throw err;
      });
    }
  } catch (err) {
    await pds.close();
    await dir[Symbol.asyncDispose]();
    throw err;
  }
  const close = async () => {
    await appview.close();
    await pds.close();
    await dir[Symbol.asyncDispose]();
  };
  return {
    pds,
    appview,
    pdsUrl: pds.url,
    appviewUrl,
    backend,
    rows: (sql, ...params) => indexRows(appview.ctx.store, sql, ...params),
    dump: (o) => dumpIndex(appview.ctx.store, o),
    lines,
    client: (o = {}) => new SocialClient({ pdsUrl: pds.url, appviewUrl, ...o }),
    close,
    [Symbol.asyncDispose]: close,
  };
}
