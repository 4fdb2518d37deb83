// The generated development secret (DESIGN.md section 5: PDS_JWT_SECRET).

import assert from "node:assert/strict";
import { makeTempDir } from "../tests/_util.ts";
import { captureLogger } from "./_test_helpers.ts";
import { loadPdsConfig } from "./config.ts";
import { GENERATED_SECRET_FILE, loadOrCreateJwtSecret } from "./main.ts";

Deno.test("without PDS_JWT_SECRET a secret is generated once, stored 0600 in DATA_DIR and reused, with a warning", async () => {
  await using dir = await makeTempDir();
  const config = loadPdsConfig({ DATA_DIR: `${dir.path}/nested` });
  const { log, lines } = captureLogger();
  const first = await loadOrCreateJwtSecret(config, log);
  assert.match(first, /^[0-9a-f]{64}$/);
  const path = `${dir.path}/nested/${GENERATED_SECRET_FILE}`;
  assert.equal((await Deno.stat(path)).mode! & 0o777, 0o600);
  assert.equal(await loadOrCreateJwtSecret(config, log), first);
  const warnings = lines.map((l) => JSON.parse(l));
  assert.deepEqual(warnings.map((w) => [w.level, w.msg]), [
    ["warn", "PDS_JWT_SECRET is not set: using a generated development secret"],
    ["warn", "PDS_JWT_SECRET is not set: using a generated development secret"],
  ]);
});

Deno.test("with PDS_JWT_SECRET set, the configured secret is used and nothing is written", async () => {
  await using dir = await makeTempDir();
  const config = loadPdsConfig({ DATA_DIR: dir.path, PDS_JWT_SECRET: "configured-secret-value" });
  const { log, lines } = captureLogger();
  assert.equal(await loadOrCreateJwtSecret(config, log), "configured-secret-value");
  assert.deepEqual(lines, []);
  assert.deepEqual([...Deno.readDirSync(dir.path)], []);
});
