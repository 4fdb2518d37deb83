/**
 * `deno task dev`: the whole system in one process on embedded defaults: the account host, the
 * index with its HTTP API, both stream consumers (the public one only when
 * `APPVIEW_JETSTREAM_URL` is set) and handle sync. Zero configuration: development secrets are
 * generated once into `DATA_DIR` and reused, with warnings. Ctrl-C (SIGINT) or SIGTERM shuts
 * everything down cleanly.
 */

import { loadAppviewConfig, readAppviewEnv } from "../appview/config.ts";
import { startAppview } from "../appview/server.ts";
import { loadPdsConfig, type RawEnv, readPdsEnv } from "../pds/config.ts";
import { loadOrCreateJwtSecret } from "../pds/main.ts";
import { startPds } from "../pds/server.ts";
import { createLogger, isLogLevel, type Logger } from "../shared/log.ts";

/** File name of the generated development ingest secret inside `DATA_DIR`. */
const INGEST_SECRET_FILE = "ingest_secret";

/** Reads or creates a development secret file (mode 0600) inside `dataDir`. */
async function loadOrCreateDevSecret(dataDir: string, file: string): Promise<string> {
  const path = `${dataDir.replace(/\/+$/, "") || "."}/${file}`;
  try {
    return (await Deno.readTextFile(path)).trim();
  } catch (err) {
    if (!(err instanceof Deno.errors.NotFound)) throw err;
  }
  const bytes = crypto.getRandomValues(new Uint8Array(32));
  const secret = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  await Deno.mkdir(dataDir, { recursive: true });
  await Deno.writeTextFile(path, secret + "\n", { mode: 0o600, createNew: true });
  return secret;
}

function isUnset(value: string | undefined): boolean {
  return value === undefined || value.trim() === "";
}

/**
 * The index's public URL, when the operator left it unset: `http://localhost:<APPVIEW_PORT>`,
 * so that changing only the port moves the push target and the token audience with it (both
 * halves read the same value). With port 0 the index's address is unknown before it binds, so
 * the push is turned off (unless APPVIEW_INTERNAL_URL names a target) rather than sent, with
 * the ingest secret, to whatever listens on the default port; the local stream still delivers
 * every commit. Call it after the configuration was validated.
 */
function deriveAppviewUrl(pdsEnv: RawEnv, appviewEnv: RawEnv, log: Logger): void {
  if (!isUnset(appviewEnv.APPVIEW_PUBLIC_URL)) return;
  const port = appviewEnv.APPVIEW_PORT?.trim() || "3000";
  if (port !== "0") {
    pdsEnv.APPVIEW_PUBLIC_URL = appviewEnv.APPVIEW_PUBLIC_URL = `http://localhost:${port}`;
  } else if (isUnset(pdsEnv.APPVIEW_INTERNAL_URL)) {
    pdsEnv.APPVIEW_INTERNAL_URL = "off";
    log.warn("APPVIEW_PORT is 0: push to the index is off; the local stream delivers commits");
  }
}

/** Starts every component; returns a function that stops them all. */
export async function startDev(log: Logger): Promise<() => Promise<void>> {
  const pdsEnv = readPdsEnv();
  const appviewEnv = readAppviewEnv();
  const dataDir = pdsEnv.DATA_DIR?.trim() || "./data";

  const ingestSecret = pdsEnv.APPVIEW_INGEST_SECRET?.trim() ||
    await loadOrCreateDevSecret(dataDir, INGEST_SECRET_FILE);
  if (!pdsEnv.APPVIEW_INGEST_SECRET?.trim()) {
    log.warn("APPVIEW_INGEST_SECRET is not set: using a generated development secret", {
      path: `${dataDir}/${INGEST_SECRET_FILE}`,
    });
  }
  pdsEnv.APPVIEW_INGEST_SECRET = ingestSecret;
  appviewEnv.APPVIEW_INGEST_SECRET = ingestSecret;

  // A bad variable stops dev before anything starts, naming the variable the operator set: the
  // index's are checked before anything is derived from them (the account host's derived ones
  // come from a checked APPVIEW_PORT).
  loadAppviewConfig(appviewEnv);
  deriveAppviewUrl(pdsEnv, appviewEnv, log);
  const pdsConfig = loadPdsConfig(pdsEnv);
  const jwtSecret = await loadOrCreateJwtSecret(pdsConfig, log.child("pds"));
  const pds = await startPds({ env: pdsEnv, jwtSecret, log: log.child("pds") });
  let appview;
  let appviewConfig;
  try {
    // With no account host URL configured, the index reaches it where it actually listens.
    if (isUnset(appviewEnv.PDS_INTERNAL_URL) && isUnset(appviewEnv.PDS_PUBLIC_URL)) {
      appviewEnv.PDS_INTERNAL_URL = pds.url;
    }
    appviewConfig = loadAppviewConfig(appviewEnv);
    appview = await startAppview({ config: appviewConfig, log: log.child("appview") });
  } catch (err) {
    await pds.close();
    throw err;
  }
  log.info("dev is running", { pds: pds.url, appview: appview.url, dataDir });
  // The one line a newcomer needs: where the web app is (the index serves it).
  // With APPVIEW_PORT=0 (and no public URL) only the bound address is known.
  const openUrl = isUnset(appviewEnv.APPVIEW_PUBLIC_URL) ? appview.url : appviewConfig.publicUrl;
  console.log(`\n  Open ${openUrl} and sign up.\n`);
  return async () => {
    await appview.close();
    await pds.close();
  };
}

if (import.meta.main) {
  const level = Deno.env.get("LOG_LEVEL") ?? "info";
  const log = createLogger("dev", { level: isLogLevel(level) ? level : "info" });
  // The listeners go in before startup, which logs "dev is running": a signal sent on that line
  // (as scripts and tests do) must find them, not Deno's default (exit 130 without closing).
  let stop: (() => Promise<void>) | null = null;
  let signalled = false;
  let stopping = false;
  const shutdown = () => {
    if (stop === null) {
      signalled = true; // still starting: shut down as soon as it runs
      return;
    }
    if (stopping) return;
    stopping = true;
    log.info("shutting down");
    stop().then(() => Deno.exit(0), (err) => {
      log.error("shutdown failed", { err });
      Deno.exit(1);
    });
  };
  Deno.addSignalListener("SIGINT", shutdown);
  Deno.addSignalListener("SIGTERM", shutdown);
  try {
    stop = await startDev(log);
    if (signalled) shutdown();
  } catch (err) {
    log.error("dev failed to start", { err });
    Deno.exit(1);
  }
}
