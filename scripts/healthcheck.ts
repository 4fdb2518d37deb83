/**
 * Container health check (the Dockerfile's `HEALTHCHECK`; the image has no curl): asks the
 * servers this container runs, on their own addresses, and exits 0 when each answers 200, else 1
 * saying which did not.
 *
 * ```
 * deno run --no-config --allow-net --allow-env=PDS_HOSTNAME,PDS_PORT,APPVIEW_HOSTNAME,APPVIEW_PORT \
 *   --allow-read=/proc/1/cmdline scripts/healthcheck.ts [pds|appview|dev]
 * ```
 *
 * Which servers: the argument, else the task process 1 runs (`deno task <name>`, the image's
 * entry point), else both. `pds` asks `/xrpc/_health`, `appview` asks `/healthz` (503 when a
 * stream consumer failed or stalled), `dev` both. The consumer and handle-sync tasks serve no
 * HTTP: nothing to ask here (a failed consumer shows in the index's `/healthz`).
 *
 * No imports, so it starts fast and needs no module cache.
 *
 * @module
 */

/** How long one server may take to answer. */
export const HEALTH_TIMEOUT_MS = 5_000;

const PATHS = { pds: "/xrpc/_health", appview: "/healthz" } as const;
const SERVERS: Readonly<Record<string, readonly (keyof typeof PATHS)[]>> = {
  pds: ["pds"],
  appview: ["appview"],
  dev: ["pds", "appview"],
  "consumer:local": [],
  "consumer:public": [],
  "handle-sync": [],
};

/** The task name in a `/proc/<pid>/cmdline` (NUL-separated) of `deno task <name>`; else null. */
export function taskFromCmdline(cmdline: string): string | null {
  const args = cmdline.split("\0");
  const at = args.indexOf("task");
  return at >= 0 && at + 1 < args.length && args[at + 1] !== "" ? args[at + 1] : null;
}

/** The health URLs of `component` (a task name) under `env`; null for an unknown component. */
export function healthUrls(
  component: string,
  env: Record<string, string | undefined>,
): string[] | null {
  const servers = Object.hasOwn(SERVERS, component) ? SERVERS[component] : undefined;
  if (servers === undefined) return null;
  return servers.map((server) => {
    const prefix = server === "pds" ? "PDS" : "APPVIEW";
    const host = loopbackFor(env[`${prefix}_HOSTNAME`]?.trim() || "127.0.0.1");
    const port = env[`${prefix}_PORT`]?.trim() || (server === "pds" ? "2583" : "3000");
    return `http://${host}:${port}${PATHS[server]}`;
  });
}

/** A wildcard listen address is reached on loopback; an IPv6 literal goes in brackets. */
function loopbackFor(hostname: string): string {
  if (hostname === "0.0.0.0") return "127.0.0.1";
  if (hostname === "::" || hostname === "[::]") return "[::1]";
  return hostname.includes(":") && !hostname.startsWith("[") ? `[${hostname}]` : hostname;
}

/** Asks every URL; returns one line per failure (empty when all answered 200). */
export async function checkHealth(urls: readonly string[]): Promise<string[]> {
  const failures = await Promise.all(urls.map(async (url) => {
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(HEALTH_TIMEOUT_MS) });
      await res.body?.cancel();
      return res.status === 200 ? null : `${url} answered ${res.status}`;
    } catch (err) {
      return `${url} did not answer: ${err instanceof Error ? err.message : String(err)}`;
    }
  }));
  return failures.filter((f) => f !== null);
}

function readInitTask(): string | null {
  try {
    return taskFromCmdline(Deno.readTextFileSync("/proc/1/cmdline"));
  } catch {
    return null;
  }
}

if (import.meta.main) {
  const component = Deno.args[0] ?? readInitTask() ?? "dev";
  const env: Record<string, string | undefined> = {};
  for (const name of ["PDS_HOSTNAME", "PDS_PORT", "APPVIEW_HOSTNAME", "APPVIEW_PORT"]) {
    env[name] = Deno.env.get(name);
  }
  const urls = healthUrls(component, env);
  if (urls === null) {
    console.error(`healthcheck: unknown component ${JSON.stringify(component)}`);
    Deno.exit(1);
  }
  const failures = await checkHealth(urls);
  for (const line of failures) console.error(`healthcheck: ${line}`);
  Deno.exit(failures.length === 0 ? 0 : 1);
}
