/**
 * Account host configuration (docs/behaviour.md 11). The only module of `pds/` that sees the
 * environment: raw variables in, a validated, frozen {@link PdsConfig} out. A bad value fails
 * with a {@link ConfigError} naming the variable.
 *
 * @module
 */

import { isLogLevel, type LogLevel } from "../shared/log.ts";
import { parseOrigins } from "../shared/origins.ts";

/** Validated account host configuration. */
export interface PdsConfig {
  /** `DATA_DIR`: home of the KV file (and the generated dev secret). */
  readonly dataDir: string;
  /** `PDS_HOSTNAME`: listen address. */
  readonly hostname: string;
  /** `PDS_PORT`: listen port (0 picks a free one). */
  readonly port: number;
  /** `PDS_PUBLIC_URL` without a trailing slash: the account host's own origin. */
  readonly publicUrl: string;
  /** The account host's `did:web` (token `iss`, did.json `id`), derived from `publicUrl`. */
  readonly serviceDid: string;
  /** `PDS_JWT_SECRET`; null when unset (`main.ts` then generates and persists one). */
  readonly jwtSecret: string | null;
  /** `PDS_INVITE_REQUIRED` (default false). */
  readonly inviteRequired: boolean;
  /** `PDS_HANDLE_DOMAINS`: accepted handle suffixes, each starting with a dot, lower-case. */
  readonly handleDomains: readonly string[];
  /** `PDS_KV_PATH`: a file path or a KV Connect URL (default `$DATA_DIR/pds.kv`). */
  readonly kvPath: string;
  /** `APPVIEW_PUBLIC_URL` without a trailing slash. */
  readonly appviewPublicUrl: string;
  /** The index's service DID `did:web:<host>%3A<port>`: the `aud` of access tokens (spec 5.1). */
  readonly appviewServiceDid: string;
  /** `APPVIEW_INTERNAL_URL` (default: the public URL); null when set to `off` (push disabled). */
  readonly appviewInternalUrl: string | null;
  /** `APPVIEW_INGEST_SECRET`; null when unset. */
  readonly ingestSecret: string | null;
  /** `PDS_EVENT_RETENTION_DAYS`: how long stored stream events are kept (default 30). */
  readonly eventRetentionDays: number;
  /**
   * `PDS_STREAM_MAX_BUFFERED_BYTES`: unsent bytes one subscribeRepos socket may hold before the
   * host waits for the consumer (65536).
   */
  readonly streamMaxBufferedBytes: number;
  /**
   * `PDS_STREAM_STALL_TIMEOUT_SECONDS`: a subscribeRepos connection whose socket accepts no byte
   * for this long while it has bytes to send is closed (60).
   */
  readonly streamStallTimeoutSeconds: number;
  /**
   * `PDS_STREAM_RESERVED_CONNECTIONS`: subscribeRepos connections beyond the public cap kept for
   * subscribers presenting `APPVIEW_INGEST_SECRET` (4).
   */
  readonly streamReservedConnections: number;
  /**
   * `PDS_TRUST_PROXY` (default false): the client address is the last `X-Forwarded-For` entry
   * (the one a reverse proxy in front appends), not the connection's peer.
   */
  readonly trustProxy: boolean;
  /**
   * `PDS_CORS_ORIGINS`: the web origins browsers may call the account host from, in the form
   * they send in `Origin`; null when unset (every origin, with a startup warning).
   */
  readonly corsOrigins: readonly string[] | null;
  /** `PDS_SIGNUPS_PER_HOUR`: createAccount calls allowed per client address an hour (100). */
  readonly signupsPerHour: number;
  /** `PDS_LOGINS_PER_HOUR`: createSession calls allowed per client address an hour (300). */
  readonly loginsPerHour: number;
  /** `PDS_REPORTS_PER_HOUR`: createReport calls allowed per reporting account an hour (10). */
  readonly reportsPerHour: number;
  /** `PDS_PASSWORD_HASH_CONCURRENCY`: password hashes computed at once (2). */
  readonly passwordHashConcurrency: number;
  /** `PDS_PASSWORD_HASH_QUEUE`: password hashes waiting for a place; more get 503 (32). */
  readonly passwordHashQueue: number;
  /**
   * `PDS_PLC_URL` without a trailing slash: the PLC directory new DIDs and their updates are
   * submitted to (docs/behaviour.md 10.4); null when unset or `off` (DIDs minted locally only).
   */
  readonly plcUrl: string | null;
  /** True when `PDS_PLC_URL` is `off`: the operator chose a host whose DIDs are not published. */
  readonly plcOff: boolean;
  /** `PDS_CRAWLERS`: relays asked to crawl this host (`com.atproto.sync.requestCrawl`); origins. */
  readonly crawlers: readonly string[];
  /** `LOG_LEVEL` (default `info`). */
  readonly logLevel: LogLevel;
}

/** A configuration value is missing or malformed; the message names the variable. */
export class ConfigError extends Error {
  override readonly name = "ConfigError";
}

/** Raw environment, e.g. `Deno.env.toObject()`. */
export type RawEnv = Record<string, string | undefined>;

/** Every environment variable the account host reads. */
export const PDS_ENV_VARS: readonly string[] = Object.freeze([
  "DATA_DIR",
  "LOG_LEVEL",
  "PDS_PORT",
  "PDS_HOSTNAME",
  "PDS_PUBLIC_URL",
  "PDS_JWT_SECRET",
  "PDS_INVITE_REQUIRED",
  "PDS_HANDLE_DOMAINS",
  "PDS_KV_PATH",
  "PDS_EVENT_RETENTION_DAYS",
  "PDS_STREAM_MAX_BUFFERED_BYTES",
  "PDS_STREAM_STALL_TIMEOUT_SECONDS",
  "PDS_STREAM_RESERVED_CONNECTIONS",
  "PDS_TRUST_PROXY",
  "PDS_CORS_ORIGINS",
  "PDS_SIGNUPS_PER_HOUR",
  "PDS_LOGINS_PER_HOUR",
  "PDS_REPORTS_PER_HOUR",
  "PDS_PASSWORD_HASH_CONCURRENCY",
  "PDS_PASSWORD_HASH_QUEUE",
  "PDS_PLC_URL",
  "PDS_CRAWLERS",
  "APPVIEW_PUBLIC_URL",
  "APPVIEW_INTERNAL_URL",
  "APPVIEW_INGEST_SECRET",
]);

/**
 * Reads the account host's variables from the process environment one by one, so that a
 * `--allow-env=<list>` permission suffices (`Deno.env.toObject()` needs unrestricted access).
 */
export function readPdsEnv(): RawEnv {
  const env: RawEnv = {};
  for (const name of PDS_ENV_VARS) env[name] = Deno.env.get(name);
  return env;
}

const DEFAULTS = {
  DATA_DIR: "./data",
  PDS_PORT: "2583",
  PDS_HOSTNAME: "127.0.0.1",
  PDS_PUBLIC_URL: "http://localhost:2583",
  PDS_HANDLE_DOMAINS: ".test",
  APPVIEW_PUBLIC_URL: "http://localhost:3000",
  PDS_STREAM_MAX_BUFFERED_BYTES: "65536",
  PDS_STREAM_STALL_TIMEOUT_SECONDS: "60",
  PDS_STREAM_RESERVED_CONNECTIONS: "4",
  PDS_EVENT_RETENTION_DAYS: "30",
  PDS_SIGNUPS_PER_HOUR: "100",
  PDS_LOGINS_PER_HOUR: "300",
  PDS_REPORTS_PER_HOUR: "10",
  PDS_PASSWORD_HASH_CONCURRENCY: "2",
  PDS_PASSWORD_HASH_QUEUE: "32",
} as const;

const HANDLE_DOMAIN_RE = /^(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)+$/;

/** Reads and validates the account host configuration from a raw environment. */
export function loadPdsConfig(env: RawEnv): PdsConfig {
  const get = (name: string): string | undefined => {
    const value = env[name]?.trim();
    return value === undefined || value === "" ? undefined : value;
  };
  /** An integer variable within [min, max], its default from {@link DEFAULTS}. */
  const intVar = (name: keyof typeof DEFAULTS, min: number, max: number): number =>
    parseIntIn(name, get(name) ?? DEFAULTS[name], min, max);
  const dataDir = get("DATA_DIR") ?? DEFAULTS.DATA_DIR;
  const publicUrl = parseUrl("PDS_PUBLIC_URL", get("PDS_PUBLIC_URL") ?? DEFAULTS.PDS_PUBLIC_URL);
  const appviewPublicUrl = parseUrl(
    "APPVIEW_PUBLIC_URL",
    get("APPVIEW_PUBLIC_URL") ?? DEFAULTS.APPVIEW_PUBLIC_URL,
  );
  const internal = get("APPVIEW_INTERNAL_URL");
  const jwtSecret = get("PDS_JWT_SECRET") ?? null;
  if (jwtSecret !== null && jwtSecret.length < 16) {
    throw new ConfigError("PDS_JWT_SECRET must be at least 16 characters long");
  }
  const logLevel = get("LOG_LEVEL") ?? "info";
  if (!isLogLevel(logLevel)) {
    throw new ConfigError(`LOG_LEVEL must be debug, info, warn or error, got ${q(logLevel)}`);
  }
  const cors = get("PDS_CORS_ORIGINS");
  const plc = get("PDS_PLC_URL");
  return Object.freeze({
    dataDir,
    hostname: get("PDS_HOSTNAME") ?? DEFAULTS.PDS_HOSTNAME,
    port: intVar("PDS_PORT", 0, 65535),
    publicUrl: publicUrl.origin,
    serviceDid: didWebFromUrl(publicUrl),
    jwtSecret,
    inviteRequired: parseBool("PDS_INVITE_REQUIRED", get("PDS_INVITE_REQUIRED") ?? "false"),
    trustProxy: parseBool("PDS_TRUST_PROXY", get("PDS_TRUST_PROXY") ?? "false"),
    corsOrigins: cors === undefined
      ? null
      : parseOrigins("PDS_CORS_ORIGINS", cors, { error: (m) => new ConfigError(m) }),
    handleDomains: Object.freeze(
      parseHandleDomains(get("PDS_HANDLE_DOMAINS") ?? DEFAULTS.PDS_HANDLE_DOMAINS),
    ),
    kvPath: get("PDS_KV_PATH") ?? joinPath(dataDir, "pds.kv"),
    appviewPublicUrl: appviewPublicUrl.origin,
    appviewServiceDid: didWebFromUrl(appviewPublicUrl),
    appviewInternalUrl: internal === "off"
      ? null
      : internal === undefined
      ? appviewPublicUrl.origin
      : parseUrl("APPVIEW_INTERNAL_URL", internal).origin,
    ingestSecret: get("APPVIEW_INGEST_SECRET") ?? null,
    streamMaxBufferedBytes: intVar("PDS_STREAM_MAX_BUFFERED_BYTES", 1024, 64 * 1024 * 1024),
    streamStallTimeoutSeconds: intVar("PDS_STREAM_STALL_TIMEOUT_SECONDS", 1, 86_400),
    streamReservedConnections: intVar("PDS_STREAM_RESERVED_CONNECTIONS", 0, 100),
    eventRetentionDays: intVar("PDS_EVENT_RETENTION_DAYS", 1, 3650),
    signupsPerHour: intVar("PDS_SIGNUPS_PER_HOUR", 1, 1_000_000),
    loginsPerHour: intVar("PDS_LOGINS_PER_HOUR", 1, 1_000_000),
    reportsPerHour: intVar("PDS_REPORTS_PER_HOUR", 1, 1_000_000),
    passwordHashConcurrency: intVar("PDS_PASSWORD_HASH_CONCURRENCY", 1, 64),
    passwordHashQueue: intVar("PDS_PASSWORD_HASH_QUEUE", 0, 10_000),
    plcUrl: plc === undefined || plc === "off" ? null : parseBaseUrl("PDS_PLC_URL", plc),
    plcOff: plc === "off",
    crawlers: Object.freeze(parseCrawlers(get("PDS_CRAWLERS"))),
    logLevel,
  });
}

/**
 * The `did:web` of an origin: `did:web:<host>` plus `%3A<port>` when the URL carries a port
 * (spec 5.1; docs/protocol.md 14).
 */
export function didWebFromUrl(url: URL): string {
  return url.port === "" ? `did:web:${url.hostname}` : `did:web:${url.hostname}%3A${url.port}`;
}

function parseUrl(name: string, value: string): URL {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new ConfigError(`${name} must be an absolute URL, got ${q(value)}`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new ConfigError(`${name} must use http or https, got ${q(value)}`);
  }
  if ((url.pathname !== "/" && url.pathname !== "") || url.search || url.hash) {
    throw new ConfigError(`${name} must be an origin without a path, got ${q(value)}`);
  }
  return url;
}

/** An http(s) URL that may carry a path (a PLC directory's), without a trailing slash. */
function parseBaseUrl(name: string, value: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new ConfigError(`${name} must be an absolute URL or off, got ${q(value)}`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new ConfigError(`${name} must use http or https, got ${q(value)}`);
  }
  if (url.search || url.hash || url.username || url.password) {
    throw new ConfigError(`${name} must be a URL without query, fragment or credentials`);
  }
  return (url.origin + url.pathname).replace(/\/+$/, "");
}

/** Most relays `PDS_CRAWLERS` may name. */
export const MAX_CRAWLERS = 16;

function parseCrawlers(value: string | undefined): string[] {
  if (value === undefined) return [];
  const urls = value.split(",").map((u) => u.trim()).filter((u) => u !== "");
  if (urls.length > MAX_CRAWLERS) {
    throw new ConfigError(`PDS_CRAWLERS names ${urls.length} relays, at most ${MAX_CRAWLERS}`);
  }
  return [...new Set(urls.map((u) => parseUrl("PDS_CRAWLERS", u).origin))];
}

function parseIntIn(name: string, value: string, min: number, max: number): number {
  if (!/^\d+$/.test(value)) throw new ConfigError(`${name} must be an integer, got ${q(value)}`);
  const n = Number(value);
  if (n < min || n > max) {
    throw new ConfigError(`${name} must be between ${min} and ${max}, got ${q(value)}`);
  }
  return n;
}

function parseBool(name: string, value: string): boolean {
  const v = value.toLowerCase();
  if (v === "true" || v === "1" || v === "yes") return true;
  if (v === "false" || v === "0" || v === "no") return false;
  throw new ConfigError(`${name} must be true or false, got ${q(value)}`);
}

function parseHandleDomains(value: string): string[] {
  const domains = value.split(",").map((d) => d.trim().toLowerCase()).filter((d) => d !== "");
  if (domains.length === 0) throw new ConfigError("PDS_HANDLE_DOMAINS must list a domain");
  return domains.map((d) => {
    const domain = d.startsWith(".") ? d : `.${d}`;
    if (!HANDLE_DOMAIN_RE.test(domain)) {
      throw new ConfigError(`PDS_HANDLE_DOMAINS has an invalid domain ${q(d)}`);
    }
    return domain;
  });
}

function joinPath(dir: string, file: string): string {
  return dir.endsWith("/") ? dir + file : `${dir}/${file}`;
}

function q(value: string): string {
  return JSON.stringify(value);
}
