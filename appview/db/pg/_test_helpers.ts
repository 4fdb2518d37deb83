/**
 * Helpers of the PostgreSQL index tests: one throwaway cluster per test file, an empty database
 * per test, and table dumps of both backends in one form, so a state reached on SQLite and on
 * PostgreSQL compares with `assertEquals`.
 *
 * @module
 */

import type { DatabaseSync } from "node:sqlite";
import {
  locatePostgres,
  POSTGRES_SKIP_MESSAGE,
  type PostgresCluster,
  startPostgres,
} from "../../../runtime/_postgres.ts";
import { openPgIndex, type PgIndexOptions, type PgSql } from "./open.ts";

/** The machine's PostgreSQL, or null (the tests skip, saying how to run them). */
export const pgInstall = await locatePostgres();
if (pgInstall === null) console.warn(POSTGRES_SKIP_MESSAGE);

let cluster: PostgresCluster | null = null;
let databases = 0;

/** A new empty database on this file's cluster (started on first use), as a URL. */
export async function freshPgDatabase(): Promise<string> {
  cluster ??= await startPostgres({ install: pgInstall! });
  return await cluster!.createDatabase(`test_${Deno.pid}_${++databases}`);
}

/** A new database with the index schema, opened. */
export async function openFreshPgIndex(opts: PgIndexOptions = {}): Promise<PgSql> {
  return await openPgIndex(await freshPgDatabase(), { max: 4, ...opts });
}

/**
 * Registers a test that needs PostgreSQL (ignored without it). Resources are not sanitized: the
 * driver keeps timers per connection after `end()`.
 */
export function pgTest(name: string, fn: () => Promise<void>): void {
  Deno.test({
    name,
    ignore: pgInstall === null,
    fn,
    sanitizeResources: false,
    sanitizeOps: false,
  });
}

/** Registers the last test of a file: it stops the file's cluster. */
export function stopPgClusterAfterTests(): void {
  Deno.test({
    name: "(stops the file's PostgreSQL cluster)",
    ignore: pgInstall === null,
    async fn() {
      await cluster?.stop();
      cluster = null;
    },
  });
}

/** A table dump: rows of each table, normalised (see {@link normaliseDump}). */
export type Dump = Record<string, Record<string, unknown>[]>;

/** Columns holding an actor id, per table (shown as the DID). */
const ACTOR_COLUMNS: Readonly<Record<string, readonly string[]>> = {
  posts: ["author"],
  likes: ["actor", "subject_author"],
  reposts: ["actor", "subject_author"],
  follows: ["follower", "subject"],
  blocks: ["actor", "subject"],
  mutes: ["actor", "subject"],
  notifications: ["recipient", "author", "subject_author"],
  inactive_actors: ["actor"],
};

/** Tables whose `id` is a surrogate key growing with insertion order. */
const SURROGATE_IDS = new Set(["posts", "notifications"]);

/**
 * Normalises raw rows of every table: actor ids become DIDs (`actors` keeps only its DIDs),
 * surrogate ids become their rank in id order (ids differ between the engines, their order must
 * not), keys are sorted, rows sorted by their JSON form.
 */
function normaliseDump(raw: Record<string, Record<string, unknown>[]>): Dump {
  const dids = new Map<unknown, unknown>();
  for (const row of raw.actors ?? []) dids.set(row.id, row.did);
  const dump: Dump = {};
  for (const [table, rows] of Object.entries(raw)) {
    const ranks = new Map<unknown, number>();
    if (SURROGATE_IDS.has(table)) {
      [...rows].map((r) => r.id as number).sort((a, b) => a - b).forEach((id, i) =>
        ranks.set(id, i + 1)
      );
    }
    const actorColumns = ACTOR_COLUMNS[table] ?? [];
    const out = rows.map((row) => {
      const copy: Record<string, unknown> = {};
      for (const key of Object.keys(row).sort()) {
        const v = row[key];
        if (table === "actors" && key === "id") continue;
        if (key === "id" && SURROGATE_IDS.has(table)) copy[key] = ranks.get(v);
        else if (actorColumns.includes(key) && v !== null) copy[key] = dids.get(v) ?? `?${v}`;
        else copy[key] = typeof v === "bigint" ? Number(v) : v;
      }
      return copy;
    });
    const keyed = out.map((r) => [JSON.stringify(r), r] as const);
    keyed.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
    dump[table] = keyed.map(([, r]) => r);
  }
  return dump;
}

/** Tables of the index on both backends (SQLite's FTS table and the migrations log left out). */
const SKIPPED = new Set(["schema_migrations", "posts_fts"]);

/** Every table of the SQLite index `db`, normalised. */
export function dumpSqliteIndex(db: DatabaseSync): Dump {
  const tables = db.prepare(
    `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'
     AND name NOT LIKE 'posts_fts%' ORDER BY name`,
  ).all() as { name: string }[];
  const raw: Record<string, Record<string, unknown>[]> = {};
  for (const { name } of tables) {
    if (SKIPPED.has(name)) continue;
    raw[name] = db.prepare(`SELECT * FROM "${name}"`).all().map((r) => ({ ...r }));
  }
  return normaliseDump(raw);
}

/** Every table of the PostgreSQL index `sql`, normalised. */
export async function dumpPgIndex(sql: PgSql): Promise<Dump> {
  const tables = await sql`SELECT table_name FROM information_schema.tables
    WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY table_name`;
  const raw: Record<string, Record<string, unknown>[]> = {};
  for (const { table_name: name } of tables) {
    if (SKIPPED.has(name)) continue;
    raw[name] = (await sql.unsafe(`SELECT * FROM "${name}"`)).map((r) => {
      const { search_vector: _, ...row } = r; // derived from `text` (version 11), SQLite has none
      return row;
    });
  }
  return normaliseDump(raw);
}
