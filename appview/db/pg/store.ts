/**
 * The index store on PostgreSQL (`IndexStore` of appview/db/store.ts, kind `postgres`; issue 40),
 * opened by `openIndexStore` when `APPVIEW_DATABASE_URL` is set (docs/operations.md, "Running the
 * index on PostgreSQL"). It assembles:
 *
 * - a pool of `APPVIEW_DB_POOL_MAX` connections (`open.ts`, which runs the migrations), on which
 *   the views (`views/pg`) and the state (`state.ts`) run;
 * - the write path (`PgIndexWriter`) on a connection of its own (`connection.ts`), opened again
 *   after a loss: one transaction at a time, whose statements are never sent on a session that
 *   ended;
 * - consumer locks ({@link PgIndexStore.acquireConsumerLease}, `lease.ts`): the one process running
 *   a stream consumer writes through the lock's connection.
 *
 * TLS comes from the URL's `sslmode`, `sslrootcert`, `sslcert` and `sslkey` (`tls.ts`); the
 * driver reads the libpq variables (`PGPASSWORD`, `PGHOST`, ...) for what the URL leaves out.
 * A process holds up to `APPVIEW_DB_POOL_MAX` + 1 connections, and one more per consumer lock it
 * holds or waits for.
 *
 * @module
 */

import { type Logger, redactUrl, silentLogger } from "../../../shared/log.ts";
import { PgIndexWriter } from "../../ingest/pg/pg_writer.ts";
import { createPgViews } from "../../views/pg/views.ts";
import type { AsyncViews, IndexStore, IndexStoreOptions, StateStore } from "../store.ts";
import { PgConnection } from "./connection.ts";
import {
  acquireConsumerLease,
  type ConsumerLease,
  type LeaseParts,
  type LeaseWaitOptions,
  lockedPool,
} from "./lease.ts";
import { APPLICATION_NAME, DEFAULT_POOL_MAX, openPgIndex, type PgSql } from "./open.ts";
import { type PgPool, PgState, poolRunner } from "./state.ts";
import { type PgConnectionTarget, pgConnectionTarget } from "./tls.ts";

/** Options of {@link openPgIndexStore}. */
export interface PgIndexStoreOptions extends IndexStoreOptions {
  /** Connections of the pool (default {@link DEFAULT_POOL_MAX}). */
  poolMax?: number;
  /** Run pending migrations (default true). */
  migrate?: boolean;
  /** `application_name` of the connections (default `social-index`). */
  applicationName?: string;
  /** The writer's set-based runs (`PgIndexWriterOptions.fastPath`, default true). */
  fastPath?: boolean;
}

/** The PostgreSQL {@link IndexStore}: its pool and its consumer locks besides the boundaries. */
export interface PgIndexStore extends IndexStore, AsyncDisposable {
  readonly kind: "postgres";
  /** The pool (tests' raw SQL and dumps). */
  readonly sql: PgSql;
  /**
   * Waits until this process holds the lock of consumer `name` (`lease.ts`); null when
   * `opts.signal` aborted first. Release the lease before closing the store.
   */
  acquireConsumerLease(name: string, opts?: LeaseWaitOptions): Promise<ConsumerLease | null>;
}

/**
 * Opens the index at `url` (`postgres://user:password@host:port/database?sslmode=...`): the pool,
 * pending migrations, the writer. Messages name the database by its redacted URL.
 *
 * @throws Error naming `APPVIEW_DATABASE_URL` when a TLS file cannot be read or the database
 *   cannot be reached, or is newer than this code
 */
export async function openPgIndexStore(
  url: string,
  opts: PgIndexStoreOptions = {},
): Promise<PgIndexStore> {
  const target = await pgConnectionTarget(url);
  let sql: PgSql;
  try {
    sql = await openPgIndex(target.url, {
      max: opts.poolMax ?? DEFAULT_POOL_MAX,
      migrate: opts.migrate,
      ssl: target.ssl,
      applicationName: opts.applicationName,
      now: opts.now,
    });
  } catch (e) {
    throw new Error(
      `APPVIEW_DATABASE_URL: cannot open the index database ${redactUrl(url)}: ${
        e instanceof Error ? e.message : String(e)
      }`,
      { cause: e },
    );
  }
  return new PgStore(sql, target, opts);
}

class PgStore implements PgIndexStore {
  readonly kind = "postgres";
  readonly sql: PgSql;
  readonly views: AsyncViews;
  readonly writer: PgIndexWriter;
  readonly state: StateStore;
  readonly #parts: LeaseParts;
  readonly #log: Logger;
  readonly #leases = new Set<ConsumerLease>();
  #writerConnection: PgConnection | null = null;
  #opening: Promise<PgConnection> | null = null;
  #closed = false;

  constructor(sql: PgSql, target: PgConnectionTarget, opts: PgIndexStoreOptions) {
    this.sql = sql;
    this.#log = opts.log ?? silentLogger;
    const now = opts.now ?? (() => new Date());
    const applicationName = opts.applicationName ?? APPLICATION_NAME;
    this.views = createPgViews(sql);
    this.state = new PgState(poolRunner(sql as unknown as PgPool), { now });
    const writerOptions = {
      now,
      log: opts.log,
      batchSize: opts.batchSize,
      fastPath: opts.fastPath,
    };
    this.writer = new PgIndexWriter(
      lockedPool(sql, () => this.#connection(target, `${applicationName} writer`)),
      writerOptions,
    );
    this.#parts = {
      target,
      pool: sql,
      views: this.views,
      baseWriter: this.writer,
      writerOptions,
      now,
      applicationName,
      released: (lease) => this.#leases.delete(lease),
    };
  }

  async acquireConsumerLease(
    name: string,
    opts: LeaseWaitOptions = {},
  ): Promise<ConsumerLease | null> {
    if (this.#closed) throw new Error("The index store is closed");
    const lease = await acquireConsumerLease(this.#parts, name, opts);
    if (lease === null) return null;
    if (this.#closed) {
      await lease.release();
      return null;
    }
    this.#leases.add(lease);
    return lease;
  }

  /** The writer's connection: the open one, or a new one after a loss. */
  #connection(target: PgConnectionTarget, applicationName: string): Promise<PgConnection> {
    if (this.#closed) return Promise.reject(new Error("The index store is closed"));
    const current = this.#writerConnection;
    if (current?.usable) return Promise.resolve(current);
    return this.#opening ??= (async () => {
      try {
        if (current !== null) {
          this.#log.warn("Index write connection lost; opening another");
          this.#writerConnection = null;
          await current.close().catch(() => {});
        }
        this.#writerConnection = await PgConnection.open(target, { applicationName });
        return this.#writerConnection;
      } finally {
        this.#opening = null;
      }
    })();
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    for (const lease of [...this.#leases]) await lease.release().catch(() => {});
    await this.#opening?.catch(() => {});
    await this.#writerConnection?.close().catch(() => {});
    await this.sql.end({ timeout: 5 });
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}
