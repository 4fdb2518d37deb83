/**
 * Test harness of the cross-component tests: the subprocess environment, the interop vectors and
 * the account host's scripts run as subprocesses. The helpers every component shares (temporary
 * directories, servers on port 0, free ports, `waitFor`, captured loggers, clocks, the
 * repository's paths and tasks) are in `runtime/_test_helpers.ts`, and the fake Jetstream in
 * `appview/_test_helpers.ts`; both re-exported here.
 *
 * @module
 */

import { REPO_ROOT } from "../runtime/_test_helpers.ts";

export {
  captureLogger,
  captureLogRecords,
  freePort,
  makeTempDir,
  ManualClock,
  offsetClock,
  type PermissionSet,
  REPO_ROOT,
  serveOnPort0,
  taskCommand,
  taskPermissionSet,
  type TempDir,
  type TestServer,
  waitFor,
} from "../runtime/_test_helpers.ts";
export { type FakeJetstream, startFakeJetstream } from "../appview/_test_helpers.ts";

/** Environment passed through to subprocesses (the rest is cleared). */
export function baseEnv(): Record<string, string> {
  const env: Record<string, string> = { NO_COLOR: "1" };
  for (const name of ["PATH", "HOME", "DENO_DIR", "XDG_CACHE_HOME", "TMPDIR"]) {
    const value = Deno.env.get(name);
    if (value !== undefined) env[name] = value;
  }
  return env;
}

/** The interop vectors folder beside the checkout, or null when absent (tests then skip). */
export const INTEROP_DIR: URL | null = (() => {
  const dir = new URL("../shared/testdata/atproto-interop/", REPO_ROOT);
  try {
    Deno.statSync(dir);
    return dir;
  } catch {
    console.warn(`interop vectors not found at ${dir.pathname}: conformance tests are skipped`);
    return null;
  }
})();

/**
 * Environment variables the account host's command line scripts may read: every account host
 * variable (`PDS_ENV_VARS`; their tasks grant these and the index's). Written out rather than
 * imported: this harness serves the index's tests too, which must not load `pds/`.
 */
const PDS_SCRIPT_ENV = "DATA_DIR,LOG_LEVEL,PDS_*,APPVIEW_*";

/**
 * Runs `scripts/<script>` as a subprocess on the KV file `<dir>/pds.kv`, writing only in `dir`,
 * with a clean environment (`env` replaces the default `DATA_DIR`/`PDS_KV_PATH` pair); returns
 * its exit code and output.
 */
export async function runPdsScript(
  script: string,
  dir: string,
  args: string[],
  env: Record<string, string> = { DATA_DIR: dir, PDS_KV_PATH: `${dir}/pds.kv` },
): Promise<{ code: number; stdout: string; stderr: string }> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--quiet",
      "--allow-read",
      `--allow-write=${dir}`,
      `--allow-env=${PDS_SCRIPT_ENV}`,
      new URL(`scripts/${script}`, REPO_ROOT).pathname,
      ...args,
    ],
    cwd: REPO_ROOT.pathname,
    env,
    clearEnv: true,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const decode = (b: Uint8Array) => new TextDecoder().decode(b);
  return { code: out.code, stdout: decode(out.stdout), stderr: decode(out.stderr) };
}
