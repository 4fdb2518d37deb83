/**
 * One structured logger for every component: one JSON line per event, with a timestamp, level,
 * component and message, plus fields. Secrets never belong in fields; callers pass identifiers.
 *
 * The sink is injectable so tests can capture lines; the default writes to `console.error`
 * (standard error), keeping standard output free for command output.
 *
 * @module
 */

/** Severity of a log line, lowest first. */
export type LogLevel = "debug" | "info" | "warn" | "error";

const LEVEL_RANK: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

/** Extra structured fields of a log line. */
export type LogFields = Record<string, unknown>;

/** A structured logger bound to one component. */
export interface Logger {
  debug(msg: string, fields?: LogFields): void;
  info(msg: string, fields?: LogFields): void;
  warn(msg: string, fields?: LogFields): void;
  error(msg: string, fields?: LogFields): void;
  /** A logger for a sub-component, named `parent.child`. */
  child(component: string): Logger;
}

/** Options of {@link createLogger}. */
export interface LoggerOptions {
  /** Lines below this level are dropped. Default `info`. */
  level?: LogLevel;
  /** Receives each formatted line. Default: `console.error`. */
  sink?: (line: string) => void;
  /** Clock, for tests. */
  now?: () => Date;
}

/** Returns true when `value` names a log level. */
export function isLogLevel(value: string): value is LogLevel {
  return value in LEVEL_RANK;
}

/** Formats one log line as JSON; errors become `{name, message}` (no stack by default). */
export function formatLogLine(
  time: Date,
  level: LogLevel,
  component: string,
  msg: string,
  fields?: LogFields,
): string {
  const line: Record<string, unknown> = { time: time.toISOString(), level, component, msg };
  if (fields) {
    for (const [key, value] of Object.entries(fields)) {
      line[key] = value instanceof Error ? { name: value.name, message: value.message } : value;
    }
  }
  try {
    return JSON.stringify(line);
  } catch {
    return JSON.stringify({ time: line.time, level, component, msg, fields: "unserialisable" });
  }
}

/**
 * Creates a logger for `component`.
 *
 * @example
 * ```ts
 * const log = createLogger("pds", { level: "info" });
 * log.warn("PDS_INVITE_REQUIRED is false: anyone can create an account");
 * ```
 */
export function createLogger(component: string, opts: LoggerOptions = {}): Logger {
  const min = LEVEL_RANK[opts.level ?? "info"];
  const sink = opts.sink ?? ((line: string) => console.error(line));
  const now = opts.now ?? (() => new Date());
  const emit = (level: LogLevel) => (msg: string, fields?: LogFields) => {
    if (LEVEL_RANK[level] < min) return;
    sink(formatLogLine(now(), level, component, msg, fields));
  };
  return {
    debug: emit("debug"),
    info: emit("info"),
    warn: emit("warn"),
    error: emit("error"),
    child: (sub) => createLogger(`${component}.${sub}`, opts),
  };
}

/** A logger that drops everything (for benchmarks). */
export const silentLogger: Logger = createLogger("silent", { sink: () => {} });

/** Query parameters whose values say nothing secret and help an operator read a log line. */
const SHOWN_QUERY_PARAMS: ReadonlySet<string> = new Set([
  "cursor",
  "wantedCollections",
  "wantedDids",
  "compress",
]);

/**
 * `url` fit for a log line or a status page: the user name and password become `redacted`, and
 * so does the value of every query parameter but a few harmless ones (`cursor`,
 * `wantedCollections`, ...), since operators put API keys there. Unparseable input is not
 * echoed at all.
 *
 * @example
 * ```ts
 * redactUrl("wss://op:pw@js.example/subscribe?apiKey=k&cursor=5");
 * // "wss://redacted:redacted@js.example/subscribe?apiKey=redacted&cursor=5"
 * ```
 */
export function redactUrl(url: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return "(unparseable URL)";
  }
  if (parsed.username !== "") parsed.username = "redacted";
  if (parsed.password !== "") parsed.password = "redacted";
  for (const name of new Set(parsed.searchParams.keys())) {
    if (!SHOWN_QUERY_PARAMS.has(name)) parsed.searchParams.set(name, "redacted");
  }
  return parsed.href;
}
