/**
 * A throwaway PostgreSQL cluster for tests (issue 40): `initdb` into a temporary directory (UTF-8,
 * C collation, C.UTF-8 character classes), then `pg_ctl start` with trust authentication, a unix
 * socket in that directory and a free port on 127.0.0.1, and durability off (`fsync`,
 * `synchronous_commit`, `full_page_writes`): the data dies with the test.
 * {@link PostgresCluster.stop} (or `await using`) stops the server and removes the directory.
 *
 * The binaries come from `PG_BINDIR` when set, else the directory of an `initdb` on `PATH`, else
 * the newest `/usr/lib/postgresql/<version>/bin` (Debian's layout, which keeps them off `PATH`).
 * When there are none, {@link locatePostgres} and {@link startPostgres} answer null and tests
 * skip, printing {@link POSTGRES_SKIP_MESSAGE}; with `CI=true` they do not skip (so a CI machine
 * without PostgreSQL fails rather than passing half a suite), as the browser tests.
 *
 * `initdb` and `postgres` refuse to run as root: as root the cluster is made and run by the
 * `postgres` user (Debian's package creates it) through `runuser`, and its directory is handed
 * to that user. A cluster a test forgot to stop is stopped at exit; one whose process died
 * without exiting (an uncaught error, a signal) is stopped by the next {@link startPostgres},
 * which finds its directory beside the new one with an `owner` process that is gone.
 *
 * @module
 */

import { freePort } from "./_test_helpers.ts";

/** What a test prints when it skips for want of PostgreSQL. */
export const POSTGRES_SKIP_MESSAGE =
  "PostgreSQL tests skipped: no PostgreSQL binaries (initdb, pg_ctl, postgres) found; install " +
  "them with `apt-get install -y postgresql` (Debian), or set PG_BINDIR to their directory";

/** The PostgreSQL binaries of this machine and the user that runs them. */
export interface PostgresInstall {
  /** Directory holding `initdb`, `pg_ctl`, `postgres` and `createdb`. */
  readonly bindir: string;
  /** `pg_ctl --version`, e.g. `pg_ctl (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)`. */
  readonly version: string;
  /** The user the cluster runs as when this process is root (else null: this process's user). */
  readonly runAs: { name: string; uid: number; gid: number; runuser: string } | null;
}

/** A running throwaway cluster. */
export interface PostgresCluster extends AsyncDisposable {
  /** `postgres://postgres@127.0.0.1:<port>/postgres` (TCP, no password). */
  readonly url: string;
  /** Directory of the unix socket (`.s.PGSQL.<port>`), also the cluster's temporary directory. */
  readonly socketDir: string;
  readonly port: number;
  /**
   * Character classes of the cluster's databases (`lc_ctype`): `C.UTF-8`, so full-text search
   * and `lower()` know non-ASCII letters, or `C` on a system without that locale. Their collation
   * is always `C`: text sorts by bytes, as in SQLite (cursors rely on it).
   */
  readonly ctype: string;
  readonly install: PostgresInstall;
  /**
   * Creates the database `name` (from `template0`, so UTF-8 with the cluster's collation and
   * {@link ctype}) and returns its URL, so each test can have an empty database of its own.
   */
  createDatabase(name: string): Promise<string>;
  /** Stops the server (immediately: the data is thrown away) and removes its directory. */
  stop(): Promise<void>;
}

/** Options of {@link startPostgres}. */
export interface StartPostgresOptions {
  /** The install to use (default: {@link locatePostgres}). */
  install?: PostgresInstall;
  /** Extra server settings (`-c name=value`), after the defaults (so they can override them). */
  settings?: Readonly<Record<string, string>>;
}

/** Server settings of every throwaway cluster: durability off, the log in `server.log`. */
export const TEST_SETTINGS: Readonly<Record<string, string>> = Object.freeze({
  fsync: "off",
  synchronous_commit: "off",
  full_page_writes: "off",
  logging_collector: "off",
  max_connections: "100",
});

const BINARIES = ["initdb", "pg_ctl", "postgres", "createdb"] as const;
const DIR_PREFIX = "social-pg-";
const UTF8_CTYPE = "C.UTF-8";
/** File of a cluster's directory holding the process id of the process that started it. */
const OWNER_FILE = "owner";
const START_TIMEOUT_S = 30;
const PORT_ATTEMPTS = 3;
const USER = "postgres";

/**
 * Finds the PostgreSQL binaries (module comment); null when this machine has none. With
 * `CI=true` a missing install throws instead (CI installs it: `.ci/run`).
 *
 * @throws Error when running as root without a `postgres` user or `runuser` to run the cluster
 */
export async function locatePostgres(): Promise<PostgresInstall | null> {
  const bindir = await findBindir();
  if (bindir === null) {
    if (Deno.env.get("CI") === "true") throw new Error(`CI=true: ${POSTGRES_SKIP_MESSAGE}`);
    return null;
  }
  const version = (await run([`${bindir}/pg_ctl`, "--version"])).trim();
  let runAs: PostgresInstall["runAs"] = null;
  if ((await run(["id", "-u"])).trim() === "0") {
    const uid = await run(["id", "-u", USER]).catch(() => null);
    const runuser = await onPath("runuser") ??
      (await isExecutable("/usr/sbin/runuser") ? "/usr/sbin/runuser" : null);
    if (uid === null || runuser === null) {
      throw new Error(
        `Running as root, PostgreSQL needs a "${USER}" user and runuser to run as: ` +
          `create the user (Debian's postgresql package does) or run the tests as another user`,
      );
    }
    runAs = { name: USER, uid: Number(uid), gid: Number(await run(["id", "-g", USER])), runuser };
  }
  return { bindir, version, runAs };
}

/**
 * Starts a throwaway cluster (module comment); null when PostgreSQL is not installed (see
 * {@link locatePostgres}). Stop it with {@link PostgresCluster.stop} or `await using`.
 *
 * @throws Error naming the server's log when it does not start
 */
export async function startPostgres(
  opts: StartPostgresOptions = {},
): Promise<PostgresCluster | null> {
  const install = opts.install ?? await locatePostgres();
  if (install === null) return null;
  const dir = await Deno.makeTempDir({ prefix: DIR_PREFIX });
  let started = false;
  try {
    await Deno.writeTextFile(`${dir}/${OWNER_FILE}`, String(Deno.pid));
    await reapOrphans(install, dir);
    if (install.runAs !== null) await Deno.chown(dir, install.runAs.uid, install.runAs.gid);
    const data = `${dir}/data`;
    const initdb = (ctype: string) =>
      runAs(install, [
        `${install.bindir}/initdb`,
        `--pgdata=${data}`,
        `--username=${USER}`,
        "--auth=trust",
        "--encoding=UTF8",
        "--locale=C",
        `--lc-ctype=${ctype}`,
        "--no-sync",
      ]);
    let ctype = UTF8_CTYPE;
    try {
      await initdb(ctype);
    } catch (e) {
      // A system without the C.UTF-8 locale: byte order still, ASCII-only letter classes.
      if (!/locale/i.test((e as Error).message)) throw e;
      await Deno.remove(data, { recursive: true }).catch(() => {});
      ctype = "C";
      await initdb(ctype);
    }
    const settings = { ...TEST_SETTINGS, ...opts.settings };
    for (let attempt = 1;; attempt++) {
      const port = freePort();
      const options = [
        `-p ${port}`,
        "-c listen_addresses=127.0.0.1",
        `-c unix_socket_directories=${dir}`,
        ...Object.entries(settings).map(([k, v]) => `-c ${k}=${v}`),
      ].join(" ");
      try {
        await runAs(install, [
          `${install.bindir}/pg_ctl`,
          "start",
          `--pgdata=${data}`,
          `--log=${dir}/server.log`,
          "--wait",
          `--timeout=${START_TIMEOUT_S}`,
          `--options=${options}`,
        ]);
      } catch (e) {
        const log = await Deno.readTextFile(`${dir}/server.log`).catch(() => "");
        // Another process took the port between freePort() and the bind: try another one.
        if (attempt < PORT_ATTEMPTS && /could not bind|address already in use/i.test(log)) {
          continue;
        }
        throw new Error(`PostgreSQL did not start: ${(e as Error).message}\n${tail(log)}`);
      }
      started = true;
      return clusterHandle(install, dir, port, ctype);
    }
  } catch (e) {
    if (!started) await Deno.remove(dir, { recursive: true }).catch(() => {});
    throw e;
  }
}

/** Clusters started by this process and not stopped yet (stopped at exit). */
const running = new Map<string, () => void>();
let exitHookInstalled = false;

function clusterHandle(
  install: PostgresInstall,
  dir: string,
  port: number,
  ctype: string,
): PostgresCluster {
  const data = `${dir}/data`;
  const stopArgs = [`${install.bindir}/pg_ctl`, "stop", `--pgdata=${data}`, "--mode=immediate"];
  running.set(dir, () => {
    // At exit only synchronous calls run.
    const [cmd, args] = commandOf(install, stopArgs);
    new Deno.Command(cmd, { args, stdout: "null", stderr: "null" }).outputSync();
    Deno.removeSync(dir, { recursive: true });
  });
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    globalThis.addEventListener("unload", () => {
      for (const stop of running.values()) {
        try {
          stop();
        } catch { /* exiting: nothing more to do */ }
      }
    });
  }
  let stopped: Promise<void> | null = null;
  const stop = () =>
    stopped ??= (async () => {
      running.delete(dir);
      try {
        // Gone already when another process reaped it as an orphan.
        if (await Deno.stat(data).then(() => true, () => false)) await runAs(install, stopArgs);
      } finally {
        await Deno.remove(dir, { recursive: true }).catch(() => {});
      }
    })();
  return {
    url: `postgres://${USER}@127.0.0.1:${port}/postgres`,
    socketDir: dir,
    port,
    ctype,
    install,
    async createDatabase(name: string): Promise<string> {
      if (!/^[a-z_][a-z0-9_]{0,62}$/.test(name)) {
        throw new RangeError(`Database name must be a lower-case SQL identifier: ${name}`);
      }
      await run([
        `${install.bindir}/createdb`,
        `--host=${dir}`,
        `--port=${port}`,
        `--username=${USER}`,
        "--template=template0",
        name,
      ]);
      return `postgres://${USER}@127.0.0.1:${port}/${name}`;
    },
    stop,
    [Symbol.asyncDispose]: stop,
  };
}

/**
 * Stops and removes the clusters beside `dir` whose owner process is gone (module comment).
 * Failures are left for the next start: a directory being created by another process has no
 * owner file yet, and a stop that fails leaves the directory in place.
 */
async function reapOrphans(install: PostgresInstall, dir: string): Promise<void> {
  const parent = dir.slice(0, dir.lastIndexOf("/"));
  for await (const entry of Deno.readDir(parent)) {
    if (!entry.isDirectory || !entry.name.startsWith(DIR_PREFIX)) continue;
    const other = `${parent}/${entry.name}`;
    if (other === dir) continue;
    const owner = await Deno.readTextFile(`${other}/${OWNER_FILE}`).catch(() => null);
    if (owner === null || !/^\d+$/.test(owner) || await isAlive(Number(owner))) continue;
    try {
      const pidFile = await Deno.stat(`${other}/data/postmaster.pid`).then(() => true, () => false);
      if (pidFile) {
        await runAs(install, [
          `${install.bindir}/pg_ctl`,
          "stop",
          `--pgdata=${other}/data`,
          "--mode=immediate",
        ]);
      }
      await Deno.remove(other, { recursive: true });
    } catch {
      // Left for the next start.
    }
  }
}

/** Whether the process `pid` exists, whoever owns it. */
async function isAlive(pid: number): Promise<boolean> {
  const out = await new Deno.Command("ps", {
    args: ["-p", String(pid)],
    stdout: "null",
    stderr: "null",
  }).output();
  return out.success;
}

async function findBindir(): Promise<string | null> {
  const fromEnv = Deno.env.get("PG_BINDIR");
  if (fromEnv !== undefined && fromEnv !== "") return await hasBinaries(fromEnv) ? fromEnv : null;
  const initdb = await onPath("initdb");
  if (initdb !== null) {
    // Debian links single binaries into PATH: use the directory the link points into.
    const dir = (await Deno.realPath(initdb)).replace(/\/[^/]+$/, "");
    if (await hasBinaries(dir)) return dir;
  }
  const root = "/usr/lib/postgresql";
  const versions: number[] = [];
  try {
    for await (const entry of Deno.readDir(root)) {
      if (/^\d+$/.test(entry.name)) versions.push(Number(entry.name));
    }
  } catch {
    return null;
  }
  for (const v of versions.sort((a, b) => b - a)) {
    if (await hasBinaries(`${root}/${v}/bin`)) return `${root}/${v}/bin`;
  }
  return null;
}

async function hasBinaries(dir: string): Promise<boolean> {
  for (const name of BINARIES) if (!await isExecutable(`${dir}/${name}`)) return false;
  return true;
}

async function onPath(name: string): Promise<string | null> {
  for (const dir of (Deno.env.get("PATH") ?? "").split(":")) {
    if (dir !== "" && await isExecutable(`${dir}/${name}`)) return `${dir}/${name}`;
  }
  return null;
}

async function isExecutable(path: string): Promise<boolean> {
  try {
    const info = await Deno.stat(path);
    return info.isFile && ((info.mode ?? 0o111) & 0o111) !== 0;
  } catch {
    return false;
  }
}

/** The command line that runs `argv` as the install's user. */
function commandOf(install: PostgresInstall, argv: readonly string[]): [string, string[]] {
  return install.runAs === null
    ? [argv[0], argv.slice(1)]
    : [install.runAs.runuser, ["-u", install.runAs.name, "--", ...argv]];
}

function runAs(install: PostgresInstall, argv: readonly string[]): Promise<string> {
  const [cmd, args] = commandOf(install, argv);
  return run([cmd, ...args]);
}

/** Runs `argv` (stdin closed) and returns its stdout; throws with its stderr when it fails. */
async function run(argv: readonly string[]): Promise<string> {
  const out = await new Deno.Command(argv[0], {
    args: argv.slice(1),
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = (bytes: Uint8Array) => new TextDecoder().decode(bytes);
  if (!out.success) {
    throw new Error(`${argv[0]} exited with ${out.code}: ${tail(text(out.stderr))}`);
  }
  return text(out.stdout);
}

function tail(text: string, lines = 20): string {
  return text.trimEnd().split("\n").slice(-lines).join("\n");
}
