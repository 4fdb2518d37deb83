/**
 * Consumer locks on PostgreSQL (issue 40; docs/behaviour.md 6.2 rule 12): exactly one process runs
 * each stream consumer, however many run the index on one database.
 *
 * A process that wants to run the consumer `name` opens a connection of its own
 * (`connection.ts`) and takes the session advisory lock
 * `(PG_LOCK_CONSUMERS, hashtext('consumer:' || name))` on it with `pg_try_advisory_lock`, every
 * {@link LEASE_POLL_MS} until it gets it; while another session holds it, the process waits
 * (reporting the holder once). A session lock lives as long as its session: when the holder's
 * process dies (SIGKILL, a lost machine), its connection closes, the server ends the session and
 * releases the lock, and the next waiter takes it within one poll.
 *
 * Fencing: the holder's writes (its write path, its status rows, its backfill queue) all go out on
 * that same connection, through the lease's store ({@link ConsumerLease.store}). So a write can
 * commit only in the session that holds the lock: a holder that lost its connection (a network
 * cut, a database restart, a server that ended its session) cannot write beside its successor,
 * since its connection refuses every statement once the driver saw it close (`connection.ts`)
 * and nothing is ever sent on another session in its place. A session that ended can commit
 * nothing after its end, and its lock was released only at that end, so everything it committed
 * is visible to the successor, which reads the stored cursor after taking the lock.
 *
 * @module
 */

import type { PgIndexWriterOptions } from "../../ingest/pg/pg_writer.ts";
import { PgIndexWriter } from "../../ingest/pg/pg_writer.ts";
import type { PgClient } from "../../views/pg/query.ts";
import type { AsyncViews, IndexStore, IndexWriterApi } from "../store.ts";
import { PgConnection, PgConnectionLost } from "./connection.ts";
import type { PgSql } from "./open.ts";
import { type PgRunner, PgState } from "./state.ts";
import type { PgConnectionTarget } from "./tls.ts";

/**
 * Advisory lock namespace of the consumer locks (first key of the two-key form): "SOCC" in ASCII,
 * apart from the index's own locks (`PG_LOCK_NAMESPACE`), so no consumer name can hash onto one.
 */
export const PG_LOCK_CONSUMERS = 0x534f4343;
/** How often a waiting process tries the lock (ms). */
export const LEASE_POLL_MS = 1_000;

/** The session holding a consumer lock, as far as `pg_stat_activity` shows it. */
export interface LockHolder {
  pid: number;
  applicationName: string | null;
  clientAddr: string | null;
  backendStart: string | null;
}

/** Options of {@link acquireConsumerLease}. */
export interface LeaseWaitOptions {
  /** Stops waiting (the acquisition then resolves null). */
  signal?: AbortSignal;
  /** Interval of the attempts (default {@link LEASE_POLL_MS}). */
  pollMs?: number;
  /** Called once, when the lock is first found held by another session. */
  onWaiting?: (holder: LockHolder | null) => void;
  /** Called when an attempt failed (the database unreachable); the next comes a poll later. */
  onError?: (error: unknown) => void;
}

/** What a lease is built from: the store's parts (`store.ts`). */
export interface LeaseParts {
  readonly target: PgConnectionTarget;
  readonly pool: PgSql;
  readonly views: AsyncViews;
  /** The store's own writer: it hears of gaps too (its listener is the lease's). */
  readonly baseWriter: IndexWriterApi;
  readonly writerOptions: PgIndexWriterOptions;
  readonly now: () => Date;
  readonly applicationName: string;
  /** Told when a lease is released. */
  readonly released?: (lease: ConsumerLease) => void;
}

const TRY_LOCK = "SELECT pg_try_advisory_lock($1::integer, hashtext($2)) AS got";

const HOLDER = `SELECT a.pid, a.application_name, a.client_addr::text AS client_addr,
    a.backend_start::text AS backend_start
  FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
  WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
    AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
    AND l.classid::bigint = $1 AND l.objid::bigint = (hashtext($2)::bigint + 4294967296) % 4294967296
  LIMIT 1`;

/** The lock key of consumer `name` (second key: its hash, taken by the server). */
function lockName(name: string): string {
  return `consumer:${name}`;
}

/**
 * Waits until this process holds the lock of consumer `name` (module comment) and returns the
 * lease; null when `opts.signal` aborted first.
 */
export async function acquireConsumerLease(
  parts: LeaseParts,
  name: string,
  opts: LeaseWaitOptions = {},
): Promise<ConsumerLease | null> {
  const pollMs = opts.pollMs ?? LEASE_POLL_MS;
  let conn: PgConnection | null = null;
  let reported = false;
  try {
    while (!opts.signal?.aborted) {
      try {
        conn ??= await PgConnection.open(parts.target, {
          applicationName: `${parts.applicationName} consumer:${name}`,
        });
        const [{ got }] = await conn.sql.unsafe(TRY_LOCK, [PG_LOCK_CONSUMERS, lockName(name)]);
        if (got === true) {
          const lease = new ConsumerLease(parts, name, conn);
          conn = null;
          return lease;
        }
        if (!reported) {
          reported = true;
          const [row] = await conn.sql.unsafe(HOLDER, [PG_LOCK_CONSUMERS, lockName(name)]);
          opts.onWaiting?.(
            row === undefined ? null : {
              pid: row.pid as number,
              applicationName: row.application_name as string | null,
              clientAddr: row.client_addr as string | null,
              backendStart: row.backend_start as string | null,
            },
          );
        }
      } catch (e) {
        opts.onError?.(e);
        await conn?.close().catch(() => {});
        conn = null;
      }
      await sleep(pollMs, opts.signal);
    }
    return null;
  } finally {
    await conn?.close().catch(() => {});
  }
}

/**
 * A consumer lock held by this process (module comment): the store to run the consumer on, and
 * the news of its loss.
 */
export class ConsumerLease implements AsyncDisposable {
  readonly name: string;
  /**
   * The index store of the lock holder: the store's views (its pool), a writer and state whose
   * statements go out on the lock's connection, one call at a time.
   */
  readonly store: IndexStore;
  /** Resolves when the lock's session ended other than by {@link release}. */
  readonly lost: Promise<void>;
  /** The server process of the lock's session. */
  readonly pid: number;
  readonly #conn: PgConnection;
  readonly #released: ((lease: ConsumerLease) => void) | undefined;

  constructor(parts: LeaseParts, name: string, conn: PgConnection) {
    this.name = name;
    this.#conn = conn;
    this.#released = parts.released;
    this.lost = conn.lost;
    this.pid = conn.pid;
    const check = () => {
      if (!conn.usable) {
        throw new PgConnectionLost(
          `The lock of consumer ${name} is no longer held: its database connection ended`,
        );
      }
    };
    const writer = new PgIndexWriter(lockedPool(parts.pool, conn), parts.writerOptions);
    const leased: IndexWriterApi = {
      applyOps: (ops, opts) =>
        conn.exclusive(() => {
          check();
          return writer.applyOps(ops, opts);
        }),
      applySnapshot: (snapshot) =>
        conn.exclusive(() => {
          check();
          return writer.applySnapshot(snapshot);
        }),
      storedRev: (did) => writer.storedRev(did),
      stats: () => writer.stats(),
      listenForGaps: (listener) => {
        writer.listenForGaps(listener);
        parts.baseWriter.listenForGaps(listener);
      },
    };
    const runner: PgRunner = {
      run: (fn) =>
        conn.exclusive(() => {
          check();
          return fn(conn.sql as unknown as PgClient);
        }),
      transaction: (fn) =>
        conn.exclusive(() => {
          check();
          return conn.transaction((sql) => fn(sql as unknown as PgClient));
        }),
    };
    this.store = {
      kind: "postgres",
      views: parts.views,
      writer: leased,
      state: new PgState(runner, { now: parts.now }),
      close: () => this.release(),
    };
  }

  /** Whether the lock's session ended other than by {@link release}. */
  get isLost(): boolean {
    return this.#conn.isLost;
  }

  /** Releases the lock (once the writes queued on its connection have settled). */
  release(): Promise<void> {
    this.#released?.(this);
    return this.#conn.close();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.release();
  }
}

/**
 * `pool` for a {@link PgIndexWriter} whose transactions must go out on `conn`: the writer reserves
 * its connection (or begins its transactions) there, and reads (`storedRev`) from the pool.
 */
export function lockedPool(pool: PgSql, conn: PgConnection | (() => Promise<PgConnection>)): PgSql {
  const connection = typeof conn === "function" ? conn : () => Promise.resolve(conn);
  return new Proxy(pool, {
    get(target, prop, receiver) {
      if (prop === "reserve") return async () => (await connection()).sql;
      if (prop === "begin") {
        return async (...args: unknown[]) => {
          const fn = args[args.length - 1] as (sql: unknown) => Promise<unknown>;
          const c = await connection();
          return await c.transaction(fn);
        };
      }
      return Reflect.get(target, prop, receiver);
    },
  });
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}
