/**
 * Handle sync (spec 1.5, 4.3 rule 1, part 8): resolves the DIDs of posts whose author handle is
 * still the placeholder, in batches of 100 DIDs with 8 resolutions in flight; each request is
 * bounded to 2 s by the resolver. A DID whose placeholder rows were all attempted within the last
 * hour is skipped. The attempt time is written on every placeholder row of the batch's DIDs before
 * any request goes out (so a crash mid-batch still counts as an attempt), and cleared on success.
 *
 * A resolved handle is applied as a `HandleOp` through the one write path (the store's
 * `writer.applyOps`): it sets the profile cache row's handle and every post of the DID (and
 * clears their attempt time); notifications hydrate the author handle from the profile cache, so
 * they show it too.
 *
 * Batches walk the DIDs in order with a key-set cursor, wrapping around once the end is reached,
 * so DIDs that keep failing do not make every batch rescan them. The rows are the store's
 * (`db/placeholder_handles.ts`).
 *
 * @module
 */

import { type Logger, redactUrl } from "../../shared/log.ts";
import type { AppviewConfig } from "../config.ts";
import { openIndexStore } from "../db/open.ts";
import type { DueAuthor } from "../db/placeholder_handles.ts";
import type { IndexStore } from "../db/store.ts";
import {
  DidResolver,
  type DidResolverOptions,
  type HandleResolver,
  type ResolvedHandle,
} from "./did_resolver.ts";

/** Spec part 8: DIDs per batch. */
export const HANDLE_SYNC_BATCH_SIZE = 100;
/** Spec part 8: resolutions in flight at once. */
export const HANDLE_SYNC_CONCURRENCY = 8;
/** Spec part 8: no re-attempt of a row within this time. */
export const HANDLE_RETRY_SPACING_MS = 60 * 60 * 1000;
/** Pause between batches when the last one was not full. */
export const DEFAULT_HANDLE_SYNC_INTERVAL_MS = 30_000;

/** Options of {@link HandleSync}. */
export interface HandleSyncOptions {
  resolver: HandleResolver;
  log: Logger;
  /**
   * Clock for attempt times and the retry spacing. Default: the system clock. (Handle rows are
   * written by the store's writer, with its clock.)
   */
  now?: () => Date;
  /** DIDs per batch. Default {@link HANDLE_SYNC_BATCH_SIZE}. */
  batchSize?: number;
  /** Resolutions in flight. Default {@link HANDLE_SYNC_CONCURRENCY}. */
  concurrency?: number;
  /** Default {@link HANDLE_RETRY_SPACING_MS}. */
  retrySpacingMs?: number;
}

/** Outcome of one batch. */
export interface HandleSyncResult {
  /** DIDs attempted. */
  attempted: number;
  resolved: number;
  failed: number;
}

/** The handle-sync worker over one index store. */
export class HandleSync {
  readonly #store: IndexStore;
  readonly #resolver: HandleResolver;
  readonly #log: Logger;
  readonly #now: () => Date;
  readonly #batchSize: number;
  readonly #concurrency: number;
  readonly #retrySpacingMs: number;
  readonly #stop = new AbortController();
  #afterAuthor = 0;
  #loop: Promise<void> | null = null;
  #batch: Promise<HandleSyncResult> | null = null;

  constructor(store: IndexStore, opts: HandleSyncOptions) {
    this.#store = store;
    this.#resolver = opts.resolver;
    this.#log = opts.log;
    this.#now = opts.now ?? (() => new Date());
    this.#batchSize = positiveInt("Batch size", opts.batchSize ?? HANDLE_SYNC_BATCH_SIZE);
    this.#concurrency = positiveInt("Concurrency", opts.concurrency ?? HANDLE_SYNC_CONCURRENCY);
    this.#retrySpacingMs = opts.retrySpacingMs ?? HANDLE_RETRY_SPACING_MS;
  }

  /**
   * Runs one batch: selects up to `batchSize` DIDs due for an attempt, records the attempt time,
   * resolves them with `concurrency` in flight and applies each handle as it arrives. Concurrent
   * calls share the running batch.
   */
  runOnce(): Promise<HandleSyncResult> {
    if (this.#stop.signal.aborted) return Promise.resolve({ attempted: 0, resolved: 0, failed: 0 });
    this.#batch ??= this.#runBatch().finally(() => {
      this.#batch = null;
    });
    return this.#batch;
  }

  /** Runs batches until {@link close}: back to back while they are full, else every `intervalMs`. */
  start(intervalMs: number = DEFAULT_HANDLE_SYNC_INTERVAL_MS): void {
    if (this.#loop !== null || this.#stop.signal.aborted) return;
    this.#loop = this.#run(intervalMs);
  }

  /** Stops the loop, aborts requests in flight and waits for the running batch to end. */
  async close(): Promise<void> {
    this.#stop.abort();
    await this.#loop;
    await this.#batch?.catch(() => {});
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  async #run(intervalMs: number): Promise<void> {
    while (!this.#stop.signal.aborted) {
      let full = false;
      try {
        const result = await this.runOnce();
        full = result.attempted >= this.#batchSize;
      } catch (e) {
        this.#log.error("Handle sync batch failed", { error: e });
      }
      if (!full) await sleep(intervalMs, this.#stop.signal);
    }
  }

  async #runBatch(): Promise<HandleSyncResult> {
    const now = this.#now();
    const dids = await this.#selectDue(
      new Date(now.getTime() - this.#retrySpacingMs).toISOString(),
    );
    const result: HandleSyncResult = { attempted: dids.length, resolved: 0, failed: 0 };
    if (dids.length === 0) return result;
    await this.#store.state.placeholderHandles.markAttempted(dids, now.toISOString());
    const signal = this.#stop.signal;
    let next = 0;
    const worker = async () => {
      while (next < dids.length && !signal.aborted) {
        const did = dids[next++];
        let resolved: ResolvedHandle;
        try {
          resolved = await this.#resolver.resolve(did, signal);
        } catch (e) {
          result.failed++;
          if (!signal.aborted) this.#log.debug("Handle not resolved", { did, error: e });
          continue;
        }
        try {
          // A handle from a DID document cannot take one another DID holds (applyOps skips
          // the op and counts a handle_conflict); the account host's answer can.
          const { applied } = await this.#store.writer.applyOps([
            { kind: "handle", did, ...resolved },
          ]);
          if (applied === 1) result.resolved++;
          else result.failed++;
        } catch (e) {
          result.failed++;
          this.#log.error("Resolved handle not stored", { did, error: e });
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(this.#concurrency, dids.length) }, worker));
    this.#log.info("Handle sync batch done", { ...result });
    return result;
  }

  /** Up to `batchSize` due DIDs after the cursor, wrapping around to the start once. */
  async #selectDue(cutoff: string): Promise<string[]> {
    const rowsOf = this.#store.state.placeholderHandles;
    const after = this.#afterAuthor;
    const rows: DueAuthor[] = await rowsOf.due(after, cutoff, this.#batchSize);
    if (rows.length < this.#batchSize && after !== 0) {
      rows.push(...await rowsOf.due(after, cutoff, this.#batchSize - rows.length, true));
    }
    this.#afterAuthor = rows.length < this.#batchSize ? 0 : rows[rows.length - 1].author;
    return rows.map((r) => r.did);
  }
}

/** The resolver options that say how a handle is verified back (tests inject them). */
export type HandleVerificationOptions = Pick<DidResolverOptions, "txtLookup" | "handleDidUrl">;

/** Options of {@link runHandleSyncWorker}. */
export interface HandleSyncWorkerOptions {
  /** Pause between batches that were not full. Default {@link DEFAULT_HANDLE_SYNC_INTERVAL_MS}. */
  intervalMs?: number;
  /** Handle verification lookups (tests, where the real DNS does not run). */
  resolver?: HandleVerificationOptions;
}

/**
 * Runs handle sync alone until `signal` aborts: opens the index store, runs, then closes
 * everything.
 */
export async function runHandleSyncWorker(
  config: AppviewConfig,
  log: Logger,
  signal: AbortSignal,
  opts: HandleSyncWorkerOptions = {},
): Promise<void> {
  const store = await openIndexStore(config, { log });
  try {
    const sync = createHandleSync(store, config, log, { resolver: opts.resolver });
    log.info("Handle sync started", {
      plcUrl: redactUrl(config.plcUrl),
      pdsUrl: redactUrl(config.pdsUrl),
    });
    sync.start(opts.intervalMs);
    await new Promise<void>((resolve) => {
      if (signal.aborted) resolve();
      else signal.addEventListener("abort", () => resolve(), { once: true });
    });
    await sync.close();
    log.info("Handle sync stopped");
  } finally {
    await store.close();
  }
}

/** Builds a {@link HandleSync} from the index configuration (for `scripts/dev.ts` and main). */
export function createHandleSync(
  store: IndexStore,
  config: AppviewConfig,
  log: Logger,
  opts: { resolver?: HandleVerificationOptions } = {},
): HandleSync {
  const resolver = new DidResolver({
    ...opts.resolver,
    pdsUrl: config.pdsUrl,
    plcUrl: config.plcUrl,
    allowPrivate: config.allowPrivateFetch,
  });
  return new HandleSync(store, { resolver, log });
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
  });
}

function positiveInt(what: string, n: number): number {
  if (!Number.isInteger(n) || n < 1) {
    throw new RangeError(`${what} must be a positive integer: ${n}`);
  }
  return n;
}
