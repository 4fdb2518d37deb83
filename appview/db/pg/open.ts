/**
 * Opening the index database on PostgreSQL (issue 40): a pool of the `postgres` driver
 * (porsager's postgres.js), then the ordered migrations (`migrations.ts`).
 *
 * Connection settings:
 * - the URL's own options (`sslmode`, host, port, user, password, database) as postgres.js reads
 *   them, and the libpq variables (`PGHOST`, `PGPASSWORD`, ...) for what the URL leaves out, which
 *   is why the processes that open the index need env access to `PG*`;
 * - a pool of {@link DEFAULT_POOL_MAX} connections (option `max`);
 * - prepared statements (named, cached per connection); a pooler in transaction mode (PgBouncer)
 *   needs `prepare: false`;
 * - `int8` values (`bigint` columns, `count(*)`) parsed as JavaScript numbers: every id, counter
 *   and cursor of the index stays below 2^53 (a larger one throws rather than lose digits);
 * - server notices dropped (migrations raise some), `application_name` `social-index`;
 * - `jit` off: the index's statements are short, and PostgreSQL compiles any plan costed above
 *   `jit_above_cost` (100,000 by default), which search's plans for a viewer are at 1M posts:
 *   the compilation took 16-18 ms of a 20 ms statement whose execution took 3 ms (query bench,
 *   2026-11-28). Without it search+viewer's p50 went from about 20 ms to about 5.
 *
 * @module
 */

import postgres from "postgres";
import { type PgMigration, runPgMigrations } from "./migrations.ts";

/** A pool of connections to the index database. */
export type PgSql = postgres.Sql;

/** Connections in the pool unless told otherwise. */
export const DEFAULT_POOL_MAX = 10;
/** Seconds to wait for a connection before failing. */
export const CONNECT_TIMEOUT_S = 10;
/** `application_name` of the index's connections (visible in `pg_stat_activity`). */
export const APPLICATION_NAME = "social-index";

/** Options of {@link openPgIndex}. */
export interface PgIndexOptions {
  /** Connections in the pool (default {@link DEFAULT_POOL_MAX}). */
  max?: number;
  /** Run pending migrations (default true). */
  migrate?: boolean;
  /** Named prepared statements (default true; false behind a pooler in transaction mode). */
  prepare?: boolean;
  /** Seconds to wait for a connection (default {@link CONNECT_TIMEOUT_S}). */
  connectTimeoutSeconds?: number;
  /** Seconds an idle connection is kept (default: kept). */
  idleTimeoutSeconds?: number;
  /** `application_name` (default {@link APPLICATION_NAME}). */
  applicationName?: string;
  /** Migrations to run (tests; default every migration). */
  migrations?: readonly PgMigration[];
  /** Clock of `schema_migrations.applied_at`. */
  now?: () => Date;
  /**
   * TLS of the driver (`ssl`: false, `"require"`, or Node TLS options such as `ca`); default: what
   * the URL's `sslmode` says (`store.ts` reads `sslmode` and `sslrootcert` into this).
   */
  ssl?: postgres.Options<Record<string, postgres.PostgresType>>["ssl"];
  /** Called with the connection's id each time one of the pool's connections closes. */
  onclose?: (connectionId: number) => void;
}

/** Parses an `int8` as a number, refusing one that a number cannot hold exactly. */
function parseInt8(text: string): number {
  const n = Number(text);
  if (!Number.isSafeInteger(n)) throw new RangeError(`Integer out of range: ${text}`);
  return n;
}

/**
 * Opens a pool on the index database at `url` (`postgres://user:password@host:port/database`,
 * options in its query) and runs pending migrations. Close it with `sql.end()`.
 *
 * @throws Error when the database cannot be reached or is newer than this code (the pool is
 *   closed then); the message never holds the URL, which may carry a password
 */
export async function openPgIndex(url: string, opts: PgIndexOptions = {}): Promise<PgSql> {
  const max = opts.max ?? DEFAULT_POOL_MAX;
  if (!Number.isInteger(max) || max < 1 || max > 1000) {
    throw new RangeError(`Pool size must be an integer from 1 to 1000: ${max}`);
  }
  const sql = postgres(url, {
    max,
    prepare: opts.prepare ?? true,
    connect_timeout: opts.connectTimeoutSeconds ?? CONNECT_TIMEOUT_S,
    idle_timeout: opts.idleTimeoutSeconds,
    ...(opts.ssl === undefined ? {} : { ssl: opts.ssl }),
    onclose: opts.onclose,
    onnotice: () => {},
    connection: { application_name: opts.applicationName ?? APPLICATION_NAME, jit: "off" },
    types: {
      int8: {
        to: 20,
        from: [20],
        serialize: (x: number | bigint) => String(x),
        parse: parseInt8,
      },
    },
  }) as unknown as PgSql;
  try {
    // Reaching the server (and the permissions to) fails here, as a rejected promise.
    await sql`SELECT 1`;
    if (opts.migrate ?? true) {
      await runPgMigrations(sql, { migrations: opts.migrations, now: opts.now });
    }
  } catch (e) {
    await sql.end({ timeout: 0 });
    throw e;
  }
  return sql;
}
