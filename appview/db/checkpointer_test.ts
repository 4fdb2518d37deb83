import assert from "node:assert/strict";
import { DatabaseSync } from "node:sqlite";
import { createLogger } from "../../shared/log.ts";
import { WalCheckpointer } from "./checkpointer.ts";
import { openIndexDb } from "./open.ts";

/** Rows of `t` in the main database file alone (a copy without its WAL). */
async function rowsInMainFile(dir: string, path: string): Promise<number> {
  const copy = `${dir}/copy-${crypto.randomUUID()}.sqlite`;
  await Deno.copyFile(path, copy);
  const db = new DatabaseSync(copy);
  try {
    return (db.prepare("SELECT count(*) AS n FROM t").get() as { n: number }).n;
  } finally {
    db.close();
  }
}

function writeRows(db: DatabaseSync, from: number, n: number): void {
  db.exec("BEGIN");
  const insert = db.prepare("INSERT INTO t (id, body) VALUES (?, ?)");
  for (let i = from; i < from + n; i++) insert.run(i, "x".repeat(200));
  db.exec("COMMIT");
}

/** Waits (up to 5 s) until the main file alone holds `n` rows of `t`. */
async function rowsReach(dir: string, path: string, n: number): Promise<void> {
  for (let i = 0; i < 500; i++) {
    if (await rowsInMainFile(dir, path) === n) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  assert.equal(await rowsInMainFile(dir, path), n);
}

/**
 * An index database in a temp dir with an empty table `t` in its main file, whose connection
 * never checkpoints: only a checkpointer can move rows into the file.
 */
async function openWriter(): Promise<{ dir: string; path: string; db: DatabaseSync }> {
  const dir = await Deno.makeTempDir();
  const path = `${dir}/index.sqlite`;
  const db = openIndexDb(path);
  db.exec("PRAGMA wal_autocheckpoint = 0");
  db.exec("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)");
  db.exec("PRAGMA wal_checkpoint(TRUNCATE)");
  return { dir, path, db };
}

/** A started checkpointer on a 10 ms interval over {@link openWriter}'s database, for `fn`. */
async function withIntervalCheckpointer(
  fn: (
    t: { dir: string; path: string; db: DatabaseSync; checkpointer: WalCheckpointer },
  ) => Promise<void>,
): Promise<void> {
  const { dir, path, db } = await openWriter();
  const checkpointer = new WalCheckpointer(path, {
    log: createLogger("test", { level: "error" }),
    intervalMs: 10,
  });
  try {
    checkpointer.start();
    await fn({ dir, path, db, checkpointer });
  } finally {
    await checkpointer.stop();
    db.close();
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("WalCheckpointer copies the WAL back into the database file from its worker", async () => {
  const { dir, path, db } = await openWriter();
  const checkpointer = new WalCheckpointer(path, { log: createLogger("test", { level: "error" }) });
  try {
    assert.equal(checkpointer.start(), true);
    writeRows(db, 0, 500);
    assert.equal(await rowsInMainFile(dir, path), 0);
    const result = await checkpointer.checkpoint();
    assert.ok(result !== null);
    assert.equal(result.busy, 0);
    assert.ok(result.log > 0, `log ${result.log}`);
    assert.equal(result.checkpointed, result.log);
    assert.equal(await rowsInMainFile(dir, path), 500);
    assert.equal(checkpointer.checkpoints, 1);
    // Stopping closes the worker's connection: the writer's close is then the last one, which
    // checkpoints and removes the WAL.
    await checkpointer.stop();
    assert.equal(await checkpointer.checkpoint(), null);
    writeRows(db, 500, 10);
    db.close();
    await assert.rejects(Deno.stat(`${path}-wal`), Deno.errors.NotFound);
    assert.equal(await rowsInMainFile(dir, path), 510);
  } finally {
    await checkpointer.stop();
    if (db.isOpen) db.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("WalCheckpointer checkpoints on its interval while the writer goes on", async () => {
  await withIntervalCheckpointer(async ({ dir, path, db }) => {
    for (let round = 0; round < 5; round++) {
      writeRows(db, round * 100, 100);
      await rowsReach(dir, path, (round + 1) * 100);
    }
  });
});

Deno.test("an idle WalCheckpointer neither checkpoints nor wakes the main thread", async () => {
  await withIntervalCheckpointer(async ({ dir, path, db, checkpointer }) => {
    writeRows(db, 0, 100);
    await rowsReach(dir, path, 100);
    // Until the results of the runs under way when the rows arrived have come in.
    let settled = checkpointer.checkpoints;
    for (let quiet = 0; quiet < 5; quiet++) {
      await new Promise((r) => setTimeout(r, 20));
      if (checkpointer.checkpoints !== settled) [settled, quiet] = [checkpointer.checkpoints, 0];
    }
    assert.ok(settled >= 1);
    // 20 intervals with no commit: no result reaches the main thread.
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(checkpointer.checkpoints, settled);
    // A commit from another connection wakes it up again.
    writeRows(db, 100, 100);
    await rowsReach(dir, path, 200);
    for (let i = 0; i < 500 && checkpointer.checkpoints === settled; i++) {
      await new Promise((r) => setTimeout(r, 10));
    }
    assert.ok(checkpointer.checkpoints > settled);
  });
});

Deno.test("WalCheckpointer that cannot open the database logs once and stops", async () => {
  const dir = await Deno.makeTempDir();
  const records: { msg: string; level: string }[] = [];
  const log = createLogger("test", { level: "debug", sink: (l) => records.push(JSON.parse(l)) });
  // A directory is not a database file.
  const checkpointer = new WalCheckpointer(dir, { log, intervalMs: 10 });
  try {
    assert.equal(checkpointer.start(), true);
    for (let i = 0; i < 100 && records.length === 0; i++) {
      await new Promise((r) => setTimeout(r, 10));
    }
    await new Promise((r) => setTimeout(r, 50));
    assert.deepEqual(records.map((r) => `${r.level} ${r.msg}`), [
      "warn Checkpoint worker failed; SQLite checkpoints inline",
    ]);
    assert.equal(await checkpointer.checkpoint(), null);
    assert.equal(checkpointer.checkpoints, 0);
  } finally {
    await checkpointer.stop();
    await Deno.remove(dir, { recursive: true });
  }
});
