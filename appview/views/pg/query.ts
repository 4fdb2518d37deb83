/**
 * How the PostgreSQL views reach the database (issue 40): a `postgres` (npm) client, every
 * statement sent as a named prepared statement (parsed and planned once per connection, like the
 * SQLite views' statements prepared once), parameters as `$1`, `$2`, ...
 *
 * The client must parse `int8` as a number (ids, counts; every id is below 2^53), as
 * `openPgIndex` configures it; the views cast nothing themselves.
 *
 * @module
 */

/**
 * The part of a `postgres` client (`postgres.Sql`, a pool, or a reserved connection) the views
 * use. A query's promise resolves to its rows, with `count` the rows a command changed.
 */
export interface PgClient {
  unsafe(
    query: string,
    parameters?: unknown[],
    queryOptions?: { prepare?: boolean },
  ): PromiseLike<ArrayLike<unknown> & { count: number }>;
}

/** The rows of `text` run with `params`, as a plain array. */
export async function queryRows<T>(
  sql: PgClient,
  text: string,
  params: readonly unknown[],
): Promise<T[]> {
  const rows = await sql.unsafe(text, params as unknown[], { prepare: true });
  return Array.from(rows) as T[];
}

/** The first row of `text`, or undefined. */
export async function queryRow<T>(
  sql: PgClient,
  text: string,
  params: readonly unknown[],
): Promise<T | undefined> {
  const rows = await sql.unsafe(text, params as unknown[], { prepare: true });
  return rows[0] as T | undefined;
}

/** Runs a command; returns how many rows it changed. */
export async function execute(
  sql: PgClient,
  text: string,
  params: readonly unknown[],
): Promise<number> {
  return (await sql.unsafe(text, params as unknown[], { prepare: true })).count;
}

/** `columns` (a comma-separated list of column names) qualified by the table alias `alias`. */
export function qualify(columns: string, alias: string): string {
  return columns.split(",").map((c) => `${alias}.${c.trim()}`).join(", ");
}
