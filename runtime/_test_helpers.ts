/**
 * Test helpers for SQLite files in WAL mode: what the database file alone holds, without its WAL.
 *
 * @module
 */

import { DatabaseSync } from "node:sqlite";

/**
 * Rows of `table` in an SQLite file's database file alone, without its WAL (0 when the table is
 * not there yet): what a checkpoint has copied back. Reads a copy made in `dir`; a copy taken
 * while a checkpoint was writing the file can be torn, and is taken again.
 */
export async function rowsInMainFile(dir: string, path: string, table: string): Promise<number> {
  for (let attempt = 1;; attempt++) {
    try {
      return await countRowsOfCopy(dir, path, table);
    } catch (err) {
      const torn = err instanceof Error && /malformed|not a database/.test(err.message);
      if (!torn || attempt === 20) throw err;
      await new Promise((r) => setTimeout(r, 10));
    }
  }
}

/** KV rows in a Deno KV file's database file alone ({@link rowsInMainFile} of table `kv`). */
export function kvRowsInMainFile(dir: string, path: string): Promise<number> {
  return rowsInMainFile(dir, path, "kv");
}

async function countRowsOfCopy(dir: string, path: string, table: string): Promise<number> {
  const copy = `${dir}/copy-${crypto.randomUUID()}.sqlite`;
  await Deno.copyFile(path, copy);
  try {
    const db = new DatabaseSync(copy);
    try {
      const found = db.prepare("SELECT 1 FROM sqlite_master WHERE name = ?").get(table);
      if (found === undefined) return 0;
      return (db.prepare(`SELECT count(*) AS n FROM "${table}"`).get() as { n: number }).n;
    } finally {
      db.close();
    }
  } finally {
    await Deno.remove(copy);
  }
}
