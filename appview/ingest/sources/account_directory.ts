/**
 * Who an account is, as the configured account host says: the key that signs its commits and its
 * handle. The push ingest (`push.ts`) checks every pushed commit against this, so a holder of the
 * ingest secret cannot write for an account what its repository does not hold.
 *
 * The source is the account host's own `com.atproto.identity.resolveDid` (`config.pdsUrl`, the
 * address whose stream the index already trusts): it answers only for the accounts it hosts, so
 * an account it does not host gets no key and no handle from a push. The DID document's
 * `#atproto` Multikey is the signing key; its first `at://` handle is the handle.
 *
 * Cached per DID: hosted accounts for {@link ACCOUNT_TTL_MS}, refusals ("not hosted") for
 * {@link NOT_HOSTED_TTL_MS}; failures to reach the host are not cached. At most
 * {@link MAX_CACHED_ACCOUNTS} entries (the oldest go first); concurrent lookups of one DID share
 * one request. A caller whose check failed against a cached entry may ask for a re-fetch
 * (`refresh`), granted once the entry is {@link REFRESH_AFTER_MS} old (a rotated key or a
 * changed handle is picked up within that, and a stream of bad pushes costs at most one request
 * per DID per interval).
 *
 * @module
 */

import { importVerifyKey } from "../../../shared/jwt.ts";
import { parseMultikey } from "../../../shared/multikey.ts";
import { isValidDid } from "../../../shared/syntax.ts";
import { handleFromDocument } from "../../workers/did_resolver.ts";
import { SafeFetchError, safeFetchJson } from "../../workers/safe_fetch.ts";

/** XRPC path of `com.atproto.identity.resolveDid` on the account host. */
export const RESOLVE_DID_PATH = "/xrpc/com.atproto.identity.resolveDid";
/** How long a hosted account's key and handle are kept. */
export const ACCOUNT_TTL_MS = 5 * 60_000;
/** How long "the account host does not host this DID" is kept. */
export const NOT_HOSTED_TTL_MS = 60_000;
/** Youngest entry a failed check may have re-fetched. */
export const REFRESH_AFTER_MS = 60_000;
/** Most DIDs cached. */
export const MAX_CACHED_ACCOUNTS = 10_000;

/** An account the account host hosts. */
export interface HostedAccount {
  readonly did: string;
  /** WebCrypto ECDSA P-256 key that verifies the account's commits. */
  readonly key: CryptoKey;
  /** Lower-case handle; null when the document lists none. */
  readonly handle: string | null;
}

/** Why an account could not be looked up. */
export type AccountLookupFailure = "not-hosted" | "unavailable";

/** The account host does not host the DID, or could not be asked; the message says which. */
export class AccountLookupError extends Error {
  override readonly name = "AccountLookupError";
  constructor(readonly reason: AccountLookupFailure, message: string, options?: ErrorOptions) {
    super(message, options);
  }
}

/** Looks accounts up; {@link AccountHostDirectory} asks the account host, tests use a table. */
export interface AccountDirectory {
  /**
   * The account of `did`. `refresh` asks for a fresh answer (after a check against the cached
   * one failed); a directory may serve the cached one when it is young.
   *
   * @throws {AccountLookupError}
   */
  lookup(did: string, opts?: { refresh?: boolean }): Promise<HostedAccount>;
}

/** Options of {@link AccountHostDirectory}. */
export interface AccountHostDirectoryOptions {
  /** Base address of the account host (`AppviewConfig.pdsUrl`). */
  pdsUrl: string;
  /** Clock in ms (tests inject one). */
  now?: () => number;
  timeoutMs?: number;
  maxEntries?: number;
}

interface Entry {
  at: number;
  account: HostedAccount | null;
  message: string;
}

/** The account host as the directory of its accounts, cached (see the module notes). */
export class AccountHostDirectory implements AccountDirectory {
  readonly #base: string;
  readonly #now: () => number;
  readonly #timeoutMs: number | undefined;
  readonly #maxEntries: number;
  readonly #cache = new Map<string, Entry>();
  readonly #inFlight = new Map<string, Promise<Entry>>();

  constructor(opts: AccountHostDirectoryOptions) {
    this.#base = opts.pdsUrl.replace(/\/+$/, "");
    this.#now = opts.now ?? Date.now;
    this.#timeoutMs = opts.timeoutMs;
    this.#maxEntries = opts.maxEntries ?? MAX_CACHED_ACCOUNTS;
  }

  /** Number of cached DIDs (for tests of the bound). */
  get size(): number {
    return this.#cache.size;
  }

  async lookup(did: string, opts: { refresh?: boolean } = {}): Promise<HostedAccount> {
    if (!isValidDid(did)) throw new AccountLookupError("not-hosted", `Invalid DID: ${did}`);
    const now = this.#now();
    const cached = this.#cache.get(did);
    const ttl = cached?.account === null ? NOT_HOSTED_TTL_MS : ACCOUNT_TTL_MS;
    const fresh = cached !== undefined && now - cached.at < ttl &&
      !(opts.refresh === true && now - cached.at >= REFRESH_AFTER_MS);
    const entry = fresh ? cached : await this.#fetchShared(did);
    if (entry.account === null) throw new AccountLookupError("not-hosted", entry.message);
    return entry.account;
  }

  #fetchShared(did: string): Promise<Entry> {
    let pending = this.#inFlight.get(did);
    if (pending === undefined) {
      pending = this.#fetch(did).finally(() => this.#inFlight.delete(did));
      this.#inFlight.set(did, pending);
    }
    return pending;
  }

  async #fetch(did: string): Promise<Entry> {
    const url = `${this.#base}${RESOLVE_DID_PATH}?did=${encodeURIComponent(did)}`;
    let status: number;
    let json: unknown;
    try {
      // The operator's own configured address, often on loopback: private is allowed.
      ({ status, json } = await safeFetchJson(url, {
        allowPrivate: true,
        maxRedirects: 0,
        timeoutMs: this.#timeoutMs,
      }));
    } catch (e) {
      if (!(e instanceof SafeFetchError)) throw e;
      throw new AccountLookupError("unavailable", `Account host could not be asked: ${e.message}`, {
        cause: e,
      });
    }
    if (status === 400 && (json as { error?: unknown } | undefined)?.error === "DidNotFound") {
      return this.#keep(did, null, `Account host does not host ${did}`);
    }
    if (status !== 200) {
      throw new AccountLookupError("unavailable", `Account host answered ${status} for ${did}`);
    }
    let account: HostedAccount;
    try {
      account = await accountFromDocument(did, (json as { didDoc?: unknown } | undefined)?.didDoc);
    } catch (e) {
      return this.#keep(did, null, `Account host's document of ${did} is unusable: ${message(e)}`);
    }
    return this.#keep(did, account, "");
  }

  #keep(did: string, account: HostedAccount | null, message: string): Entry {
    const entry = { at: this.#now(), account, message };
    this.#cache.delete(did);
    if (this.#cache.size >= this.#maxEntries) {
      this.#cache.delete(this.#cache.keys().next().value!);
    }
    this.#cache.set(did, entry);
    return entry;
  }
}

/**
 * The signing key and handle of a DID document: the verification method `#atproto` (or
 * `<did>#atproto`) of type Multikey, and the first valid `at://` handle (none: null).
 *
 * @throws {Error} naming what the document lacks
 */
export async function accountFromDocument(did: string, doc: unknown): Promise<HostedAccount> {
  if (typeof doc !== "object" || doc === null || (doc as { id?: unknown }).id !== did) {
    throw new Error(`DID document is not that of ${did}`);
  }
  const methods = (doc as { verificationMethod?: unknown }).verificationMethod;
  const method = Array.isArray(methods)
    ? methods.find((m) => m?.id === "#atproto" || m?.id === `${did}#atproto`)
    : undefined;
  if (method?.type !== "Multikey" || typeof method.publicKeyMultibase !== "string") {
    throw new Error(`DID document of ${did} has no #atproto Multikey`);
  }
  const key = await importVerifyKey(parseMultikey(method.publicKeyMultibase));
  let handle: string | null;
  try {
    handle = handleFromDocument(did, doc);
  } catch {
    handle = null;
  }
  return { did, key, handle };
}

function message(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
