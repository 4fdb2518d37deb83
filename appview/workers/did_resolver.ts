/**
 * DID to handle resolution for handle sync (spec 4.3 rule 1), by DID kind:
 *
 * - `did:plc`: the local account host is asked first through `resolveHandle` (POST with the DID
 *   in the `handle` member; the response `handle` is used). Any error answer (an unknown DID, a
 *   failure, a timeout) means "not hosted here", and the DID directory (`APPVIEW_PLC_URL`) is
 *   asked for `GET /<did>`: the first valid `at://<handle>` of the document's `alsoKnownAs`.
 * - `did:web`: `https://<host>/.well-known/did.json` (hostname-level DIDs only). A port is only
 *   accepted for `localhost` (`did:web:localhost%3A2583`), which is fetched over plain `http://`
 *   when private destinations are allowed (development and tests) and refused otherwise.
 *
 * Every request goes through {@link safeFetch}: 2 s, 64 KiB, 3 redirects. The account host is the
 * operator's own configured address (by default on loopback), so it is exempt from the
 * private-address check; the directory and `did:web` hosts are not.
 *
 * Handles are validated with `isValidHandle` and lower-cased; `handle.invalid` counts as none.
 *
 * A handle from a DID document (directory or `did:web`) is only the DID owner's claim, so it is
 * verified back, as atproto resolves handles: the DNS TXT record `_atproto.<handle>`
 * (exactly one `did=<did>` record) or, when DNS names none, `https://<handle>/.well-known/atproto-did`
 * must name the same DID. A handle that does not is a failed resolution (retried later; the
 * posts keep their placeholder). The local account host's answer is not verified back: it
 * assigned the handle.
 *
 * @module
 */

import { isValidDid, isValidHandle, normalizeHandle } from "../../shared/syntax.ts";
import {
  DEFAULT_MAX_BYTES,
  DEFAULT_TIMEOUT_MS,
  type HostLookup,
  safeFetch,
  SafeFetchError,
  safeFetchJson,
} from "./safe_fetch.ts";

/** XRPC path of `com.atproto.identity.resolveHandle` on the account host. */
export const RESOLVE_HANDLE_PATH = "/xrpc/com.atproto.identity.resolveHandle";
/** Path of a `did:web` DID document. */
export const DID_WEB_PATH = "/.well-known/did.json";
/** Path of a handle's DID on its own host (atproto handle resolution over HTTPS). */
export const HANDLE_DID_PATH = "/.well-known/atproto-did";
const INVALID_HANDLE = "handle.invalid";
/** Largest `atproto-did` body read (a DID is at most 2 KiB). */
const HANDLE_DID_MAX_BYTES = 2_048;

/** The TXT records of a DNS name, each as its strings; empty when it has none. */
export type TxtLookup = (name: string, signal: AbortSignal) => Promise<string[][]>;

/** A handle could not be resolved; the message names the DID and the reason. */
export class HandleResolutionError extends Error {
  override readonly name = "HandleResolutionError";
}

/** Resolves a DID to its handle (lower-case), or throws {@link HandleResolutionError}. */
export interface HandleResolver {
  resolve(did: string, signal?: AbortSignal): Promise<ResolvedHandle>;
}

/** A resolved handle and whether the local account host vouched for it. */
export interface ResolvedHandle {
  handle: string;
  /**
   * True when the local account host answered (it hosts the account): its word may move a
   * handle another DID holds. A DID document's `alsoKnownAs` is only the DID owner's claim.
   */
  authoritative: boolean;
}

/** Options of {@link DidResolver}. */
export interface DidResolverOptions {
  /** Base address of the local account host (`AppviewConfig.pdsUrl`). */
  pdsUrl: string;
  /** Base address of the DID directory (`AppviewConfig.plcUrl`). */
  plcUrl: string;
  /** `AppviewConfig.allowPrivateFetch`: lets the directory and `did:web` reach private hosts. */
  allowPrivate: boolean;
  /** Per-request time budget. Default 2 s (spec part 8). */
  timeoutMs?: number;
  /** Largest accepted response body. Default 64 KiB. */
  maxBytes?: number;
  /** Host name resolution for the address check; injectable for tests. */
  lookup?: HostLookup;
  /** TXT record lookup for handle verification. Default: `Deno.resolveDns` (TXT). */
  txtLookup?: TxtLookup;
  /**
   * Where a handle's `atproto-did` is read. Default `https://<handle>/.well-known/atproto-did`;
   * tests point it at a loopback server.
   */
  handleDidUrl?: (handle: string) => string;
}

/** Resolves DIDs to handles through the account host, the DID directory or `did:web`. */
export class DidResolver implements HandleResolver {
  readonly #pdsUrl: string;
  readonly #plcUrl: string;
  readonly #allowPrivate: boolean;
  readonly #timeoutMs: number;
  readonly #maxBytes: number;
  readonly #lookup: HostLookup | undefined;
  readonly #txtLookup: TxtLookup;
  readonly #handleDidUrl: (handle: string) => string;

  constructor(opts: DidResolverOptions) {
    this.#pdsUrl = opts.pdsUrl.replace(/\/+$/, "");
    this.#plcUrl = opts.plcUrl.replace(/\/+$/, "");
    this.#allowPrivate = opts.allowPrivate;
    this.#timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.#maxBytes = opts.maxBytes ?? DEFAULT_MAX_BYTES;
    this.#lookup = opts.lookup;
    this.#txtLookup = opts.txtLookup ?? resolveTxt;
    this.#handleDidUrl = opts.handleDidUrl ?? ((handle) => `https://${handle}${HANDLE_DID_PATH}`);
  }

  /**
   * Returns the lower-cased handle of `did`.
   *
   * @throws {HandleResolutionError} naming the DID and why (unsupported method, not found,
   *   refused destination, timeout, invalid document or handle)
   */
  async resolveHandle(did: string, signal?: AbortSignal): Promise<string> {
    return (await this.resolve(did, signal)).handle;
  }

  /** Resolves `did` to its handle, saying whether the local account host vouched for it. */
  async resolve(did: string, signal?: AbortSignal): Promise<ResolvedHandle> {
    if (!isValidDid(did)) fail(`Invalid DID: ${did}`);
    if (did.startsWith("did:plc:")) {
      let localError: string;
      try {
        return { handle: await this.#fromAccountHost(did, signal), authoritative: true };
      } catch (e) {
        if (signal?.aborted) throw e;
        localError = messageOf(e);
      }
      try {
        const handle = await this.#fromDirectory(did, signal);
        return { handle: await this.#verifiedBack(did, handle, signal), authoritative: false };
      } catch (e) {
        if (e instanceof HandleResolutionError) {
          fail(`${e.message} (account host: ${localError})`);
        }
        throw e;
      }
    }
    if (did.startsWith("did:web:")) {
      const handle = await this.#fromDidWeb(did, signal);
      return { handle: await this.#verifiedBack(did, handle, signal), authoritative: false };
    }
    fail(`Unsupported DID method: ${did}`);
  }

  /**
   * The DID that `handle` names (lower-cased handle): the DNS TXT record `_atproto.<handle>`
   * when it holds exactly one `did=` record, otherwise the `atproto-did` document of the
   * handle's host (first line, trimmed); null when neither names a valid DID.
   */
  async handleDid(handle: string, signal?: AbortSignal): Promise<string | null> {
    return await this.#didFromDns(handle, signal) ?? await this.#didFromHost(handle, signal);
  }

  /** `handle`, once it resolves back to `did`. */
  async #verifiedBack(did: string, handle: string, signal?: AbortSignal): Promise<string> {
    const back = await this.handleDid(handle, signal);
    if (back !== did) {
      fail(`Handle ${handle} of ${did} does not resolve back to it (it names ${back ?? "no DID"})`);
    }
    return handle;
  }

  async #didFromDns(handle: string, signal?: AbortSignal): Promise<string | null> {
    const timeout = AbortSignal.timeout(this.#timeoutMs);
    let records: string[][];
    try {
      records = await this.#txtLookup(
        `_atproto.${handle}`,
        signal ? AbortSignal.any([signal, timeout]) : timeout,
      );
    } catch (e) {
      if (signal?.aborted) throw e;
      return null; // no such name, no TXT record, or no answer in time: try HTTPS
    }
    // As the atproto reference resolver: exactly one `did=` record, taken as it is.
    const dids = records.map((r) => r.join("")).filter((v) => v.startsWith("did="));
    if (dids.length !== 1) return null;
    const found = dids[0].slice("did=".length);
    return isValidDid(found) ? found : null;
  }

  async #didFromHost(handle: string, signal?: AbortSignal): Promise<string | null> {
    try {
      const res = await safeFetch(this.#handleDidUrl(handle), {
        allowPrivate: this.#allowPrivate,
        timeoutMs: this.#timeoutMs,
        maxBytes: HANDLE_DID_MAX_BYTES,
        signal,
        lookup: this.#lookup,
      });
      if (res.status !== 200) return null;
      const found = new TextDecoder().decode(res.body).split("\n", 1)[0].trim();
      return isValidDid(found) ? found : null;
    } catch (e) {
      if (signal?.aborted) throw e;
      return null;
    }
  }

  async #fromAccountHost(did: string, signal?: AbortSignal): Promise<string> {
    const { status, json } = await this.#fetch(did, `${this.#pdsUrl}${RESOLVE_HANDLE_PATH}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ handle: did }),
      allowPrivate: true,
      signal,
    });
    if (status !== 200) fail(`Account host answered ${status} for ${did}${errorName(json)}`);
    const body = json as { did?: unknown; handle?: unknown } | undefined;
    if (typeof body !== "object" || body === null || body.did !== did) {
      fail(`Account host answered for another DID than ${did}: ${show(body?.did)}`);
    }
    return checkHandle(did, body.handle);
  }

  async #fromDirectory(did: string, signal?: AbortSignal): Promise<string> {
    const { status, json } = await this.#fetch(did, `${this.#plcUrl}/${did}`, { signal });
    if (status !== 200) fail(`DID directory answered ${status} for ${did}`);
    return handleFromDocument(did, json);
  }

  async #fromDidWeb(did: string, signal?: AbortSignal): Promise<string> {
    const { status, json } = await this.#fetch(did, this.didWebDocumentUrl(did), {
      signal,
      redirect: "none",
    });
    if (status !== 200) fail(`DID document host answered ${status} for ${did}`);
    return handleFromDocument(did, json);
  }

  /**
   * The DID document URL of a `did:web`: `https://<host>/.well-known/did.json`, or `http://` for
   * `localhost` with a port when private destinations are allowed.
   *
   * @throws {HandleResolutionError} for a path-based `did:web`, a bad host, or a port on a host
   *   other than `localhost`
   */
  didWebDocumentUrl(did: string): string {
    const id = did.slice("did:web:".length);
    if (id.includes(":")) fail(`Path-based did:web is not supported: ${did}`);
    const [host, port, ...extra] = id.split(/%3A/i);
    if (extra.length > 0 || host === "" || host.includes("%")) fail(`Invalid did:web host: ${did}`);
    const hostname = host.toLowerCase();
    if (port !== undefined) {
      if (hostname !== "localhost" || !/^\d{1,5}$/.test(port) || Number(port) > 65535) {
        fail(`A did:web port is only allowed for localhost: ${did}`);
      }
    }
    const scheme = hostname === "localhost" && this.#allowPrivate ? "http" : "https";
    let url: URL;
    try {
      url = new URL(
        `${scheme}://${hostname}${port === undefined ? "" : `:${port}`}${DID_WEB_PATH}`,
      );
    } catch {
      fail(`Invalid did:web host: ${did}`);
    }
    if (url.hostname !== hostname) fail(`Invalid did:web host: ${did}`);
    return url.href;
  }

  async #fetch(
    did: string,
    url: string,
    opts: {
      method?: "POST";
      headers?: Record<string, string>;
      body?: string;
      allowPrivate?: boolean;
      redirect?: "none";
      signal?: AbortSignal;
    },
  ): Promise<{ status: number; json: unknown }> {
    try {
      return await safeFetchJson(url, {
        method: opts.method,
        headers: opts.headers,
        body: opts.body,
        allowPrivate: opts.allowPrivate || this.#allowPrivate,
        // The atproto reference resolver does not follow did:web redirects.
        maxRedirects: opts.redirect === "none" ? 0 : undefined,
        timeoutMs: this.#timeoutMs,
        maxBytes: this.#maxBytes,
        signal: opts.signal,
        lookup: this.#lookup,
      });
    } catch (e) {
      if (e instanceof SafeFetchError && e.reason !== "aborted") {
        fail(`Could not fetch for ${did}: ${e.message}`, e);
      }
      throw e;
    }
  }
}

/** Default {@link TxtLookup}: `Deno.resolveDns` TXT; a name without records has none. */
export async function resolveTxt(name: string, signal: AbortSignal): Promise<string[][]> {
  try {
    return await Deno.resolveDns(name, "TXT", { signal });
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return [];
    throw e;
  }
}

/**
 * The handle of a DID document: the first `alsoKnownAs` entry of the form `at://<valid handle>`,
 * lower-cased. The document `id` must equal `did`.
 *
 * @throws {HandleResolutionError} when the document is not for `did` or lists no valid handle
 */
export function handleFromDocument(did: string, doc: unknown): string {
  if (typeof doc !== "object" || doc === null || Array.isArray(doc)) {
    fail(`DID document of ${did} is not a JSON object`);
  }
  const { id, alsoKnownAs } = doc as { id?: unknown; alsoKnownAs?: unknown };
  if (id !== did) fail(`DID document id does not match ${did}: ${show(id)}`);
  if (Array.isArray(alsoKnownAs)) {
    for (const aka of alsoKnownAs) {
      if (typeof aka !== "string" || !aka.startsWith("at://")) continue;
      const handle = aka.slice("at://".length);
      if (isValidHandle(handle)) return checkHandle(did, handle);
    }
  }
  fail(`DID document of ${did} lists no at:// handle`);
}

function checkHandle(did: string, handle: unknown): string {
  if (typeof handle !== "string" || !isValidHandle(handle)) {
    fail(`Invalid handle for ${did}: ${show(handle)}`);
  }
  const normal = normalizeHandle(handle);
  if (normal === INVALID_HANDLE) fail(`No valid handle for ${did}: ${INVALID_HANDLE}`);
  return normal;
}

function errorName(json: unknown): string {
  const error = (json as { error?: unknown } | undefined)?.error;
  return typeof error === "string" ? ` (${error.slice(0, 100)})` : "";
}

function show(value: unknown): string {
  const text = typeof value === "string" ? value : JSON.stringify(value) ?? String(value);
  return text.length > 100 ? `${text.slice(0, 100)}…` : text;
}

function fail(message: string, cause?: unknown): never {
  throw new HandleResolutionError(message, cause === undefined ? undefined : { cause });
}

function messageOf(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
