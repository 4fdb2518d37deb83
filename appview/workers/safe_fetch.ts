/**
 * Outbound HTTP for the index's workers, bounded in size, redirects and time, and refusing
 * private, loopback and link-local destinations unless the configuration allows them
 * (`APPVIEW_ALLOW_PRIVATE_FETCH`, for development and tests). The destinations come from data
 * the index received (a `did:web` names its host), so without the check a DID could make the
 * index probe the operator's network.
 *
 * How a destination is checked, before every hop (the first request and each redirect):
 * - only `http:` and `https:`; a redirect from `https:` to `http:` is refused;
 * - an IP literal host is classified directly (`ip_ranges.ts`);
 * - `localhost` and `*.localhost` count as loopback without asking DNS (RFC 6761);
 * - any other host name is resolved with `Deno.resolveDns` (A and AAAA, in parallel) and every
 *   address must be public; a name with no address is refused.
 *
 * Known gap (DNS rebinding): `fetch` resolves the name again when it connects, through the system
 * resolver, so a name whose DNS answers change between the two lookups (a TTL-0 record flipping
 * from a public to a private address), or one that `/etc/hosts` maps differently from DNS, can
 * still reach a private address. Closing it means connecting to the checked address with the
 * original `Host` header and TLS server name, which `fetch` cannot do for HTTPS; a deployment that
 * needs a hard guarantee should also block private ranges with an egress firewall for the index.
 *
 * @module
 */

import { readStreamLimited } from "../../shared/bytes.ts";
import { classifyAddress } from "./ip_ranges.ts";

/** Default bound on a response body (a DID document is well under 4 KiB). */
export const DEFAULT_MAX_BYTES = 64 * 1024;
/** Default time budget of one request, redirects, DNS and body included (spec part 8). */
export const DEFAULT_TIMEOUT_MS = 2_000;
/** Default number of redirects followed. */
export const DEFAULT_MAX_REDIRECTS = 3;

/** Resolves a host name to its IP addresses (A and AAAA). */
export type HostLookup = (hostname: string, signal: AbortSignal) => Promise<string[]>;

/** Why a {@link SafeFetchError} was raised. */
export type SafeFetchFailure =
  | "refused" // destination not allowed (private address, scheme, downgrade)
  | "timeout" // the time budget ran out
  | "aborted" // the caller's signal aborted
  | "too_large" // the body exceeds the size bound
  | "redirects" // too many redirects, or a redirect without a usable Location
  | "network"; // DNS or connection failure

/** The one error of {@link safeFetch}; `reason` classifies it, the message names the value. */
export class SafeFetchError extends Error {
  override readonly name = "SafeFetchError";
  constructor(readonly reason: SafeFetchFailure, message: string, options?: ErrorOptions) {
    super(message, options);
  }
}

/** Options of {@link safeFetch}. */
export interface SafeFetchOptions {
  method?: "GET" | "POST";
  headers?: Record<string, string>;
  /** Request body (for POST); dropped when a 303 (or a 301/302 after POST) turns it into GET. */
  body?: string;
  /** Lets the request reach private, loopback and link-local addresses. Default false. */
  allowPrivate?: boolean;
  /** Largest accepted body in bytes. Default {@link DEFAULT_MAX_BYTES}. */
  maxBytes?: number;
  /** Most redirects followed. Default {@link DEFAULT_MAX_REDIRECTS}. */
  maxRedirects?: number;
  /** Time budget of the whole call. Default {@link DEFAULT_TIMEOUT_MS}. */
  timeoutMs?: number;
  /** Caller's cancellation (for example a worker shutting down). */
  signal?: AbortSignal;
  /** Host name resolution, injectable for tests. Default: `Deno.resolveDns` A + AAAA. */
  lookup?: HostLookup;
}

/** A fully read response. */
export interface SafeResponse {
  readonly status: number;
  /** The final URL, after redirects. */
  readonly url: string;
  readonly headers: Headers;
  readonly body: Uint8Array;
}

const REDIRECTS: ReadonlySet<number> = new Set([301, 302, 303, 307, 308]);

/**
 * Fetches `url` within the bounds of `opts` and reads the whole body. Non-2xx statuses are
 * returned, not thrown; redirects are followed by hand, each hop re-checked.
 *
 * @throws {SafeFetchError} when the destination is refused, the time runs out, the body is too
 *   large, there are too many redirects, or the network fails.
 */
export async function safeFetch(url: string, opts: SafeFetchOptions = {}): Promise<SafeResponse> {
  const timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const timeout = AbortSignal.timeout(timeoutMs);
  const signal = opts.signal ? AbortSignal.any([opts.signal, timeout]) : timeout;
  const lookup = opts.lookup ?? resolveHost;
  const maxRedirects = opts.maxRedirects ?? DEFAULT_MAX_REDIRECTS;
  let method = opts.method ?? "GET";
  let body = opts.body;
  let current = parseTarget(url);
  try {
    for (let hop = 0;; hop++) {
      if (!opts.allowPrivate) await checkDestination(current, lookup, signal);
      const res = await fetch(current, {
        method,
        headers: opts.headers,
        body,
        redirect: "manual",
        signal,
      });
      if (!REDIRECTS.has(res.status)) {
        const bytes = await readBounded(res, opts.maxBytes ?? DEFAULT_MAX_BYTES, current.href);
        return { status: res.status, url: current.href, headers: res.headers, body: bytes };
      }
      await res.body?.cancel();
      if (hop >= maxRedirects) {
        throw new SafeFetchError("redirects", `Too many redirects from ${url}`);
      }
      const next = nextHop(current, res.headers.get("location"));
      if (res.status === 303 || (method === "POST" && res.status !== 307 && res.status !== 308)) {
        method = "GET";
        body = undefined;
      }
      current = next;
    }
  } catch (e) {
    throw asSafeFetchError(e, current.href, timeoutMs, opts.signal);
  }
}

/** {@link safeFetch}, then parses the body as JSON (`json` is undefined when it is not JSON). */
export async function safeFetchJson(
  url: string,
  opts: SafeFetchOptions = {},
): Promise<{ status: number; json: unknown }> {
  const res = await safeFetch(url, {
    ...opts,
    headers: { accept: "application/json", ...opts.headers },
  });
  let json: unknown = undefined;
  try {
    json = JSON.parse(new TextDecoder().decode(res.body));
  } catch { /* left undefined: the caller reports the status or the shape */ }
  return { status: res.status, json };
}

/**
 * Refuses a destination that is not public: the host is an IP literal in a non-public range,
 * `localhost`, or a name any of whose A/AAAA addresses is non-public.
 *
 * @throws {SafeFetchError} with reason `refused` (or `network` when the name does not resolve)
 */
export async function checkDestination(
  url: URL,
  lookup: HostLookup = resolveHost,
  signal?: AbortSignal,
): Promise<void> {
  const host = url.hostname.toLowerCase();
  const literal = classifyAddress(host);
  if (literal !== undefined) {
    if (literal !== null) refuse(url, host, literal);
    return;
  }
  if (host === "localhost" || host.endsWith(".localhost")) refuse(url, host, "loopback");
  let addresses: string[];
  try {
    addresses = await lookup(host, signal ?? new AbortController().signal);
  } catch (e) {
    if (e instanceof SafeFetchError) throw e;
    throw new SafeFetchError("network", `Could not resolve ${host}: ${messageOf(e)}`, {
      cause: e,
    });
  }
  if (addresses.length === 0) {
    throw new SafeFetchError("network", `Host has no addresses: ${host}`);
  }
  for (const address of addresses) {
    const kind = classifyAddress(address);
    if (kind === undefined) {
      throw new SafeFetchError("refused", `Host ${host} resolved to a non-IP value: ${address}`);
    }
    if (kind !== null) refuse(url, `${host} (${address})`, kind);
  }
}

/** Default {@link HostLookup}: A and AAAA through `Deno.resolveDns`, missing record types ignored. */
export async function resolveHost(hostname: string, signal: AbortSignal): Promise<string[]> {
  const [a, aaaa] = await Promise.allSettled([
    Deno.resolveDns(hostname, "A", { signal }),
    Deno.resolveDns(hostname, "AAAA", { signal }),
  ]);
  if (a.status === "rejected" && aaaa.status === "rejected") {
    // Both failed: report the A failure unless it was only "no such record".
    const reason = a.reason instanceof Deno.errors.NotFound ? aaaa.reason : a.reason;
    if (reason instanceof Deno.errors.NotFound) return [];
    throw reason;
  }
  return [
    ...(a.status === "fulfilled" ? a.value : []),
    ...(aaaa.status === "fulfilled" ? aaaa.value : []),
  ];
}

function parseTarget(url: string): URL {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new SafeFetchError("refused", `Not a valid URL: ${url}`);
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") {
    throw new SafeFetchError("refused", `Scheme not allowed: ${url}`);
  }
  if (parsed.username !== "" || parsed.password !== "") {
    throw new SafeFetchError("refused", `Credentials in URL not allowed: ${parsed.host}`);
  }
  return parsed;
}

function nextHop(from: URL, location: string | null): URL {
  if (location === null || location === "") {
    throw new SafeFetchError("redirects", `Redirect without a Location from ${from.href}`);
  }
  let next: URL;
  try {
    next = new URL(location, from);
  } catch {
    throw new SafeFetchError("redirects", `Redirect to an invalid Location: ${location}`);
  }
  const target = parseTarget(next.href);
  if (from.protocol === "https:" && target.protocol === "http:") {
    throw new SafeFetchError("refused", `Redirect from https to http refused: ${target.href}`);
  }
  return target;
}

async function readBounded(res: Response, maxBytes: number, url: string): Promise<Uint8Array> {
  const declared = Number(res.headers.get("content-length") ?? "NaN");
  if (declared > maxBytes) {
    await res.body?.cancel();
    throw new SafeFetchError(
      "too_large",
      `Response from ${url} is ${declared} bytes (max ${maxBytes})`,
    );
  }
  return readStreamLimited(
    res.body,
    maxBytes,
    () => new SafeFetchError("too_large", `Response from ${url} exceeds ${maxBytes} bytes`),
  );
}

function refuse(url: URL, what: string, kind: string): never {
  throw new SafeFetchError("refused", `Destination is a ${kind} address: ${what} in ${url.href}`);
}

function asSafeFetchError(
  e: unknown,
  url: string,
  timeoutMs: number,
  callerSignal: AbortSignal | undefined,
): SafeFetchError {
  if (e instanceof SafeFetchError) return e;
  if (callerSignal?.aborted) return new SafeFetchError("aborted", `Request aborted: ${url}`);
  const name = e instanceof Error || e instanceof DOMException ? e.name : "";
  if (name === "TimeoutError" || name === "AbortError") {
    return new SafeFetchError("timeout", `No answer within ${timeoutMs} ms: ${url}`);
  }
  return new SafeFetchError("network", `Request failed: ${url}: ${messageOf(e)}`, { cause: e });
}

function messageOf(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
