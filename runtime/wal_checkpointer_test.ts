import assert from "node:assert/strict";
import { DatabaseSync } from "node:sqlite";
import { createLogger, silentLogger } from "../shared/log.ts";
import { kvRowsInMainFile, rowsInMainFile as rowsOfTableInMainFile } from "./_test_helpers.ts";
import { KV_CHECKPOINTS, startWalCheckpointer, WalCheckpointer } from "./wal_checkpointer.ts";

/** Rows of `t` in the main database file alone (a copy without its WAL). */
function rowsInMainFile(dir: string, path: string): Promise<number> {
  return rowsOfTableInMainFile(dir, path, "t");
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
 * A database in WAL mode in a temp dir with an empty table `t` in its main file, whose connection
 * never checkpoints: only a checkpointer can move rows into the file.
 */
async function openWriter(): Promise<{ dir: string; path: string; db: DatabaseSync }> {
  const dir = await Deno.makeTempDir();
  const path = `${dir}/index.sqlite`;
  const db = new DatabaseSync(path);
  db.exec("PRAGMA journal_mode = WAL");
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

// A Deno KV file (KV_CHECKPOINTS).

/**
 * Writes `commits` atomic operations of four 1.5 KB values each: together well under the 1,000
 * WAL pages at which KV's own writer would checkpoint inside a commit.
 */
async function writeCommits(kv: Deno.Kv, commits: number): Promise<void> {
  const value = new Uint8Array(1500).fill(7);
  for (let i = 0; i < commits; i++) {
    const op = kv.atomic();
    for (let j = 0; j < 4; j++) op.set(["blocks", `did:plc:${j}`, i], value);
    assert.equal((await op.commit()).ok, true);
  }
}

async function walBytes(path: string): Promise<number> {
  try {
    return (await Deno.stat(`${path}-wal`)).size;
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return 0;
    throw err;
  }
}

Deno.test("the checkpointer copies KV's WAL back into the database file while KV keeps it open", async () => {
  const dir = await Deno.makeTempDir({ prefix: "kv-checkpoint-" });
  try {
    // Control: without the checkpointer the rows stay in the WAL until KV's writer fills it.
    const plainPath = `${dir}/plain.kv`;
    const plain = await Deno.openKv(plainPath);
    await writeCommits(plain, 40);
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(await kvRowsInMainFile(dir, plainPath), 0);
    plain.close();

    const path = `${dir}/checkpointed.kv`;
    const kv = await Deno.openKv(path);
    const checkpointer = startWalCheckpointer(path, {
      ...KV_CHECKPOINTS,
      log: silentLogger,
      intervalMs: 5,
    });
    assert.ok(checkpointer);
    try {
      await writeCommits(kv, 40);
      // No request: the worker's own timer copies the 160 rows back.
      const deadline = Date.now() + 10_000;
      let rows = await kvRowsInMainFile(dir, path);
      while (rows < 160 && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 20));
        rows = await kvRowsInMainFile(dir, path);
      }
      assert.equal(rows, 160);
      const now = await checkpointer.checkpoint();
      assert.ok(now !== null && now.log > 0);
      assert.equal(now.checkpointed, now.log);
      assert.equal((await kv.get(["blocks", "did:plc:3", 39])).value instanceof Uint8Array, true);
    } finally {
      await checkpointer.stop();
      kv.close();
    }
    // The checkpointer's connection was closed first, so KV's close was the last and removed
    // the WAL.
    assert.equal(await walBytes(path), 0);
    assert.equal(checkpointer.running, false);
    assert.equal(await checkpointer.checkpoint(), null);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a KV path that is not a local file gets no checkpointer", () => {
  assert.equal(startWalCheckpointer(":memory:", { ...KV_CHECKPOINTS, log: silentLogger }), null);
  assert.equal(
    startWalCheckpointer("https://kv.example.com/db", { ...KV_CHECKPOINTS, log: silentLogger }),
    null,
  );
  assert.throws(
    () =>
      startWalCheckpointer("/tmp/x.kv", { ...KV_CHECKPOINTS, log: silentLogger, intervalMs: 0 }),
    /KV checkpoint interval must be a positive integer \(ms\): 0/,
  );
});

Deno.test("a file that is not a database stops the checkpointer with a warning, not an error", async () => {
  const dir = await Deno.makeTempDir({ prefix: "kv-checkpoint-" });
  const records: Record<string, unknown>[] = [];
  const log = createLogger("test", { level: "debug", sink: (l) => records.push(JSON.parse(l)) });
  try {
    const path = `${dir}/not-a-database.kv`;
    await Deno.writeTextFile(
      path,
      "this is not an SQLite file, and is longer than its header. ".repeat(4),
    );
    const checkpointer = startWalCheckpointer(path, { ...KV_CHECKPOINTS, log, intervalMs: 5 });
    assert.ok(checkpointer);
    assert.equal(await checkpointer.checkpoint(), null);
    assert.equal(checkpointer.running, false);
    const warning = records.find((r) =>
      r.msg === "KV checkpoint worker failed; SQLite checkpoints inline"
    );
    assert.ok(warning, JSON.stringify(records));
    assert.equal(warning.level, "warn");
    assert.match(String(warning.error), /not a database/);
    await checkpointer.stop();
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("with reportTimed false the timed checkpoints copy the WAL back without posting", async () => {
  const { dir, path, db } = await openWriter();
  const checkpointer = new WalCheckpointer(path, { ...KV_CHECKPOINTS, log: silentLogger });
  try {
    assert.equal(checkpointer.start(), true);
    writeRows(db, 0, 100);
    await rowsReach(dir, path, 100);
    assert.equal(checkpointer.checkpoints, 0);
    const result = await checkpointer.checkpoint();
    assert.ok(result !== null);
    assert.equal(result.checkpointed, result.log);
    assert.equal(checkpointer.checkpoints, 1);
  } finally {
    await checkpointer.stop();
    db.close();
    await Deno.remove(dir, { recursive: true });
  }
});
