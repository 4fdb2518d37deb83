/**
 * Entry point of the account host (`deno task pds`): reads the configuration, requires the JWT
 * secret, starts the server and closes it on SIGINT/SIGTERM.
 *
 * `PDS_JWT_SECRET` determines the published signing key, so `deno task pds` refuses to start
 * without it, naming the variable: a generated secret would fail open, silently, in production.
 * Only `deno task dev` (`scripts/dev.ts`) uses {@link loadOrCreateJwtSecret}: a random secret
 * generated once, stored in `$DATA_DIR/pds_jwt_secret` (mode 0600) and reused, with a warning.
 * Likewise `PDS_PLC_URL` must be set, to a PLC directory or to `off` ({@link requirePlcSetting}).
 *
 * @module
 */

import { createLogger, type Logger } from "../shared/log.ts";
import { ConfigError, loadPdsConfig, type PdsConfig, readPdsEnv } from "./config.ts";
import { startPds } from "./server.ts";

/** File name of the generated development secret inside `DATA_DIR`. */
export const GENERATED_SECRET_FILE = "pds_jwt_secret";

/**
 * `config.jwtSecret`, required outside development.
 *
 * @throws {ConfigError} naming `PDS_JWT_SECRET` when it is unset.
 */
export function requireJwtSecret(config: PdsConfig): string {
  if (config.jwtSecret) return config.jwtSecret;
  throw new ConfigError(
    "PDS_JWT_SECRET is not set: the account host needs a secret of at least 16 characters " +
      "(only deno task dev generates a development one)",
  );
}

/**
 * Outside development `PDS_PLC_URL` must be set: to a PLC directory, or to `off` for a host
 * whose DIDs are never published (docs/behaviour.md 10.4). Unset, accounts would get DIDs no one
 * else can resolve without the operator having chosen it.
 *
 * @throws {ConfigError} naming `PDS_PLC_URL` when it is unset.
 */
export function requirePlcSetting(config: PdsConfig): void {
  if (config.plcUrl !== null || config.plcOff) return;
  throw new ConfigError(
    "PDS_PLC_URL is not set: name the PLC directory new DIDs are published to " +
      "(https://plc.directory for the public network), or off to keep them unpublished " +
      "(only deno task dev runs without it)",
  );
}

/**
 * For `deno task dev` only: returns `config.jwtSecret`, or the secret stored in `DATA_DIR`
 * (generated and written on first use). Logs a warning whenever the generated secret is in use.
 */
export async function loadOrCreateJwtSecret(config: PdsConfig, log: Logger): Promise<string> {
  if (config.jwtSecret) return config.jwtSecret;
  const dir = config.dataDir.replace(/\/+$/, "") || ".";
  const path = `${dir}/${GENERATED_SECRET_FILE}`;
  let secret: string;
  try {
    secret = (await Deno.readTextFile(path)).trim();
  } catch (err) {
    if (!(err instanceof Deno.errors.NotFound)) throw err;
    const bytes = crypto.getRandomValues(new Uint8Array(32));
    secret = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
    await Deno.mkdir(dir, { recursive: true });
    await Deno.writeTextFile(path, secret + "\n", { mode: 0o600, createNew: true });
  }
  log.warn("PDS_JWT_SECRET is not set: using a generated development secret", { path });
  return secret;
}

async function main(): Promise<void> {
  const env = readPdsEnv();
  const config = loadPdsConfig(env);
  const log = createLogger("pds", { level: config.logLevel });
  const jwtSecret = requireJwtSecret(config);
  requirePlcSetting(config);
  // The listeners go in before startup, which logs "account host listening": a signal sent on
  // that line must find them, not Deno's default (exit 130 without closing the store).
  let pds: { close(): Promise<void> } | null = null;
  let signalled = false;
  let stopping = false;
  const stop = () => {
    if (pds === null) {
      signalled = true; // still starting: shut down as soon as it runs
      return;
    }
    if (stopping) return;
    stopping = true;
    log.info("shutting down");
    pds.close().then(() => Deno.exit(0));
  };
  Deno.addSignalListener("SIGINT", stop);
  Deno.addSignalListener("SIGTERM", stop);
  pds = await startPds({ env, jwtSecret, log });
  if (signalled) stop();
}

if (import.meta.main) {
  main().catch((err) => {
    console.error(err instanceof Error ? err.message : err);
    Deno.exit(1);
  });
}
