/**
 * Test helpers for the index database: full, sorted table dumps to compare states.
 *
 * @module
 */

import type { DatabaseSync } from "node:sqlite";

/** Options of {@link dumpTables}. */
export interface DumpOptions {
  /** Tables left out (e.g. `ingest_skips`, an event counter; `schema_migrations` across files). */
  exclude?: readonly string[];
  /** Columns left out of every table (e.g. `id` when comparing different arrival orders). */
  omitColumns?: readonly string[];
}

/**
 * Columns holding an interned DID (`actors.id`, schema version 5), per table. Dumps show the DID
 * instead of the id, and `actors` without its ids: ids depend on arrival order, DIDs do not.
 */
const ACTOR_COLUMNS: Readonly<Record<string, readonly string[]>> = {
  actors: [],
  posts: ["author"],
  likes: ["actor", "subject_author"],
  reposts: ["actor", "subject_author"],
  follows: ["follower", "subject"],
  notifications: ["recipient", "author", "subject_author"],
};

/**
 * Dumps every table of `db` as sorted rows: ordinary tables with all their columns, FTS5 tables
 * as their rowids (`rowid` column), FTS shadow tables and `sqlite_*` internals skipped. Rows are
 * sorted by their JSON form, so two equal states give deep-equal dumps.
 */
export function dumpTables(
  db: DatabaseSync,
  opts: DumpOptions = {},
): Record<string, Record<string, unknown>[]> {
  const exclude = new Set(opts.exclude ?? []);
  const omit = new Set(opts.omitColumns ?? []);
  const tables = db.prepare(
    "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name",
  ).all() as { name: string; sql: string }[];
  const virtual = tables.filter((t) => /^CREATE VIRTUAL TABLE/i.test(t.sql)).map((t) => t.name);
  const isShadow = (name: string) => virtual.some((v) => name.startsWith(`${v}_`));
  const dids = new Map<unknown, unknown>();
  if (tables.some((t) => t.name === "actors")) {
    for (const { id, did } of db.prepare("SELECT id, did FROM actors").all()) dids.set(id, did);
  }
  const dump: Record<string, Record<string, unknown>[]> = {};
  for (const { name } of tables) {
    if (exclude.has(name) || isShadow(name)) continue;
    const select = virtual.includes(name)
      ? `SELECT rowid FROM "${name}"`
      : `SELECT * FROM "${name}"`;
    const rows = (db.prepare(select).all() as Record<string, unknown>[]).map((row) => {
      const copy: Record<string, unknown> = {};
      const actorColumns = ACTOR_COLUMNS[name] ?? [];
      for (const [k, v] of Object.entries(row)) {
        if (omit.has(k) || (name === "actors" && k === "id")) continue;
        copy[k] = actorColumns.includes(k) && v !== null ? dids.get(v) ?? v : v;
      }
      return copy;
    });
    const keyed = rows.map((r) => [JSON.stringify(r), r] as const);
    keyed.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
    dump[name] = keyed.map(([, r]) => r);
  }
  return dump;
}
