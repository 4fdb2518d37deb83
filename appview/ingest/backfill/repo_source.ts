/**
 * Where a backfill gets a repository (docs/behaviour.md 6.2 rule 9): the account's DID document,
 * as the configured account host serves it (`com.atproto.identity.resolveDid`, the source the push
 * verification already trusts, `account_directory.ts`), gives the key that signs its commits, its
 * handle and its host (`#atproto_pds`); the repository comes from that host's
 * `com.atproto.sync.getRepo`. A document naming the configured account host (its public or its
 * internal address) is fetched at the configured address (`PDS_INTERNAL_URL` when set), like the
 * stream; any other host goes through the SSRF-safe fetch as handle sync does
 * (`APPVIEW_ALLOW_PRIVATE_FETCH` decides about private addresses).
 *
 * Every request is bounded: the document at 64 KiB and 10 s, the repository at
 * `APPVIEW_BACKFILL_MAX_REPO_BYTES` and `APPVIEW_BACKFILL_TIMEOUT_SECONDS`, the listing pages at
 * 4 MiB. Failures are {@link RepoFetchError}s whose `kind` says whether retrying can help.
 *
 * @module
 */

import { isValidDid } from "../../../shared/syntax.ts";
import { isValidTid } from "../../../shared/tid.ts";
import { accountFromDocument } from "../sources/account_directory.ts";
import { type HostLookup, safeFetch, SafeFetchError } from "../../workers/safe_fetch.ts";

/** XRPC paths the backfill calls. */
export const RESOLVE_DID_PATH = "/xrpc/com.atproto.identity.resolveDid";
export const GET_REPO_PATH = "/xrpc/com.atproto.sync.getRepo";
export const LIST_REPOS_PATH = "/xrpc/com.atproto.sync.listRepos";
/** Default of `APPVIEW_BACKFILL_MAX_REPO_BYTES`: 64 MiB. */
export const DEFAULT_MAX_REPO_BYTES = 64 * 1024 * 1024;
/** Default of `APPVIEW_BACKFILL_TIMEOUT_SECONDS` (one repository's fetch). */
export const DEFAULT_REPO_TIMEOUT_MS = 60_000;
const DOCUMENT_TIMEOUT_MS = 10_000;
const DOCUMENT_MAX_BYTES = 64 * 1024;
const LIST_MAX_BYTES = 4 * 1024 * 1024;
/** Repositories asked for per `listRepos` page. */
export const LIST_PAGE = 500;

/**
 * Why a fetch failed: `gone` (the configured account host says it does not have the account or
 * its repository: the only answer that removes an account from the index), `inactive` (taken down
 * or deactivated: `status` says which), `too-large`, `invalid` (what came back does not verify,
 * or a destination the SSRF check refuses), `unavailable` (the network, a timeout, a 5xx, another
 * host without the repository). All but `gone` and `inactive` are retried with backoff.
 */
export type RepoFetchFailure = "gone" | "inactive" | "too-large" | "invalid" | "unavailable";

/** A repository could not be fetched or verified; the message names the DID and why. */
export class RepoFetchError extends Error {
  override readonly name = "RepoFetchError";
  constructor(
    readonly kind: RepoFetchFailure,
    message: string,
    readonly status: string | null = null,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/** An account's key, handle and the address its repository is fetched from. */
export interface RepoLocation {
  readonly did: string;
  readonly key: CryptoKey;
  readonly handle: string | null;
  /** Base address to call `getRepo` on. */
  readonly host: string;
  /** The configured account host holds it (fetched at its configured address). */
  readonly local: boolean;
}

/** One entry of the account host's `listRepos`. */
export interface ListedRepo {
  readonly did: string;
  readonly rev: string;
  /** False for a taken-down, deactivated or otherwise inactive account. */
  readonly active: boolean;
  readonly status: string | null;
}

/** Options of {@link RepoSource}. */
export interface RepoSourceOptions {
  /** Configured address of the account host (`AppviewConfig.pdsUrl`). */
  pdsUrl: string;
  /** Its public address (`PDS_PUBLIC_URL`), which its DID documents name. */
  pdsPublicUrl: string;
  /** `APPVIEW_ALLOW_PRIVATE_FETCH`, for hosts other than the configured one. */
  allowPrivate: boolean;
  maxRepoBytes?: number;
  timeoutMs?: number;
  /** Host name resolution of the SSRF check (tests). */
  lookup?: HostLookup;
}

/** Locates, lists and fetches repositories (module notes). */
export class RepoSource {
  readonly #pdsUrl: string;
  readonly #ownOrigins: ReadonlySet<string>;
  readonly #allowPrivate: boolean;
  readonly #maxRepoBytes: number;
  readonly #timeoutMs: number;
  readonly #lookup: HostLookup | undefined;

  constructor(opts: RepoSourceOptions) {
    this.#pdsUrl = opts.pdsUrl.replace(/\/+$/, "");
    this.#ownOrigins = new Set([new URL(opts.pdsUrl).origin, new URL(opts.pdsPublicUrl).origin]);
    this.#allowPrivate = opts.allowPrivate;
    this.#maxRepoBytes = opts.maxRepoBytes ?? DEFAULT_MAX_REPO_BYTES;
    this.#timeoutMs = opts.timeoutMs ?? DEFAULT_REPO_TIMEOUT_MS;
    this.#lookup = opts.lookup;
  }

  /** Largest repository fetched, in bytes. */
  get maxRepoBytes(): number {
    return this.#maxRepoBytes;
  }

  /** The account's key, handle and host, from its DID document. */
  async locate(did: string, signal?: AbortSignal): Promise<RepoLocation> {
    if (!isValidDid(did)) throw new RepoFetchError("invalid", `Invalid DID: ${did}`);
    const url = `${this.#pdsUrl}${RESOLVE_DID_PATH}?did=${encodeURIComponent(did)}`;
    const { status, json } = await this.#getJson(url, {
      allowPrivate: true,
      timeoutMs: DOCUMENT_TIMEOUT_MS,
      maxBytes: DOCUMENT_MAX_BYTES,
      signal,
    }, did);
    const error = errorName(json);
    if (status === 400 && error === "DidNotFound") {
      throw new RepoFetchError("gone", `Account host does not host ${did}`);
    }
    if (status !== 200) throw unavailable(`Account host answered ${status} for ${did}${q(error)}`);
    const doc = (json as { didDoc?: unknown } | undefined)?.didDoc;
    let account;
    try {
      account = await accountFromDocument(did, doc);
    } catch (e) {
      throw new RepoFetchError("invalid", `DID document of ${did} is unusable: ${messageOf(e)}`);
    }
    const endpoint = pdsEndpoint(did, doc);
    const local = this.#ownOrigins.has(endpoint.origin);
    const host = local ? this.#pdsUrl : endpoint.href.replace(/\/+$/, "");
    return { did, key: account.key, handle: account.handle, host, local };
  }

  /** The repository's CAR (`getRepo`), bounded in bytes and time. */
  async fetchRepo(location: RepoLocation, signal?: AbortSignal): Promise<Uint8Array> {
    const { did } = location;
    const url = `${location.host}${GET_REPO_PATH}?did=${encodeURIComponent(did)}`;
    let res;
    try {
      res = await safeFetch(url, {
        allowPrivate: location.local || this.#allowPrivate,
        maxBytes: this.#maxRepoBytes,
        maxRedirects: location.local ? 0 : undefined,
        timeoutMs: this.#timeoutMs,
        headers: { accept: "application/vnd.ipld.car" },
        signal,
        lookup: location.local ? undefined : this.#lookup,
      });
    } catch (e) {
      if (e instanceof SafeFetchError && e.reason === "too_large") {
        throw new RepoFetchError(
          "too-large",
          `Repository of ${did} is larger than ${this.#maxRepoBytes} bytes`,
          null,
          { cause: e },
        );
      }
      throw fetchFailure(e, did);
    }
    if (res.status === 200) return res.body;
    let json: unknown;
    try {
      json = JSON.parse(new TextDecoder().decode(res.body));
    } catch { /* no error body */ }
    const error = errorName(json);
    if (error === "RepoTakendown" || error === "RepoDeactivated" || error === "RepoSuspended") {
      const status = error === "RepoTakendown"
        ? "takendown"
        : error === "RepoDeactivated"
        ? "deactivated"
        : "suspended";
      throw new RepoFetchError("inactive", `Repository of ${did} is ${status}`, status);
    }
    if (res.status === 400 && error === "RepoNotFound") {
      // Only the configured account host's word removes an account; another host without it
      // (the account moved, or that host is wrong) is a failure, retried.
      throw new RepoFetchError(
        location.local ? "gone" : "unavailable",
        `Host ${location.host} has no repository ${did}`,
      );
    }
    throw unavailable(
      `Host ${location.host} answered ${res.status} for the repository of ${did}${q(error)}`,
    );
  }

  /**
   * One page of the configured account host's `listRepos` (after `cursor`); entries that are
   * malformed are left out and counted in `skipped`.
   */
  async listRepos(
    cursor: string | null,
    signal?: AbortSignal,
  ): Promise<{ repos: ListedRepo[]; cursor: string | null; skipped: number }> {
    const params = new URLSearchParams({ limit: String(LIST_PAGE) });
    if (cursor !== null) params.set("cursor", cursor);
    const { status, json } = await this.#getJson(`${this.#pdsUrl}${LIST_REPOS_PATH}?${params}`, {
      allowPrivate: true,
      timeoutMs: this.#timeoutMs,
      maxBytes: LIST_MAX_BYTES,
      signal,
    }, "the repository list");
    if (status !== 200) throw unavailable(`Account host answered ${status} to listRepos`);
    const body = json as { repos?: unknown; cursor?: unknown } | undefined;
    if (!Array.isArray(body?.repos)) {
      throw new RepoFetchError("invalid", "Account host's listRepos has no repos array");
    }
    const repos: ListedRepo[] = [];
    let skipped = 0;
    for (const raw of body.repos) {
      const r = raw as Record<string, unknown> | null;
      if (
        typeof r !== "object" || r === null || typeof r.did !== "string" || !isValidDid(r.did) ||
        typeof r.rev !== "string" || !isValidTid(r.rev)
      ) {
        skipped++;
        continue;
      }
      const active = r.active !== false; // absent (an older host): active
      const status = typeof r.status === "string" && r.status.length <= 64 ? r.status : null;
      repos.push({ did: r.did, rev: r.rev, active, status: active ? null : status });
    }
    const next = typeof body.cursor === "string" && body.cursor !== "" ? body.cursor : null;
    return { repos, cursor: next, skipped };
  }

  async #getJson(
    url: string,
    opts: { allowPrivate: boolean; timeoutMs: number; maxBytes: number; signal?: AbortSignal },
    what: string,
  ): Promise<{ status: number; json: unknown }> {
    try {
      const res = await safeFetch(url, {
        ...opts,
        maxRedirects: 0,
        headers: { accept: "application/json" },
      });
      let json: unknown;
      try {
        json = JSON.parse(new TextDecoder().decode(res.body));
      } catch { /* left undefined */ }
      return { status: res.status, json };
    } catch (e) {
      throw fetchFailure(e, what);
    }
  }
}

/** The `#atproto_pds` service endpoint of a DID document. */
function pdsEndpoint(did: string, doc: unknown): URL {
  const services = (doc as { service?: unknown }).service;
  const service = Array.isArray(services)
    ? services.find((s) => s?.id === "#atproto_pds" || s?.id === `${did}#atproto_pds`)
    : undefined;
  const endpoint = service?.serviceEndpoint;
  let url: URL | null = null;
  try {
    url = typeof endpoint === "string" ? new URL(endpoint) : null;
  } catch { /* refused below */ }
  if (url === null || (url.protocol !== "https:" && url.protocol !== "http:")) {
    throw new RepoFetchError("invalid", `DID document of ${did} names no usable #atproto_pds`);
  }
  return url;
}

function fetchFailure(e: unknown, what: string): RepoFetchError {
  if (e instanceof RepoFetchError) return e;
  if (e instanceof SafeFetchError) {
    if (e.reason === "aborted") throw e;
    if (e.reason === "refused") {
      return new RepoFetchError("invalid", `Fetch for ${what} refused: ${e.message}`, null, {
        cause: e,
      });
    }
    return new RepoFetchError("unavailable", `Fetch for ${what} failed: ${e.message}`, null, {
      cause: e,
    });
  }
  throw e;
}

function unavailable(message: string): RepoFetchError {
  return new RepoFetchError("unavailable", message);
}

function errorName(json: unknown): string | null {
  const error = (json as { error?: unknown } | undefined)?.error;
  return typeof error === "string" ? error.slice(0, 100) : null;
}

function q(error: string | null): string {
  return error === null ? "" : ` (${error})`;
}

function messageOf(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
