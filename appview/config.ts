/**
 * Configuration of the index (docs/behaviour.md 11, spec 5.3). The only module of the index that
 * reads the environment: raw values in, a validated, frozen config out. A bad value fails at
 * startup naming the variable.
 *
 * @module
 */

import { isLogLevel, type LogLevel, redactUrl } from "../shared/log.ts";
import { parseOrigins } from "../shared/origins.ts";

/** Validated configuration of the index. */
export interface AppviewConfig {
  readonly dataDir: string;
  readonly port: number;
  readonly hostname: string;
  /** Public address of the index, without a trailing slash. */
  readonly publicUrl: string;
  /** `did:web` service DID derived from {@link publicUrl} (spec 5.1). */
  readonly serviceDid: string;
  readonly dbPath: string;
  /**
   * `APPVIEW_DATABASE_URL`: the index on PostgreSQL (`postgres://` or `postgresql://`, options
   * such as `sslmode` in its query); null keeps it in the SQLite file {@link dbPath}. It may hold
   * a password: log it only through `redactUrl`.
   */
  readonly databaseUrl: string | null;
  /** `APPVIEW_DB_POOL_MAX`: connections of each process's PostgreSQL pool. */
  readonly dbPoolMax: number;
  /** `APPVIEW_DB_PATH` was set beside {@link databaseUrl}: ignored, with a warning at startup. */
  readonly dbPathIgnored: boolean;
  /** Base address of the account host as seen by the index: internal wins over public. */
  readonly pdsUrl: string;
  /** WebSocket URL of the account host's `subscribeRepos`. */
  readonly pdsStreamUrl: string;
  readonly authRequired: boolean;
  /** Allowed CORS origins; null when unset (every origin, with a warning). */
  readonly corsOrigins: readonly string[] | null;
  /** Shared secret of `POST /internal/ingest-commit`; null when unset (with a warning). */
  readonly ingestSecret: string | null;
  /** Jetstream `/subscribe` URL; null disables the public-stream consumer. */
  readonly jetstreamUrl: string | null;
  readonly plcUrl: string;
  /** Lets outbound fetches reach private, loopback and link-local addresses (dev and tests). */
  readonly allowPrivateFetch: boolean;
  /**
   * Silence (milliseconds) after which a stream consumer reconnects from its stored cursor:
   * neither stream sends heartbeats, so a half-open connection shows only as silence.
   */
  readonly streamIdleTimeoutMs: number;
  /**
   * `APPVIEW_HEALTH_STALL_SECONDS` in milliseconds: how long a configured stream consumer may go
   * without being `live` (connecting or in backoff) before `/healthz` answers 503; null (`0`)
   * turns that rule off.
   */
  readonly healthStallMs: number | null;
  readonly logLevel: LogLevel;
  /**
   * Folder of the built web app served at `/` (`APPVIEW_WEB_DIR`, default `web/dist` of this
   * checkout); null (`off`) serves the API alone.
   */
  readonly webDir: string | null;
  /**
   * The account host's address as a browser reaches it: `PDS_PUBLIC_URL` (never the internal
   * address, which may be a private network name).
   */
  readonly webPdsUrl: string;
  /**
   * Backfill from repositories (docs/behaviour.md 6.2 rules 8-11): the largest repository fetched
   * (`APPVIEW_BACKFILL_MAX_REPO_BYTES`), one fetch's time budget (`APPVIEW_BACKFILL_TIMEOUT_SECONDS`,
   * in ms here) and the repositories fetched at once (`APPVIEW_BACKFILL_CONCURRENCY`).
   */
  readonly backfill: { maxRepoBytes: number; timeoutMs: number; concurrency: number };
}

/** Raised for an invalid environment value; the message names the variable. */
export class ConfigError extends Error {
  override name = "ConfigError";
}

/** Default of `APPVIEW_STREAM_IDLE_TIMEOUT_SECONDS` (`IDLE_TIMEOUT_MS` of the consumers). */
export const STREAM_IDLE_TIMEOUT_SECONDS = 300;
/**
 * Default of `APPVIEW_HEALTH_STALL_SECONDS`: four times the longest reconnect backoff (30 s), so
 * an account host restart or a network blip never fails the health check, a lasting outage does.
 */
export const HEALTH_STALL_SECONDS = 120;
/** Default of `APPVIEW_DB_POOL_MAX` (`DEFAULT_POOL_MAX` of `db/pg/open.ts`). */
export const DB_POOL_MAX = 10;

type Env = Readonly<Record<string, string | undefined>>;

/** Every environment variable the index reads (the tasks' `--allow-env` list covers them). */
export const APPVIEW_ENV_VARS: readonly string[] = Object.freeze([
  "DATA_DIR",
  "LOG_LEVEL",
  "APPVIEW_PORT",
  "APPVIEW_HOSTNAME",
  "APPVIEW_PUBLIC_URL",
  "APPVIEW_DB_PATH",
  "APPVIEW_DATABASE_URL",
  "APPVIEW_DB_POOL_MAX",
  "PDS_PUBLIC_URL",
  "PDS_INTERNAL_URL",
  "APPVIEW_AUTH_REQUIRED",
  "APPVIEW_CORS_ORIGINS",
  "APPVIEW_INGEST_SECRET",
  "APPVIEW_JETSTREAM_URL",
  "APPVIEW_PLC_URL",
  "APPVIEW_ALLOW_PRIVATE_FETCH",
  "APPVIEW_STREAM_IDLE_TIMEOUT_SECONDS",
  "APPVIEW_HEALTH_STALL_SECONDS",
  "APPVIEW_WEB_DIR",
  "APPVIEW_BACKFILL_MAX_REPO_BYTES",
  "APPVIEW_BACKFILL_TIMEOUT_SECONDS",
  "APPVIEW_BACKFILL_CONCURRENCY",
]);

/** Where `deno task web:build` writes the web app, in this checkout. */
export const DEFAULT_WEB_DIR: string = decodeURIComponent(
  new URL("../web/dist", import.meta.url).pathname,
);

/**
 * Reads the variables of {@link APPVIEW_ENV_VARS} one by one, so a `--allow-env=<list>`
 * permission suffices (`Deno.env.toObject()` needs unrestricted access); a variable the process
 * may not read is treated as unset.
 */
export function readAppviewEnv(): Record<string, string | undefined> {
  const env: Record<string, string | undefined> = {};
  for (const name of APPVIEW_ENV_VARS) {
    try {
      env[name] = Deno.env.get(name);
    } catch {
      // Not granted: treated as unset.
    }
  }
  return env;
}

/** Reads and validates the index configuration from `env` (e.g. {@link readAppviewEnv}). */
export function loadAppviewConfig(env: Env): AppviewConfig {
  const dataDir = nonEmpty(env, "DATA_DIR") ?? "./data";
  const publicUrl = parseUrl(env, "APPVIEW_PUBLIC_URL", "http://localhost:3000");
  const pdsPublic = parseUrl(env, "PDS_PUBLIC_URL", "http://localhost:2583");
  const pdsInternal = nonEmpty(env, "PDS_INTERNAL_URL") === undefined
    ? null
    : parseUrl(env, "PDS_INTERNAL_URL", "");
  const pdsUrl = pdsInternal ?? pdsPublic;
  const jetstream = nonEmpty(env, "APPVIEW_JETSTREAM_URL");
  const cors = nonEmpty(env, "APPVIEW_CORS_ORIGINS");
  const logLevel = nonEmpty(env, "LOG_LEVEL") ?? "info";
  if (!isLogLevel(logLevel)) {
    throw new ConfigError(`LOG_LEVEL must be debug, info, warn or error, got ${logLevel}`);
  }
  const databaseUrl = parseDatabaseUrl(env);
  return Object.freeze({
    dataDir,
    port: parsePort(env, "APPVIEW_PORT", 3000),
    hostname: nonEmpty(env, "APPVIEW_HOSTNAME") ?? "127.0.0.1",
    publicUrl,
    serviceDid: serviceDidFromUrl(publicUrl),
    dbPath: nonEmpty(env, "APPVIEW_DB_PATH") ?? `${dataDir}/appview.sqlite`,
    databaseUrl,
    dbPoolMax: parseCount(env, "APPVIEW_DB_POOL_MAX", DB_POOL_MAX, { min: 1, max: 1000 }),
    dbPathIgnored: databaseUrl !== null && nonEmpty(env, "APPVIEW_DB_PATH") !== undefined,
    pdsUrl,
    pdsStreamUrl: `${pdsUrl.replace(/^http/, "ws")}/xrpc/com.atproto.sync.subscribeRepos`,
    authRequired: parseBool(env, "APPVIEW_AUTH_REQUIRED", true),
    corsOrigins: cors === undefined
      ? null
      : parseOrigins("APPVIEW_CORS_ORIGINS", cors, { error: (m) => new ConfigError(m) }),
    ingestSecret: nonEmpty(env, "APPVIEW_INGEST_SECRET") ?? null,
    jetstreamUrl: jetstream === undefined ? null : parseWsUrl("APPVIEW_JETSTREAM_URL", jetstream),
    plcUrl: parseUrl(env, "APPVIEW_PLC_URL", "https://plc.directory"),
    allowPrivateFetch: parseBool(env, "APPVIEW_ALLOW_PRIVATE_FETCH", false),
    streamIdleTimeoutMs: 1000 *
      parseSeconds(env, "APPVIEW_STREAM_IDLE_TIMEOUT_SECONDS", STREAM_IDLE_TIMEOUT_SECONDS, {
        min: 1,
        max: 86_400,
      }),
    healthStallMs: parseHealthStall(env),
    logLevel,
    webDir: parseWebDir(env),
    webPdsUrl: pdsPublic,
    backfill: Object.freeze({
      maxRepoBytes: parseCount(env, "APPVIEW_BACKFILL_MAX_REPO_BYTES", 64 * 1024 * 1024, {
        min: 1024,
        max: 2 ** 31 - 1,
      }),
      timeoutMs: 1000 *
        parseSeconds(env, "APPVIEW_BACKFILL_TIMEOUT_SECONDS", 60, { min: 1, max: 3600 }),
      concurrency: parseCount(env, "APPVIEW_BACKFILL_CONCURRENCY", 2, { min: 1, max: 16 }),
    }),
  });
}

/** The `sslmode` values of libpq that the index understands (`db/pg/tls.ts`). */
export const SSL_MODES: readonly string[] = Object.freeze([
  "disable",
  "allow",
  "prefer",
  "require",
  "verify-ca",
  "verify-full",
]);

/**
 * `APPVIEW_DATABASE_URL`: a `postgres://` or `postgresql://` URL, or null when unset. Messages show
 * the value redacted (user, password and options other than the shown ones).
 */
function parseDatabaseUrl(env: Env): string | null {
  const name = "APPVIEW_DATABASE_URL";
  const raw = nonEmpty(env, name);
  if (raw === undefined) return null;
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ConfigError(
      `${name} must be a postgres:// or postgresql:// URL, got ${redactUrl(raw)}`,
    );
  }
  if (url.protocol !== "postgres:" && url.protocol !== "postgresql:") {
    throw new ConfigError(
      `${name} must be a postgres:// or postgresql:// URL, got ${redactUrl(raw)}`,
    );
  }
  const mode = url.searchParams.get("sslmode");
  if (mode !== null && !SSL_MODES.includes(mode)) {
    throw new ConfigError(`${name}: sslmode must be one of ${SSL_MODES.join(", ")}, got ${mode}`);
  }
  return raw;
}

function parseHealthStall(env: Env): number | null {
  const seconds = parseSeconds(env, "APPVIEW_HEALTH_STALL_SECONDS", HEALTH_STALL_SECONDS, {
    min: 0,
    max: 86_400,
  });
  return seconds === 0 ? null : seconds * 1000;
}

function parseWebDir(env: Env): string | null {
  const raw = nonEmpty(env, "APPVIEW_WEB_DIR");
  if (raw === undefined) return DEFAULT_WEB_DIR;
  return raw.toLowerCase() === "off" ? null : raw;
}

/**
 * The `did:web` service DID of a public URL (spec 5.1): host, and the port with its colon
 * encoded as `%3A` when the URL names one.
 */
export function serviceDidFromUrl(url: string): string {
  const u = new URL(url);
  return u.port === "" ? `did:web:${u.hostname}` : `did:web:${u.hostname}%3A${u.port}`;
}

function nonEmpty(env: Env, name: string): string | undefined {
  const value = env[name]?.trim();
  return value === undefined || value === "" ? undefined : value;
}

function parseUrl(env: Env, name: string, fallback: string): string {
  const raw = nonEmpty(env, name) ?? fallback;
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ConfigError(`${name} must be an http(s) URL, got ${raw}`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new ConfigError(`${name} must be an http(s) URL, got ${redactUrl(raw)}`);
  }
  return raw.replace(/\/+$/, "");
}

function parseWsUrl(name: string, raw: string): string {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ConfigError(`${name} must be a ws(s) URL, got ${raw}`);
  }
  if (url.protocol !== "ws:" && url.protocol !== "wss:") {
    throw new ConfigError(`${name} must be a ws(s) URL, got ${redactUrl(raw)}`);
  }
  // A WebSocket URL cannot carry one: every connection attempt would throw.
  if (url.hash !== "" || raw.includes("#")) {
    throw new ConfigError(`${name} must not have a #fragment, got ${redactUrl(raw)}`);
  }
  return raw;
}

function parsePort(env: Env, name: string, fallback: number): number {
  const raw = nonEmpty(env, name);
  if (raw === undefined) return fallback;
  const port = Number(raw);
  if (!/^\d+$/.test(raw) || port > 65535) {
    throw new ConfigError(`${name} must be a port number from 0 to 65535, got ${raw}`);
  }
  return port;
}

function parseSeconds(
  env: Env,
  name: string,
  fallback: number,
  range: { min: number; max: number },
): number {
  return parseWhole(env, name, fallback, range, " of seconds");
}

function parseCount(
  env: Env,
  name: string,
  fallback: number,
  range: { min: number; max: number },
): number {
  return parseWhole(env, name, fallback, range, "");
}

/** A whole number in `range` ("a whole number`unit` from min to max" when not). */
function parseWhole(
  env: Env,
  name: string,
  fallback: number,
  range: { min: number; max: number },
  unit: string,
): number {
  const raw = nonEmpty(env, name);
  if (raw === undefined) return fallback;
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || n < range.min || n > range.max) {
    throw new ConfigError(
      `${name} must be a whole number${unit} from ${range.min} to ${range.max}, got ${raw}`,
    );
  }
  return n;
}

function parseBool(env: Env, name: string, fallback: boolean): boolean {
  const raw = nonEmpty(env, name)?.toLowerCase();
  if (raw === undefined) return fallback;
  if (raw === "true" || raw === "1" || raw === "yes") return true;
  if (raw === "false" || raw === "0" || raw === "no") return false;
  throw new ConfigError(`${name} must be true or false, got ${env[name]}`);
}
