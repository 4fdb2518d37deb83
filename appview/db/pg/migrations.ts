/**
 * Ordered schema migrations of the index database on PostgreSQL. Versions are SQLite's
 * (`appview/db/migrations.ts`): PostgreSQL starts at version 10, the whole schema as SQLite has it
 * at version 10 (`schema.ts`), and every later step is appended to both lists with the same
 * number, so "version N" names one schema on either backend.
 *
 * Each step runs once, in its own transaction holding the migration lock
 * (`pg_advisory_xact_lock`, {@link PG_LOCK_MIGRATIONS}), and is recorded in `schema_migrations`
 * in that transaction: any number of processes may open the database at once (API processes,
 * consumers), and each step still runs exactly once. A database newer than the code (a
 * downgrade) is refused before anything is written.
 *
 * @module
 */

import type postgres from "postgres";
import {
  PG_LOCK_MIGRATIONS,
  PG_LOCK_NAMESPACE,
  PG_STORED_SEARCH_VECTOR_V11,
  PG_TABLES_V10,
  searchFunctionsSql,
} from "./schema.ts";
import { PG_WRITE_FUNCTIONS_V10 } from "./write_functions.ts";

/** A transaction (or connection) migrations run on. */
export type PgTx = postgres.TransactionSql | postgres.Sql;

/** One schema step: its version (10, 11, ... without gaps) and a name; `apply` runs its DDL. */
export interface PgMigration {
  readonly version: number;
  readonly name: string;
  apply(tx: PgTx): Promise<void>;
}

/**
 * Version 10: the schema of SQLite version 10 (`schema.ts`), with the `unaccent` extension that
 * search normalisation uses (created when missing; it is trusted, see `schema.ts`).
 */
async function initialSchema(tx: PgTx): Promise<void> {
  await tx.unsafe("CREATE EXTENSION IF NOT EXISTS unaccent");
  const [{ ext, own }] = await tx.unsafe(
    `SELECT n.nspname AS ext, current_schema() AS own
     FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
     WHERE e.extname = 'unaccent'`,
  );
  if (own === null) throw new Error("No schema to create the index's tables in (search_path)");
  await tx.unsafe(searchFunctionsSql(ext as string, own as string));
  await tx.unsafe(PG_TABLES_V10);
  await tx.unsafe(PG_WRITE_FUNCTIONS_V10);
}

/** Every migration, in order. */
export const PG_MIGRATIONS: readonly PgMigration[] = Object.freeze([
  {
    version: 10,
    name: "initial PostgreSQL schema, equal to SQLite version 10",
    apply: initialSchema,
  },
  {
    version: 11,
    name: "search vector stored in posts",
    apply: async (tx) => void await tx.unsafe(PG_STORED_SEARCH_VECTOR_V11),
  },
]);

const CREATE_MIGRATIONS_TABLE = `CREATE TABLE IF NOT EXISTS schema_migrations (
  version integer PRIMARY KEY,
  name text NOT NULL,
  applied_at text COLLATE "C" NOT NULL
)`;

/**
 * The last migration applied (0 for an empty database). The table is looked up in `pg_class` (a
 * snapshot read), not with `to_regclass`, which may answer from a cache that does not know yet of
 * a table another process created since this transaction began.
 */
export async function pgSchemaVersion(sql: PgTx): Promise<number> {
  const [{ exists }] = await sql.unsafe(
    `SELECT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
       WHERE c.relname = 'schema_migrations' AND n.nspname = current_schema()) AS exists`,
  );
  if (!exists) return 0;
  const [{ version }] = await sql.unsafe(
    "SELECT coalesce(max(version), 0)::integer AS version FROM schema_migrations",
  );
  return version as number;
}

/**
 * Applies the migrations newer than the database's version, in order, each in its own
 * transaction under the migration lock. Returns the versions applied by this call (empty when up
 * to date).
 *
 * @throws Error when the database is newer than this code knows (a downgrade)
 */
export async function runPgMigrations(
  sql: postgres.Sql,
  opts: { migrations?: readonly PgMigration[]; now?: () => Date } = {},
): Promise<number[]> {
  const migrations = opts.migrations ?? PG_MIGRATIONS;
  const now = opts.now ?? (() => new Date());
  const latest = migrations.length === 0 ? 0 : migrations[migrations.length - 1].version;
  const refuseNewer = (version: number) => {
    if (version > latest) {
      throw new Error(`Database schema version ${version} is newer than this code (${latest})`);
    }
  };
  let version = await pgSchemaVersion(sql);
  refuseNewer(version);
  const applied: number[] = [];
  for (const step of migrations) {
    if (version >= step.version) continue; // cheap check outside the lock
    version = await sql.begin(async (tx) => {
      await tx.unsafe("SELECT pg_advisory_xact_lock($1, $2)", [
        PG_LOCK_NAMESPACE,
        PG_LOCK_MIGRATIONS,
      ]);
      // Re-checked under the lock: another process may have migrated meanwhile.
      await tx.unsafe(CREATE_MIGRATIONS_TABLE);
      const current = await pgSchemaVersion(tx);
      refuseNewer(current);
      if (current >= step.version) return current;
      await step.apply(tx);
      await tx.unsafe(
        "INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)",
        [step.version, step.name, now().toISOString()],
      );
      applied.push(step.version);
      return step.version;
    });
  }
  return applied;
}
