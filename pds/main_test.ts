// PDS_JWT_SECRET (docs/behaviour.md 11): required by `deno task pds` (issue 36); generated for
// `deno task dev` by loadOrCreateJwtSecret. PDS_PLC_URL: required by `deno task pds` (a directory
// or off; issue 38).

import assert from "node:assert/strict";
import { makeTempDir, REPO_ROOT } from "../runtime/_test_helpers.ts";
import { captureLogger } from "./_test_helpers.ts";
import { loadPdsConfig } from "./config.ts";
import {
  GENERATED_SECRET_FILE,
  loadOrCreateJwtSecret,
  requireJwtSecret,
  requirePlcSetting,
} from "./main.ts";

const MISSING_SECRET = "PDS_JWT_SECRET is not set: the account host needs a secret of at " +
  "least 16 characters (only deno task dev generates a development one)";

const MISSING_PLC = "PDS_PLC_URL is not set: name the PLC directory new DIDs are published to " +
  "(https://plc.directory for the public network), or off to keep them unpublished " +
  "(only deno task dev runs without it)";

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

Deno.test("requireJwtSecret returns PDS_JWT_SECRET and refuses to go on without it, naming it (issue 36)", () => {
  assert.equal(
    requireJwtSecret(loadPdsConfig({ PDS_JWT_SECRET: "configured-secret-value" })),
    "configured-secret-value",
  );
  assert.throws(() => requireJwtSecret(loadPdsConfig({})), {
    name: "ConfigError",
    message: MISSING_SECRET,
  });
});

Deno.test("pds/main.ts without PDS_JWT_SECRET exits 1 naming the variable and writes nothing (issue 36)", async () => {
  await using dir = await makeTempDir();
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--quiet",
      "--allow-ffi",
      "--allow-net=127.0.0.1",
      "--allow-read",
      `--allow-write=${dir.path}`,
      "--allow-env",
      "pds/main.ts",
    ],
    cwd: REPO_ROOT.pathname,
    env: { DATA_DIR: dir.path, PDS_PORT: "0", APPVIEW_INTERNAL_URL: "off", NO_COLOR: "1" },
    clearEnv: true,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  // Before, it started with a generated secret and served: stop it rather than wait forever.
  const timer = setTimeout(() => child.kill("SIGKILL"), 30_000);
  const out = await child.output();
  clearTimeout(timer);
  assert.equal(new TextDecoder().decode(out.stderr), `${MISSING_SECRET}\n`);
  assert.equal(out.code, 1);
  assert.deepEqual([...Deno.readDirSync(dir.path)], []);
});

Deno.test("pds/main.ts with a secret but without PDS_PLC_URL exits 1 naming the variable; off or a directory passes (issue 38)", async () => {
  assert.doesNotThrow(() => requirePlcSetting(loadPdsConfig({ PDS_PLC_URL: "off" })));
  assert.doesNotThrow(() =>
    requirePlcSetting(loadPdsConfig({ PDS_PLC_URL: "https://plc.directory" }))
  );
  assert.throws(() => requirePlcSetting(loadPdsConfig({})), {
    name: "ConfigError",
    message: MISSING_PLC,
  });
  await using dir = await makeTempDir();
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--quiet",
      "--allow-ffi",
      "--allow-net=127.0.0.1",
      "--allow-read",
      `--allow-write=${dir.path}`,
      "--allow-env",
      "pds/main.ts",
    ],
    cwd: REPO_ROOT.pathname,
    env: {
      DATA_DIR: dir.path,
      PDS_PORT: "0",
      PDS_JWT_SECRET: "configured-secret-value",
      APPVIEW_INTERNAL_URL: "off",
      NO_COLOR: "1",
    },
    clearEnv: true,
    stdin: "null",
  }).output();
  assert.equal(new TextDecoder().decode(out.stderr), `${MISSING_PLC}\n`);
  assert.equal(out.code, 1);
  assert.deepEqual([...Deno.readDirSync(dir.path)], []);
});
