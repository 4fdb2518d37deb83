/**
 * Ordered schema migrations of the index database. Each step runs once, inside its own
 * `BEGIN IMMEDIATE` transaction, and is recorded both in `schema_migrations` and in
 * `PRAGMA user_version`, so reopening a database (or two processes opening it at once) never runs
 * a step twice. Append new steps; never edit or reorder released ones.
 *
 * @module
 */

import type { DatabaseSync } from "node:sqlite";
import { SCHEMA_V1 } from "./schema.ts";

/** One schema step: its version (1, 2, ... without gaps), a name and the SQL to run. */
export interface Migration {
  readonly version: number;
  readonly name: string;
  readonly sql: string;
}

/**
 * Version 2, read-side index shapes (same number of indexes, so no extra write cost per row):
 * - `posts_by_time` also carries `did`, so the home timeline's walk of the global time index
 *   filters by author without a table lookup per row read;
 * - `posts_by_parent` also carries the reply order (`indexed_at`, `uri`), so a thread reads its
 *   first replies in order instead of sorting every reply of the post.
 */
const READ_INDEXES_V2 = `
DROP INDEX posts_by_time;
CREATE INDEX posts_by_time ON posts (indexed_at DESC, uri DESC, did);
DROP INDEX posts_by_parent;
CREATE INDEX posts_by_parent ON posts (parent_uri, indexed_at, uri) WHERE parent_uri IS NOT NULL;
`;

/**
 * Version 3, per-repository ordering of ingest: the rev of the latest commit applied for each
 * repository (`repo_revs`, see schema.ts). The write path reads it once per commit and writes it in
 * the transaction of the commit's ops, so a stale or early commit (a delayed push, a rewound
 * public stream) can no longer undo a later one.
 */
const REPO_REVS_V3 = `
CREATE TABLE repo_revs (
  did TEXT PRIMARY KEY,
  rev TEXT NOT NULL
) WITHOUT ROWID;
`;

/**
 * Version 4, one random-key index less per reply: `posts_by_root` served no query (threads walk
 * `parent_uri` through `posts_by_parent`; the root post is read by its URI), yet every reply paid
 * for its entry (`deno task bench ingest`).
 */
const DROP_ROOT_INDEX_V4 = `DROP INDEX IF EXISTS posts_by_root;`;

/** Every migration, in order. */
export const MIGRATIONS: readonly Migration[] = Object.freeze([
  { version: 1, name: "initial schema", sql: SCHEMA_V1 },
  { version: 2, name: "covering timeline and reply indexes", sql: READ_INDEXES_V2 },
  { version: 3, name: "latest applied rev per repository", sql: REPO_REVS_V3 },
  { version: 4, name: "drop the unused root-post index", sql: DROP_ROOT_INDEX_V4 },
]);

const CREATE_MIGRATIONS_TABLE = `CREATE TABLE IF NOT EXISTS schema_migrations (
  version INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  applied_at TEXT NOT NULL
)`;

/** Returns `PRAGMA user_version`: the last migration applied. */
export function schemaVersion(db: DatabaseSync): number {
  const row = db.prepare("PRAGMA user_version").get() as { user_version: number };
  return row.user_version;
}

/**
 * Applies the migrations newer than the database's `user_version`, in order, each in its own
 * transaction. Returns the versions applied by this call (empty when up to date).
 *
 * @throws Error when the database is newer than this code knows (a downgrade)
 */
export function runMigrations(
  db: DatabaseSync,
  opts: { migrations?: readonly Migration[]; now?: () => Date } = {},
): number[] {
  const migrations = opts.migrations ?? MIGRATIONS;
  const now = opts.now ?? (() => new Date());
  const latest = migrations.length === 0 ? 0 : migrations[migrations.length - 1].version;
  const applied: number[] = [];
  if (schemaVersion(db) > latest) {
    throw new Error(
      `Database schema version ${schemaVersion(db)} is newer than this code (${latest})`,
    );
  }
  for (const step of migrations) {
    if (schemaVersion(db) >= step.version) continue; // cheap check outside the lock
    db.exec("BEGIN IMMEDIATE");
    try {
      // Re-checked under the write lock: another process may have migrated meanwhile.
      if (schemaVersion(db) < step.version) {
        db.exec(CREATE_MIGRATIONS_TABLE);
        db.exec(step.sql);
        db.prepare("INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)")
          .run(step.version, step.name, now().toISOString());
        db.exec(`PRAGMA user_version = ${Math.trunc(step.version)}`);
        applied.push(step.version);
      }
      db.exec("COMMIT");
    } catch (e) {
      db.exec("ROLLBACK");
      throw e;
    }
  }
  return applied;
}
