import assert from "node:assert/strict";
import { createLogger, silentLogger } from "../../shared/log.ts";
import { kvRowsInMainFile } from "../_test_helpers.ts";
import { KvCheckpointer } from "./kv_checkpointer.ts";

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
    const checkpointer = KvCheckpointer.start(path, { log: silentLogger, intervalMs: 5 });
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
  assert.equal(KvCheckpointer.start(":memory:", { log: silentLogger }), null);
  assert.equal(KvCheckpointer.start("https://kv.example.com/db", { log: silentLogger }), null);
  assert.throws(
    () => KvCheckpointer.start("/tmp/x.kv", { log: silentLogger, intervalMs: 0 }),
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
    const checkpointer = KvCheckpointer.start(path, { log, intervalMs: 5 });
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
