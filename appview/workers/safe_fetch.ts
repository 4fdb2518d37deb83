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
 * The connection goes to the checked addresses, never to a second lookup's (DNS rebinding: a
 * name whose TTL-0 answers flip from a public to a private address between the check and the
 * connect, or one that `/etc/hosts` maps differently). Requests therefore go through
 * `node:http`/`node:https` with a `lookup` pinned to those addresses, where `fetch` would resolve
 * the name again; TLS still verifies the certificate against the URL's host name.
 *
 * @module
 */

import http from "node:http";
import https from "node:https";
import { Buffer } from "node:buffer";
import { Readable } from "node:stream";
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
  /**
   * Host name resolution. Default: `Deno.resolveDns` A + AAAA. Injected (in tests), its answer
   * is where the request connects, with or without {@link allowPrivate}.
   */
  lookup?: HostLookup;
  /** Certificates trusted for HTTPS in place of the default roots (a private CA, tests). */
  caCerts?: string[];
}

/** A fully read response. */
export interface SafeResponse {
  readonly status: number;
  /** The final URL, after redirects. */
  readonly url: string;
  readonly headers: Headers;
  readonly body: Uint8Array;
}

/** The `user-agent` of the index's outbound requests. */
export const USER_AGENT = "social-index (handle sync)";

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
      const addresses = opts.allowPrivate
        ? (opts.lookup === undefined ? null : await resolveAddresses(current, lookup, signal))
        : await checkDestination(current, lookup, signal);
      const res = await send(current, { method, headers: opts.headers, body }, {
        addresses,
        signal,
        caCerts: opts.caCerts,
      });
      if (!REDIRECTS.has(res.statusCode ?? 0)) {
        const bytes = await readBounded(res, opts.maxBytes ?? DEFAULT_MAX_BYTES, current.href);
        return { status: res.statusCode!, url: current.href, headers: headersOf(res), body: bytes };
      }
      res.destroy();
      if (hop >= maxRedirects) {
        throw new SafeFetchError("redirects", `Too many redirects from ${url}`);
      }
      const location = res.headers.location;
      const next = nextHop(current, location === undefined ? null : location);
      const status = res.statusCode;
      if (status === 303 || (method === "POST" && status !== 307 && status !== 308)) {
        method = "GET";
        body = undefined;
      }
      current = next;
    }
  } catch (e) {
    throw asSafeFetchError(e, current.href, timeoutMs, opts.signal, timeout);
  }
}

/**
 * One request, without following redirects; resolves with the response head (the body unread).
 * With `addresses`, the connection goes to one of them whatever the host name resolves to now.
 */
function send(
  url: URL,
  init: { method: string; headers?: Record<string, string>; body?: string },
  via: { addresses: readonly string[] | null; signal: AbortSignal; caCerts?: string[] },
): Promise<http.IncomingMessage> {
  const body = init.body === undefined ? undefined : Buffer.from(init.body);
  // What `fetch` sent by default, which some hosts' firewalls require; no `accept-encoding`: the
  // body is read as sent.
  const headers: Record<string, string> = {
    "user-agent": USER_AGENT,
    accept: "*/*",
    ...init.headers,
  };
  if (body !== undefined) headers["content-length"] = String(body.byteLength);
  const options: https.RequestOptions = {
    method: init.method,
    headers,
    agent: false, // no pooled connection to some other address
    signal: via.signal,
  };
  if (via.addresses !== null) options.lookup = pinnedLookup(via.addresses);
  if (via.caCerts !== undefined) options.ca = via.caCerts;
  return new Promise((resolve, reject) => {
    via.signal.throwIfAborted();
    const req = (url.protocol === "https:" ? https : http).request(url, options, resolve);
    req.on("error", reject);
    req.end(body);
  });
}

/** A `net` lookup function answering with `addresses` only (already checked). */
function pinnedLookup(addresses: readonly string[]): NonNullable<http.RequestOptions["lookup"]> {
  const entries = addresses.map((address) => ({ address, family: address.includes(":") ? 6 : 4 }));
  // deno-lint-ignore no-explicit-any
  return ((_hostname: string, options: any, callback?: any) => {
    const done = typeof options === "function" ? options : callback;
    if (typeof options === "object" && options?.all) done(null, entries);
    else done(null, entries[0].address, entries[0].family);
  }) as NonNullable<http.RequestOptions["lookup"]>;
}

function headersOf(res: http.IncomingMessage): Headers {
  const headers = new Headers();
  const raw = res.rawHeaders;
  for (let i = 0; i + 1 < raw.length; i += 2) headers.append(raw[i], raw[i + 1]);
  return headers;
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
 * `localhost`, or a name any of whose A/AAAA addresses is non-public. Returns the checked
 * addresses of a name (to connect to), null for an IP literal.
 *
 * @throws {SafeFetchError} with reason `refused` (or `network` when the name does not resolve)
 */
export async function checkDestination(
  url: URL,
  lookup: HostLookup = resolveHost,
  signal?: AbortSignal,
): Promise<string[] | null> {
  const host = url.hostname.toLowerCase();
  const literal = classifyAddress(host);
  if (literal !== undefined) {
    if (literal !== null) refuse(url, host, literal);
    return null;
  }
  if (host === "localhost" || host.endsWith(".localhost")) refuse(url, host, "loopback");
  const addresses = await resolveAddresses(url, lookup, signal);
  for (const address of addresses!) {
    const kind = classifyAddress(address);
    if (kind !== null) refuse(url, `${host} (${address})`, kind!);
  }
  return addresses;
}

/**
 * The addresses of `url`'s host through `lookup` (null for an IP literal), each an IP address.
 *
 * @throws {SafeFetchError} `network` when the name does not resolve or has no address, `refused`
 *   when an answer is not an IP address
 */
async function resolveAddresses(
  url: URL,
  lookup: HostLookup,
  signal?: AbortSignal,
): Promise<string[] | null> {
  const host = url.hostname.toLowerCase();
  if (classifyAddress(host) !== undefined) return null;
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
    if (classifyAddress(address) === undefined) {
      throw new SafeFetchError("refused", `Host ${host} resolved to a non-IP value: ${address}`);
    }
  }
  return addresses;
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

function readBounded(
  res: http.IncomingMessage,
  maxBytes: number,
  url: string,
): Promise<Uint8Array> {
  const declared = Number(res.headers["content-length"] ?? "NaN");
  if (declared > maxBytes) {
    res.destroy();
    throw new SafeFetchError(
      "too_large",
      `Response from ${url} is ${declared} bytes (max ${maxBytes})`,
    );
  }
  return readStreamLimited(
    Readable.toWeb(res) as ReadableStream<Uint8Array>,
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
  timeout: AbortSignal,
): SafeFetchError {
  if (e instanceof SafeFetchError) return e;
  if (callerSignal?.aborted) return new SafeFetchError("aborted", `Request aborted: ${url}`);
  // An abort while the body streams surfaces as a reset connection, not as an AbortError.
  if (timeout.aborted) {
    return new SafeFetchError("timeout", `No answer within ${timeoutMs} ms: ${url}`);
  }
  const name = e instanceof Error || e instanceof DOMException ? e.name : "";
  if (name === "TimeoutError" || name === "AbortError") {
    return new SafeFetchError("timeout", `No answer within ${timeoutMs} ms: ${url}`);
  }
  return new SafeFetchError("network", `Request failed: ${url}: ${messageOf(e)}`, { cause: e });
}

function messageOf(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
