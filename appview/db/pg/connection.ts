/**
 * One PostgreSQL connection of its own (a driver instance of one connection, reserved), for a
 * writer or a consumer lock (`lease.ts`). What it adds to the driver's reserved connection:
 *
 * - it knows when its session ended: the driver reports the close ({@link PgConnection.lost})
 *   before anything awaiting a statement on it runs again;
 * - once the session ended, every statement is refused at once ({@link PgConnectionLost}), never
 *   sent on another session. The driver would otherwise write to the closed socket (an uncaught
 *   TypeError that ends the process, postgres 3.4.9) or, through the pool, on a new session: a
 *   session holding a lock must never be silently replaced by one that does not;
 * - work on it can be queued, one piece at a time ({@link PgConnection.exclusive}), so statements
 *   of two callers never interleave (a status row written inside another caller's transaction).
 *
 * @module
 */

import type postgres from "postgres";
import { openPgIndex, type PgSql } from "./open.ts";
import type { PgConnectionTarget } from "./tls.ts";

/** A statement on a connection whose session ended (or that was closed). */
export class PgConnectionLost extends Error {
  override name = "PgConnectionLost";
}

/** Session settings of every such connection. */
const SESSION_SETTINGS = [
  // An operator's idle timeouts must not end a lock holder's session while its stream is quiet.
  "SET idle_session_timeout = 0",
  "SET idle_in_transaction_session_timeout = 0",
  // The server notices a vanished client (a machine that lost power) within about a minute and
  // ends its session, releasing its locks, instead of the system's two hours.
  "SET tcp_keepalives_idle = 30",
  "SET tcp_keepalives_interval = 10",
  "SET tcp_keepalives_count = 3",
];

/** Options of {@link PgConnection.open}. */
export interface PgConnectionOptions {
  /** `application_name` of the session (shown in `pg_stat_activity`). */
  applicationName: string;
  /** Seconds to wait for the connection. */
  connectTimeoutSeconds?: number;
}

interface ConnectionState {
  lost: boolean;
  closed: boolean;
  onLost: () => void;
}

/** One connection of its own (module comment). */
export class PgConnection {
  readonly #instance: PgSql;
  readonly #raw: postgres.ReservedSql;
  readonly #state: ConnectionState;
  /** The connection's statements, refused once its session ended (module comment). */
  readonly sql: postgres.ReservedSql;
  /** Resolves when the session ends other than by {@link close}. */
  readonly lost: Promise<void>;
  /** The server process of the session (`pg_backend_pid()`). */
  readonly pid: number;
  #queue: Promise<unknown> = Promise.resolve();

  private constructor(
    instance: PgSql,
    raw: postgres.ReservedSql,
    state: ConnectionState,
    lost: Promise<void>,
    pid: number,
  ) {
    this.#instance = instance;
    this.#raw = raw;
    this.#state = state;
    this.lost = lost;
    this.pid = pid;
    const guard = () => {
      if (state.lost) throw new PgConnectionLost("The database connection was lost");
      if (state.closed) throw new PgConnectionLost("The database connection was closed");
    };
    this.sql = new Proxy(raw, {
      apply(target, self, args) {
        guard();
        return Reflect.apply(target, self, args);
      },
      get(target, prop, receiver) {
        if (prop === "release") return () => {}; // kept until close()
        if (prop === "unsafe") {
          return (...args: Parameters<postgres.ReservedSql["unsafe"]>) => {
            guard();
            return target.unsafe(...args);
          };
        }
        return Reflect.get(target, prop, receiver);
      },
    });
  }

  /**
   * Opens a connection to `target` (no migrations: the store's pool ran them).
   *
   * @throws Error when the database cannot be reached
   */
  static async open(target: PgConnectionTarget, opts: PgConnectionOptions): Promise<PgConnection> {
    let onLost = () => {};
    const lost = new Promise<void>((resolve) => (onLost = resolve));
    const state: ConnectionState = { lost: false, closed: false, onLost };
    const instance = await openPgIndex(target.url, {
      max: 1,
      migrate: false,
      ssl: target.ssl,
      applicationName: opts.applicationName,
      connectTimeoutSeconds: opts.connectTimeoutSeconds,
      onclose: () => {
        // Synchronous, in the turn the driver noticed the close: before anything awaiting a
        // statement on this connection runs again.
        if (state.closed || state.lost) return;
        state.lost = true;
        state.onLost();
      },
    });
    let raw: postgres.ReservedSql;
    let pid: number;
    try {
      raw = await instance.reserve();
      for (const setting of SESSION_SETTINGS) await raw.unsafe(setting);
      [{ pid }] = await raw.unsafe("SELECT pg_backend_pid() AS pid") as unknown as {
        pid: number;
      }[];
      if (state.lost) throw new PgConnectionLost("The database connection was lost");
    } catch (e) {
      state.closed = true;
      await instance.end({ timeout: 0 });
      throw e;
    }
    return new PgConnection(instance, raw, state, lost, pid);
  }

  /** Whether statements can still be sent (neither lost nor closed). */
  get usable(): boolean {
    return !this.#state.lost && !this.#state.closed;
  }

  /** Whether the session ended other than by {@link close}. */
  get isLost(): boolean {
    return this.#state.lost;
  }

  /**
   * Runs `fn` after the work queued before it has settled, and before the work queued after it:
   * callers that queue everything they send on this connection never interleave.
   */
  exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.#queue.then(fn, fn);
    this.#queue = run.catch(() => {});
    return run;
  }

  /** Runs `fn` in a transaction on this connection (call it inside {@link exclusive}). */
  async transaction<T>(fn: (sql: postgres.ReservedSql) => Promise<T>): Promise<T> {
    await this.sql.unsafe("BEGIN");
    let result: T;
    try {
      result = await fn(this.sql);
    } catch (e) {
      try {
        if (this.usable) await this.sql.unsafe("ROLLBACK");
      } catch { /* the session is gone, and the transaction with it */ }
      throw e;
    }
    await this.sql.unsafe("COMMIT");
    return result;
  }

  /**
   * Closes the connection once the work queued has settled (ending its session, and the locks it
   * holds); nothing is sent on it after.
   */
  async close(): Promise<void> {
    if (this.#state.closed) return;
    await this.exclusive(() => Promise.resolve());
    this.#state.closed = true;
    try {
      this.#raw.release();
    } catch { /* gone with its session */ }
    await this.#instance.end({ timeout: 1 });
  }
}
