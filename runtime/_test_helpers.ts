/**
 * The test helpers every component shares (docs/architecture.md 7): temporary directories, real
 * HTTP servers on port 0, free ports, waiting for a condition instead of sleeping, loggers whose
 * lines are kept, clocks the test moves, and what an SQLite file in WAL mode holds without its
 * WAL. Component helpers (`pds/_test_helpers.ts`, `appview/_test_helpers.ts`, `tests/_util.ts`)
 * import these rather than repeat them.
 *
 * @module
 */

import { DatabaseSync } from "node:sqlite";
import { createLogger, type Logger } from "../shared/log.ts";

/** A temporary directory removed on dispose. */
export interface TempDir extends AsyncDisposable {
  readonly path: string;
}

/** Creates a temporary directory; use with `await using dir = await makeTempDir()`. */
export async function makeTempDir(prefix = "social-test-"): Promise<TempDir> {
  const path = await Deno.makeTempDir({ prefix });
  return {
    path,
    async [Symbol.asyncDispose]() {
      await Deno.remove(path, { recursive: true }).catch(() => {});
    },
  };
}

/** A real HTTP server listening on 127.0.0.1 and an ephemeral port. */
export interface TestServer extends AsyncDisposable {
  readonly url: string;
  readonly port: number;
  close(): Promise<void>;
}

/** Serves `handler` on `127.0.0.1:0`; close it (or `await using` it) at the end of the test. */
export function serveOnPort0(handler: Deno.ServeHandler): TestServer {
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, handler);
  const port = server.addr.port;
  let closed: Promise<void> | null = null;
  const close = () => {
    closed ??= server.shutdown().then(() => server.finished);
    return closed;
  };
  return { url: `http://127.0.0.1:${port}`, port, close, [Symbol.asyncDispose]: close };
}

/** Ports {@link freePort} picks from: below Linux's ephemeral range (32768-60999 by default). */
const FREE_PORT_RANGE = { low: 20_000, high: 32_768 } as const;
const handedOut = new Set<number>();

/**
 * Returns a port that was free a moment ago on 127.0.0.1 (bound once, then released), never the
 * same one twice in a process. It is picked below the kernel's ephemeral range: a port the kernel
 * handed out (`port: 0`) could be taken again, before the server binds it, as the local port of
 * an outgoing connection, which the PostgreSQL tests open by the hundred (a CI run failed so:
 * `AddrInUse` on the index's port).
 */
export function freePort(): number {
  for (let attempt = 0; attempt < 1_000; attempt++) {
    const span = FREE_PORT_RANGE.high - FREE_PORT_RANGE.low;
    const port = FREE_PORT_RANGE.low + Math.floor(Math.random() * span);
    if (handedOut.has(port)) continue;
    try {
      Deno.listen({ hostname: "127.0.0.1", port }).close();
    } catch (e) {
      if (e instanceof Deno.errors.AddrInUse) continue;
      throw e;
    }
    handedOut.add(port);
    return port;
  }
  throw new Error(`No free port between ${FREE_PORT_RANGE.low} and ${FREE_PORT_RANGE.high}`);
}

/**
 * Waits until `check` returns a truthy value (polled every `intervalMs`), returning it.
 * Fails with `message` after `timeoutMs`.
 */
export async function waitFor<T>(
  check: () => T | Promise<T>,
  opts: { timeoutMs?: number; intervalMs?: number; message?: string } = {},
): Promise<NonNullable<T>> {
  const deadline = Date.now() + (opts.timeoutMs ?? 5000);
  for (;;) {
    const value = await check();
    if (value) return value as NonNullable<T>;
    if (Date.now() > deadline) {
      throw new Error(`Timed out waiting: ${opts.message ?? "condition not met"}`);
    }
    await new Promise((r) => setTimeout(r, opts.intervalMs ?? 10));
  }
}

/** A debug-level logger named `name` whose lines are kept, as written, for assertions. */
export function captureLogger(name = "test"): { log: Logger; lines: string[] } {
  const lines: string[] = [];
  return { log: createLogger(name, { sink: (l) => lines.push(l), level: "debug" }), lines };
}

/**
 * A debug-level logger named `name` whose lines are kept parsed, for assertions on their fields;
 * `sink` takes lines from a logger made elsewhere.
 */
export function captureLogRecords(
  name = "test",
): { log: Logger; lines: Record<string, unknown>[]; sink: (line: string) => void } {
  const lines: Record<string, unknown>[] = [];
  const sink = (line: string) => void lines.push(JSON.parse(line));
  return { log: createLogger(name, { level: "debug", sink }), lines, sink };
}

/** A clock that moves only when told to, in milliseconds since the epoch. */
export class ManualClock {
  constructor(public ms: number = Date.UTC(2026, 10, 27, 12)) {}
  readonly now = (): number => this.ms;
  advance(seconds: number): void {
    this.ms += seconds * 1000;
  }
}

/** A clock running with real time, `advance` moving it ahead: `now()` is real time plus the sum. */
export function offsetClock(): { now: () => number; advance(ms: number): void } {
  let offset = 0;
  return { now: () => Date.now() + offset, advance: (ms) => void (offset += ms) };
}

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

/** Absolute path of the repository root. */
export const REPO_ROOT = new URL("../", import.meta.url);

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
