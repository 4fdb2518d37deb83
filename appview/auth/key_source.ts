/**
 * The account host's token-signing key, as the index sees it (spec 5.2 rules 4-7, part 8).
 *
 * The key is read from `<pdsUrl>/.well-known/did.json`: the first `verificationMethod` entry with
 * a non-empty `publicKeyMultibase`. It is fetched best-effort at startup ({@link
 * PdsKeySource.warmUp}), else on the first request that needs it. After a failed signature check
 * the verifier asks for a re-fetch ({@link PdsKeySource.refreshAfterFailure}); re-fetches are
 * spaced at least 60 s apart, counted from the last fetch attempt, successful or not. Concurrent
 * fetches are coalesced into one.
 *
 * @module
 */

import { parseMultikey } from "../../shared/multikey.ts";
import { importVerifyKey } from "../../shared/jwt.ts";
import { type Logger, redactUrl } from "../../shared/log.ts";

/** Path of the account host's DID document. */
export const DID_DOCUMENT_PATH = "/.well-known/did.json";
/** Spec part 8: DID document fetch timeout. */
export const KEY_FETCH_TIMEOUT_MS = 2_000;
/** Spec part 8: minimum spacing of key re-fetches after failed verifications. */
export const KEY_REFETCH_INTERVAL_MS = 60_000;
/** Upper bound on the DID document body; a real one is well under 2 KiB. */
export const MAX_DID_DOCUMENT_BYTES = 64 * 1024;

/**
 * The key could not be obtained. The message says why, in words fit for the client (it never
 * names the account host's internal address).
 */
export class KeyUnavailableError extends Error {
  override readonly name = "KeyUnavailableError";
}

/** A verification key read from the DID document. */
export interface AccountHostKey {
  /** WebCrypto ECDSA P-256 verification key. */
  readonly cryptoKey: CryptoKey;
  /** The `publicKeyMultibase` string as published. */
  readonly multibase: string;
  /** Identity of the key: hex of the 65-byte uncompressed point (equal keys, equal ids). */
  readonly id: string;
}

/** Options of {@link PdsKeySource}. */
export interface KeySourceOptions {
  /** Base address of the account host (`AppviewConfig.pdsUrl`); a trailing slash is removed. */
  pdsUrl: string;
  log: Logger;
  /** Injectable fetch, for tests. Default: the global `fetch`. */
  fetch?: typeof fetch;
  /** Injectable clock in milliseconds, for tests. Default: `Date.now`. */
  now?: () => number;
  timeoutMs?: number;
  refetchIntervalMs?: number;
  maxBodyBytes?: number;
}

/** Fetches, caches and re-fetches the account host's signing key. */
export class PdsKeySource {
  /** Full URL of the DID document. */
  readonly documentUrl: string;
  /** {@link documentUrl} as logs show it: no credentials, no query values. */
  readonly #shownUrl: string;
  #log: Logger;
  #fetch: typeof fetch;
  #now: () => number;
  #timeoutMs: number;
  #refetchIntervalMs: number;
  #maxBodyBytes: number;
  #key: AccountHostKey | null = null;
  #inFlight: Promise<AccountHostKey> | null = null;
  #lastAttemptAt = -Infinity;
  #onChange: Array<() => void> = [];

  constructor(opts: KeySourceOptions) {
    this.documentUrl = opts.pdsUrl.replace(/\/+$/, "") + DID_DOCUMENT_PATH;
    this.#shownUrl = redactUrl(this.documentUrl);
    this.#log = opts.log;
    this.#fetch = opts.fetch ?? fetch;
    this.#now = opts.now ?? Date.now;
    this.#timeoutMs = opts.timeoutMs ?? KEY_FETCH_TIMEOUT_MS;
    this.#refetchIntervalMs = opts.refetchIntervalMs ?? KEY_REFETCH_INTERVAL_MS;
    this.#maxBodyBytes = opts.maxBodyBytes ?? MAX_DID_DOCUMENT_BYTES;
  }

  /** The cached key, or null when none has been obtained yet. */
  current(): AccountHostKey | null {
    return this.#key;
  }

  /** Registers a callback run whenever the cached key is replaced by a different one. */
  onKeyChange(listener: () => void): void {
    this.#onChange.push(listener);
  }

  /** Startup fetch, best effort: a failure is logged as a warning and never thrown. */
  async warmUp(): Promise<void> {
    try {
      await this.getKey();
    } catch (err) {
      this.#log.warn("account host key not available at startup; will fetch on first use", {
        url: this.#shownUrl,
        reason: (err as Error).message,
      });
    }
  }

  /**
   * The cached key, fetching it when absent (concurrent callers share one fetch).
   *
   * @throws {KeyUnavailableError} with the reason when the document cannot be fetched or holds no key
   */
  getKey(): Promise<AccountHostKey> {
    if (this.#key !== null) return Promise.resolve(this.#key);
    return this.#fetchShared();
  }

  /**
   * Called after a signature check failed with `stale`. Returns a key different from `stale` to
   * retry with, or null when there is none: the re-fetch was rate-limited, failed (logged; the
   * stale key is kept), or returned the same key. Never throws.
   */
  async refreshAfterFailure(stale: AccountHostKey): Promise<AccountHostKey | null> {
    const differs = () => (this.#key !== null && this.#key.id !== stale.id ? this.#key : null);
    // Another request already picked up a newer key: use it without fetching.
    if (differs() !== null) return differs();
    const rateLimited = this.#now() - this.#lastAttemptAt < this.#refetchIntervalMs;
    if (this.#inFlight === null && rateLimited) return null;
    try {
      await this.#fetchShared();
    } catch (err) {
      this.#log.warn("account host key re-fetch failed; keeping the cached key", {
        url: this.#shownUrl,
        reason: (err as Error).message,
      });
    }
    return differs();
  }

  #fetchShared(): Promise<AccountHostKey> {
    if (this.#inFlight !== null) return this.#inFlight;
    this.#lastAttemptAt = this.#now();
    const p = this.#fetchKey().then((key) => {
      const previous = this.#key;
      if (previous === null || previous.id !== key.id) {
        this.#key = key;
        if (previous !== null) {
          this.#log.info("account host key changed", { url: this.#shownUrl });
          for (const listener of this.#onChange) listener();
        }
      }
      return this.#key!;
    }).finally(() => {
      this.#inFlight = null;
    });
    this.#inFlight = p;
    return p;
  }

  async #fetchKey(): Promise<AccountHostKey> {
    let body: Uint8Array;
    try {
      const res = await this.#fetch(this.documentUrl, {
        signal: AbortSignal.timeout(this.#timeoutMs),
        headers: { accept: "application/json" },
      });
      if (!res.ok) {
        await res.body?.cancel();
        throw new KeyUnavailableError(`DID document request answered HTTP ${res.status}`);
      }
      body = await readBounded(res, this.#maxBodyBytes);
    } catch (err) {
      if (err instanceof KeyUnavailableError) throw err;
      const e = err as Error;
      if (e.name === "TimeoutError") {
        throw new KeyUnavailableError(`Account host did not answer within ${this.#timeoutMs} ms`);
      }
      // The transport error names the (possibly internal) URL: log it, keep it off the wire.
      this.#log.debug("DID document fetch failed", { url: this.#shownUrl, err: e });
      throw new KeyUnavailableError("Account host is unreachable");
    }
    let multibase: string;
    try {
      multibase = keyFromDidDocument(JSON.parse(new TextDecoder().decode(body)));
    } catch (err) {
      throw new KeyUnavailableError(
        err instanceof SyntaxError ? "DID document is not JSON" : (err as Error).message,
      );
    }
    let point: Uint8Array;
    try {
      point = parseMultikey(multibase);
    } catch (err) {
      throw new KeyUnavailableError((err as Error).message);
    }
    return {
      cryptoKey: await importVerifyKey(point),
      multibase,
      id: Array.from(point, (b) => b.toString(16).padStart(2, "0")).join(""),
    };
  }
}

/**
 * The `publicKeyMultibase` of the first `verificationMethod` entry that has a non-empty one.
 *
 * @throws {Error} naming what is missing: never returns an empty key
 */
export function keyFromDidDocument(doc: unknown): string {
  if (typeof doc !== "object" || doc === null || Array.isArray(doc)) {
    throw new Error("DID document is not a JSON object");
  }
  const methods = (doc as Record<string, unknown>).verificationMethod;
  if (!Array.isArray(methods)) throw new Error("DID document has no verificationMethod array");
  for (const method of methods) {
    if (typeof method !== "object" || method === null) continue;
    const key = (method as Record<string, unknown>).publicKeyMultibase;
    if (typeof key === "string" && key !== "") return key;
  }
  throw new Error("DID document has no verificationMethod with a publicKeyMultibase");
}

async function readBounded(res: Response, max: number): Promise<Uint8Array> {
  const declared = Number(res.headers.get("content-length") ?? "0");
  if (declared > max) {
    await res.body?.cancel();
    throw new KeyUnavailableError(`DID document is larger than ${max} bytes`);
  }
  if (res.body === null) return new Uint8Array(0);
  const chunks: Uint8Array[] = [];
  let size = 0;
  const reader = res.body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.length;
    if (size > max) {
      await reader.cancel();
      throw new KeyUnavailableError(`DID document is larger than ${max} bytes`);
    }
    chunks.push(value);
  }
  const out = new Uint8Array(size);
  let offset = 0;
  for (const chunk of chunks) {
    out.set(chunk, offset);
    offset += chunk.length;
  }
  return out;
}
