/**
 * Test harness of the cross-component tests: a fake Jetstream (a real WebSocket server fed by the
 * test), the repository's paths and tasks, and the subprocess environment. The helpers every
 * component shares (temporary directories, servers on port 0, free ports, `waitFor`, captured
 * loggers, clocks) are in `runtime/_test_helpers.ts`, re-exported here.
 *
 * @module
 */

import { serveOnPort0, waitFor } from "../runtime/_test_helpers.ts";

export {
  captureLogger,
  captureLogRecords,
  freePort,
  makeTempDir,
  ManualClock,
  offsetClock,
  serveOnPort0,
  type TempDir,
  type TestServer,
  waitFor,
} from "../runtime/_test_helpers.ts";

/** A fake Jetstream endpoint: a real WebSocket server whose events the test sends. */
export interface FakeJetstream extends AsyncDisposable {
  /** WebSocket URL of the `/subscribe` endpoint, e.g. `ws://127.0.0.1:1234/subscribe`. */
  readonly url: string;
  /** Query strings of every connection made so far (`wantedCollections`, `cursor`, ...). */
  readonly requests: URLSearchParams[];
  /** Number of currently open client sockets. */
  openCount(): number;
  /** Sends one event (serialised as JSON text unless already a string) to every open client. */
  send(event: unknown): void;
  /** Closes every open client socket (the server keeps accepting new ones). */
  dropClients(code?: number): void;
  /** Waits until at least `n` clients are connected. */
  waitForClients(n?: number): Promise<void>;
  close(): Promise<void>;
}

/** Starts a fake Jetstream server on port 0. */
export function startFakeJetstream(): FakeJetstream {
  const sockets = new Set<WebSocket>();
  const requests: URLSearchParams[] = [];
  const server = serveOnPort0((req) => {
    const url = new URL(req.url);
    if (url.pathname !== "/subscribe" || req.headers.get("upgrade") !== "websocket") {
      return new Response("not found", { status: 404 });
    }
    requests.push(url.searchParams);
    const { socket, response } = Deno.upgradeWebSocket(req);
    socket.onopen = () => sockets.add(socket);
    socket.onclose = () => sockets.delete(socket);
    socket.onerror = () => sockets.delete(socket);
    return response;
  });
  const closeAll = (code = 1000) => {
    for (const s of sockets) {
      try {
        s.close(code);
      } catch { /* already closing */ }
    }
  };
  const close = async () => {
    closeAll();
    await waitFor(() => sockets.size === 0, { timeoutMs: 2000 }).catch(() => {});
    await server.close();
  };
  return {
    url: `ws://127.0.0.1:${server.port}/subscribe`,
    requests,
    openCount: () => sockets.size,
    send(event) {
      const text = typeof event === "string" ? event : JSON.stringify(event);
      for (const s of sockets) if (s.readyState === WebSocket.OPEN) s.send(text);
    },
    dropClients: closeAll,
    waitForClients: (n = 1) =>
      waitFor(() => sockets.size >= n, { message: `${n} jetstream clients` }).then(() => {}),
    close,
    [Symbol.asyncDispose]: close,
  };
}

/** Absolute path of the repository root. */
export const REPO_ROOT = new URL("../", import.meta.url);

/** Environment passed through to subprocesses (the rest is cleared). */
export function baseEnv(): Record<string, string> {
  const env: Record<string, string> = { NO_COLOR: "1" };
  for (const name of ["PATH", "HOME", "DENO_DIR", "XDG_CACHE_HOME", "TMPDIR"]) {
    const value = Deno.env.get(name);
    if (value !== undefined) env[name] = value;
  }
  return env;
}

/**
 * The command line of the `deno.json` task `name`, whether the task is written as a string or as
 * `{command, dependencies}` (the tasks that build the web app first).
 */
export function taskCommand(tasks: Record<string, unknown>, name: string): string {
  const task = tasks[name];
  if (typeof task === "string") return task;
  const command = (task as { command?: unknown } | undefined)?.command;
  if (typeof command !== "string") throw new Error(`deno.json has no task ${name}`);
  return command;
}

/** The permissions of one set in `deno.json`'s `permissions` (`-P=<name>`). */
export type PermissionSet = Partial<
  Record<"read" | "write" | "net" | "env" | "sys" | "run" | "ffi" | "import", boolean | string[]>
>;

/**
 * The permission set the `deno.json` task `name` runs with: its `-P=<set>` word and the set's
 * grants from the config's `permissions`. Throws when the task names no set, or one the config
 * does not define.
 */
export function taskPermissionSet(
  config: { tasks: Record<string, unknown>; permissions?: Record<string, PermissionSet> },
  name: string,
): { flag: string; name: string; grants: PermissionSet } {
  const flags = taskCommand(config.tasks, name).split(" ").filter((w) => w.startsWith("-P="));
  if (flags.length !== 1) throw new Error(`task ${name} names ${flags.length} permission sets`);
  const set = flags[0].slice("-P=".length);
  const grants = config.permissions?.[set];
  if (grants === undefined) throw new Error(`deno.json has no permission set ${set}`);
  return { flag: flags[0], name: set, grants };
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
