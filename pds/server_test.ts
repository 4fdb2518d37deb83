// Starting the account host (docs/behaviour.md 11: PDS_PORT).

import assert from "node:assert/strict";
import { makeTempDir } from "../runtime/_test_helpers.ts";
import { captureLogger, kvRowsInMainFile, TEST_ENV } from "./_test_helpers.ts";
import { ConfigError } from "./config.ts";
import { startPds } from "./server.ts";

Deno.test("startPds on a port already in use fails naming PDS_PORT and the address", async () => {
  await using dir = await makeTempDir();
  using taken = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (taken.addr as Deno.NetAddr).port;
  await assert.rejects(
    startPds({
      env: { ...TEST_ENV, DATA_DIR: dir.path, PDS_PORT: String(port) },
      hostname: "127.0.0.1",
      log: captureLogger().log,
    }),
    (err: unknown) =>
      err instanceof ConfigError &&
      err.message ===
        `PDS_PORT: address 127.0.0.1:${port} is already in use; set PDS_PORT to a free port`,
  );
});

Deno.test("startPds on an address it cannot listen on fails naming PDS_HOSTNAME and the value", async () => {
  await using dir = await makeTempDir();
  await assert.rejects(
    startPds({
      env: { ...TEST_ENV, DATA_DIR: dir.path, PDS_HOSTNAME: "not a host!", PDS_PORT: "0" },
      log: captureLogger().log,
    }),
    (err: unknown) =>
      err instanceof ConfigError &&
      err.message ===
        `PDS_HOSTNAME: cannot listen on "not a host!": invalid host 'not a host!': invalid char found in FQDN`,
  );
});

Deno.test("startPds checkpoints its KV file in the background and stops before closing KV", async () => {
  await using dir = await makeTempDir();
  const path = `${dir.path}/pds.kv`;
  const pds = await startPds({
    env: { ...TEST_ENV, DATA_DIR: dir.path },
    hostname: "127.0.0.1",
    port: 0,
    log: captureLogger().log,
  });
  try {
    await pds.ctx.kv.set(["checkpoint-probe"], "x");
    // Counted again each time: the blob sweep's first run may still add its index marker.
    const countRows = async () => (await Array.fromAsync(pds.ctx.kv.list({ prefix: [] }))).length;
    // Nothing here writes the WAL's 1,000 pages: only the background checkpoint copies rows back.
    const deadline = Date.now() + 10_000;
    let stored = await countRows();
    let rows = await kvRowsInMainFile(dir.path, path);
    while (rows !== stored && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 20));
      stored = await countRows();
      rows = await kvRowsInMainFile(dir.path, path);
    }
    assert.equal(rows, stored);
  } finally {
    await pds.close();
  }
  await assert.rejects(Deno.stat(`${path}-wal`), Deno.errors.NotFound);
});
