/**
 * Opening the account host's KV store from a command line (`invite`, `compact`). A store file
 * that does not exist is refused, not created: a wrong or missing `DATA_DIR` would otherwise give
 * a new empty store, and `invite create` would print codes the server never sees. Also the
 * `import.meta.main` part both commands share ({@link runCliMain}).
 *
 * @module
 */

import type { PdsConfig } from "../pds/config.ts";
import { readPdsEnv } from "../pds/config.ts";
import { openPdsKv } from "../pds/server.ts";

/** The configured store file does not exist; the message says where it was looked for. */
export class StoreMissingError extends Error {
  override readonly name = "StoreMissingError";
}

/**
 * Opens the store of `config`. A file path that does not exist throws {@link StoreMissingError}
 * naming the path and the variable it came from, unless `create` is set. KV Connect URLs and
 * `:memory:` are opened as they are.
 */
export async function openExistingPdsKv(
  config: PdsConfig,
  opts: { env: Record<string, string | undefined>; create?: boolean; hint: string },
): Promise<Deno.Kv> {
  const path = config.kvPath;
  const isFile = !/^https?:\/\//.test(path) && path !== ":memory:";
  if (isFile && !opts.create && !(await exists(path))) {
    const from = opts.env.PDS_KV_PATH?.trim() ? "PDS_KV_PATH" : "DATA_DIR";
    throw new StoreMissingError(
      `no account host store at ${absolute(path)} (from ${from}); ${opts.hint}`,
    );
  }
  return await openPdsKv(config);
}

/**
 * {@link openExistingPdsKv} for a command named `name`: a missing store is written to `io.err`
 * (`<name>: <message>`) and gives null, for the command to exit 1.
 */
export async function openStoreForCli(
  name: string,
  io: CliIo,
  config: PdsConfig,
  opts: { env: Record<string, string | undefined>; create?: boolean; hint: string },
): Promise<Deno.Kv | null> {
  try {
    return await openExistingPdsKv(config, opts);
  } catch (e) {
    if (!(e instanceof StoreMissingError)) throw e;
    io.err(`${name}: ${e.message}`);
    return null;
  }
}

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.stat(path);
    return true;
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return false;
    throw err;
  }
}

function absolute(path: string): string {
  return path.startsWith("/") ? path : `${Deno.cwd()}/${path.replace(/^(\.\/)+/, "")}`;
}

/** A command line's arguments are wrong; `usage` is the text to show (the command's own, or all). */
export class CliUsageError extends Error {
  override readonly name = "CliUsageError";
  constructor(message: string, readonly usage?: string) {
    super(message);
  }
}

/**
 * Parses a command line with `parse`; a {@link CliUsageError} (or `parseArgs`'s `TypeError`) is
 * written to `io.err` as `<name>: <message>` and the usage (the error's, else `usage`), and
 * gives null, for the command to exit 2.
 */
export function parseCliArgs<C>(name: string, io: CliIo, usage: string, parse: () => C): C | null {
  try {
    return parse();
  } catch (e) {
    if (!(e instanceof CliUsageError) && !(e instanceof TypeError)) throw e;
    io.err(`${name}: ${e.message}`);
    io.err(e instanceof CliUsageError ? e.usage ?? usage : usage);
    return null;
  }
}

/** Where a command line writes its output, one line at a time. */
export interface CliIo {
  out: (line: string) => void;
  err: (line: string) => void;
}

/**
 * Runs a command line (`runInviteCli`, `runCompactCli`) on the process's arguments and account
 * host environment, printing to the console, and exits with its code; a throw is printed as
 * `<name>: <message>` and exits 1.
 */
export async function runCliMain(
  name: string,
  run: (args: string[], env: Record<string, string | undefined>, io: CliIo) => Promise<number>,
): Promise<never> {
  const code = await run(Deno.args, readPdsEnv(), {
    out: (line) => console.log(line),
    err: (line) => console.error(line),
  }).catch((e) => {
    console.error(`${name}: ${e instanceof Error ? e.message : String(e)}`);
    return 1;
  });
  Deno.exit(code);
}
