/**
 * The backfill worker (docs/behaviour.md 6.2 rules 8-11): fetches, verifies and applies whole
 * repositories of the account host through the one write path (`IndexWriter.applySnapshot`).
 *
 * Work comes from the durable queue (`backfill_queue`): gaps the write path found (queued in the
 * commit's transaction, announced through `IndexWriter.listenForGaps`), `#sync` frames, and a
 * restored account host ({@link Backfiller.reconcileHost}). The worker reads the queue when woken
 * and every {@link POLL_INTERVAL_MS} (rows another process queued, backoffs that ended).
 *
 * One repository, in order:
 * 1. A row whose target rev (a `#sync` frame's, the host's listing) is the stored rev is done.
 * 2. The stored rev is read, then the account's DID document and its repository are fetched and
 *    verified (`repo_source.ts`, `verify_repo.ts`), bounded in bytes and time.
 * 3. The snapshot is applied in one transaction: the handle the document names (the account
 *    host's word, as the push's), the account as known and active, then the record diff
 *    (`repo_diff.ts`). A snapshot older than what the stream applied meanwhile is stale and is
 *    tried again shortly; one older than the stored rev while nothing was applied meanwhile is the
 *    host's truth (a restored backup) and is applied.
 * 4. A host that answers the repository taken down or deactivated: the account's status is applied
 *    as an `#account` frame's would be. A host that does not have it (any more) while the index
 *    holds it as the host's: the account is removed as a deleted one. Other failures back off
 *    ({@link BACKOFF}), kept on the row.
 *
 * Bounds: at most `concurrency` repositories in flight (so at most `concurrency` x the repository
 * bound in memory), one per DID; the queue has one row per DID.
 *
 * @module
 */

import type { Logger } from "../../../shared/log.ts";
import type { IndexOp } from "../../../shared/ops.ts";
import type { AppviewContext } from "../../context.ts";
import {
  BACKFILL_LOCAL,
  type BackfillQueue,
  type BackfillReason,
  type QueuedRepo,
} from "../../db/backfill_state.ts";
import type { AsyncMethods, StateStore } from "../../db/store.ts";
import { compareWithHost, type HostComparison } from "./host_reconcile.ts";
import { DELETED_STATUS } from "../indexers/index_account_status.ts";
import { RepoFetchError, RepoSource } from "./repo_source.ts";
import type { AppviewConfig } from "../../config.ts";
import type { LocalStreamHooks } from "../sources/local_stream.ts";
import { verifyRepo } from "./verify_repo.ts";

/** How often the queue is read without being woken. */
export const POLL_INTERVAL_MS = 5_000;
/** Default repositories fetched at once (`APPVIEW_BACKFILL_CONCURRENCY`). */
export const DEFAULT_CONCURRENCY = 2;
/** Retry delays of a failed repository: `initialMs * 2^(attempts-1)`, capped. */
export const BACKOFF = Object.freeze({ initialMs: 5_000, maxMs: 3_600_000 });
/** Delay before a stale snapshot is tried again. */
export const STALE_RETRY_MS = 1_000;

/** What one backfill did. */
export type BackfillOutcome =
  | { kind: "applied"; rev: string; records: number; applied: number; previousRev: string | null }
  | { kind: "current" }
  | { kind: "stale" }
  | { kind: "inactive"; status: string }
  | { kind: "removed" }
  | { kind: "gone" };

/** Options of {@link Backfiller}. */
export interface BackfillerOptions {
  source: RepoSource;
  /** Repositories in flight at once (default {@link DEFAULT_CONCURRENCY}). */
  concurrency?: number;
  pollIntervalMs?: number;
  backoff?: { initialMs: number; maxMs: number };
  /** Hears of each queued repository's outcome, or its error (the task's progress). */
  onOutcome?: (did: string, outcome: BackfillOutcome | Error) => void;
}

/** Fetches and applies repositories (module notes). */
export class Backfiller implements AsyncDisposable {
  readonly #ctx: AppviewContext;
  readonly #log: Logger;
  readonly #source: RepoSource;
  readonly #state: StateStore;
  readonly #queue: AsyncMethods<BackfillQueue>;
  readonly #concurrency: number;
  readonly #pollIntervalMs: number;
  readonly #backoff: { initialMs: number; maxMs: number };
  readonly #inFlight = new Map<string, Promise<void>>();
  readonly #abort = new AbortController();
  #timer: ReturnType<typeof setInterval> | null = null;
  #soon: ReturnType<typeof setTimeout> | null = null;
  #reconcile: Promise<void> | null = null;
  #reconcileTimer: ReturnType<typeof setTimeout> | null = null;
  /** The queue read in progress ({@link wake}); another wake meanwhile runs after it. */
  #waking: Promise<void> | null = null;
  #wakeAgain = false;
  /** Runs finished so far: a queue read during which one finished is read again. */
  #finished = 0;
  readonly #onOutcome: BackfillerOptions["onOutcome"];
  #started = false;
  #closed = false;

  constructor(ctx: AppviewContext, opts: BackfillerOptions) {
    this.#ctx = ctx;
    this.#log = ctx.log.child("backfill");
    this.#source = opts.source;
    this.#state = ctx.store.state;
    this.#queue = this.#state.backfillQueue;
    this.#concurrency = opts.concurrency ?? DEFAULT_CONCURRENCY;
    if (!Number.isSafeInteger(this.#concurrency) || this.#concurrency < 1) {
      throw new RangeError(`Backfill concurrency must be a positive integer: ${opts.concurrency}`);
    }
    this.#pollIntervalMs = opts.pollIntervalMs ?? POLL_INTERVAL_MS;
    this.#backoff = opts.backoff ?? BACKOFF;
    this.#onOutcome = opts.onOutcome;
  }

  /** The queue (for the task's progress and `/healthz`). */
  get queue(): AsyncMethods<BackfillQueue> {
    return this.#queue;
  }

  /** The source repositories come from. */
  get source(): RepoSource {
    return this.#source;
  }

  /** What the local stream hands the worker: restores and `#sync` frames. */
  streamHooks(): LocalStreamHooks {
    return {
      restored: (restore) => void this.hostRestored(restore),
      // Queued now (durable before the frame's cursor moves), worked on a later turn: the frame
      // is accepted before the batch holding the commits before it is applied, and a row whose
      // rev the index then holds is done without a fetch (a new account's #sync).
      sync: async (did, rev) => {
        if (await this.#ctx.store.writer.storedRev(did) === rev) return;
        await this.#queue.enqueue(did, "sync", rev, this.#ctx.now().toISOString());
        this.#wakeSoon();
      },
    };
  }

  /** Listens for gaps and reads the queue now and every poll interval. */
  start(): void {
    if (this.#started) throw new Error("Backfiller already started");
    this.#started = true;
    this.#ctx.store.writer.listenForGaps(() => this.#wakeSoon());
    this.#timer = setInterval(() => void this.wake(), this.#pollIntervalMs);
    void this.wake();
  }

  /** Queues `did` (reason, and the rev that prompted it when known) and reads the queue. */
  async request(
    did: string,
    reason: BackfillReason,
    targetRev: string | null = null,
  ): Promise<void> {
    await this.#queue.enqueue(did, reason, targetRev, this.#ctx.now().toISOString());
    if (this.#started) await this.wake();
  }

  #wakeSoon(): void {
    if (!this.#started || this.#closed) return;
    this.#soon ??= setTimeout(() => {
      this.#soon = null;
      void this.wake();
    }, 0);
  }

  /**
   * Starts the due rows, up to the concurrency bound (never two of one DID). One queue read at a
   * time: a wake during a read reads again after it. Resolves once the rows found are started.
   */
  wake(): Promise<void> {
    if (this.#closed) return Promise.resolve();
    if (this.#waking !== null) {
      this.#wakeAgain = true;
      return this.#waking;
    }
    this.#waking = (async () => {
      do {
        this.#wakeAgain = false;
        await this.#startDue();
      } while (this.#wakeAgain && !this.#closed);
    })().finally(() => {
      this.#waking = null;
    });
    return this.#waking;
  }

  async #startDue(): Promise<void> {
    for (;;) {
      const free = this.#concurrency - this.#inFlight.size;
      if (free <= 0) return;
      const finished = this.#finished;
      let rows: QueuedRepo[];
      try {
        rows = await this.#queue.due(this.#ctx.now().toISOString(), free + this.#inFlight.size);
      } catch (e) {
        this.#log.warn("Cannot read the backfill queue", { error: e });
        return;
      }
      if (this.#closed) return;
      // A run that ended during the read may have taken its row off the queue: read again.
      if (finished !== this.#finished) continue;
      for (const row of rows) {
        if (this.#inFlight.size >= this.#concurrency) break;
        if (this.#inFlight.has(row.did)) continue;
        const run = this.#runQueued(row).finally(() => {
          this.#inFlight.delete(row.did);
          this.#finished++;
          void this.wake();
        });
        this.#inFlight.set(row.did, run);
      }
      return;
    }
  }

  /** Repositories in flight now. */
  get running(): number {
    return this.#inFlight.size;
  }

  /**
   * The account host's head (`head`, null when unknown) is behind the index's stream cursor: it
   * was restored from an older backup. Records it (`/healthz`), then compares the index with the
   * host's listing and queues what differs ({@link compareWithHost}); a listing that fails is
   * tried again after the backoff. Another call while one runs joins it.
   */
  async hostRestored(restore: { cursor: number; head: number | null }): Promise<void> {
    try {
      await this.#state.recordRestore(BACKFILL_LOCAL, {
        ...restore,
        at: this.#ctx.now().toISOString(),
      });
    } catch (e) {
      this.#log.error("Cannot record the account host's restore", { error: e });
    }
    return this.reconcileHost();
  }

  /** Compares the index with the host's listing (rule 10), retrying until it succeeds. */
  reconcileHost(attempt = 0): Promise<void> {
    this.#reconcile ??= (async () => {
      try {
        const found: HostComparison = await compareWithHost(this.#ctx, this.#source, {
          all: false,
          reason: "restore",
          signal: this.#abort.signal,
        });
        this.#log.info("Compared the index with the account host's repositories", { ...found });
        void this.wake();
      } catch (e) {
        if (this.#closed) return;
        const delay = Math.min(this.#backoff.maxMs, this.#backoff.initialMs * 2 ** attempt);
        this.#log.warn("Cannot list the account host's repositories; retrying later", {
          error: e instanceof Error ? e.message : String(e),
          retryInMs: delay,
        });
        this.#reconcileTimer = setTimeout(() => {
          this.#reconcileTimer = null;
          void this.reconcileHost(attempt + 1);
        }, delay);
      } finally {
        this.#reconcile = null;
      }
    })();
    return this.#reconcile;
  }

  /** Stops: no new work; fetches in flight are aborted and awaited. */
  async close(): Promise<void> {
    this.#closed = true;
    if (this.#timer !== null) clearInterval(this.#timer);
    if (this.#reconcileTimer !== null) clearTimeout(this.#reconcileTimer);
    if (this.#soon !== null) clearTimeout(this.#soon);
    this.#soon = null;
    this.#timer = this.#reconcileTimer = null;
    if (this.#started) this.#ctx.store.writer.listenForGaps(undefined);
    this.#abort.abort(new Error("Backfill worker closed"));
    await this.#waking;
    await this.#reconcile;
    await Promise.allSettled([...this.#inFlight.values()]);
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  async #runQueued(row: QueuedRepo): Promise<void> {
    const now = () => this.#ctx.now().toISOString();
    try {
      if (
        row.targetRev !== null &&
        await this.#ctx.store.writer.storedRev(row.did) === row.targetRev
      ) {
        await this.#queue.done(row);
        this.#onOutcome?.(row.did, { kind: "current" });
        return;
      }
      const outcome = await this.backfill(row.did, { reason: row.reason });
      this.#onOutcome?.(row.did, outcome);
      if (outcome.kind === "stale") {
        await this.#queue.failed(
          row.did,
          "Snapshot older than what the stream applied meanwhile",
          at(this.#ctx, STALE_RETRY_MS),
        );
        return;
      }
      await this.#queue.done(row);
    } catch (e) {
      if (this.#closed) return;
      const message = e instanceof Error ? e.message : String(e);
      this.#onOutcome?.(row.did, e instanceof Error ? e : new Error(message));
      const delay = Math.min(this.#backoff.maxMs, this.#backoff.initialMs * 2 ** row.attempts);
      this.#log.warn("Backfill failed; retrying later", {
        did: row.did,
        reason: row.reason,
        attempts: row.attempts + 1,
        retryInMs: delay,
        error: message,
      });
      try {
        await this.#queue.failed(row.did, message, at(this.#ctx, delay));
        await this.#state.recordBackfillOutcome(BACKFILL_LOCAL, {
          did: row.did,
          at: now(),
          error: message,
        });
      } catch (inner) {
        this.#log.error("Cannot record a failed backfill", { error: inner });
      }
    }
  }

  /**
   * Fetches, verifies and applies the repository of `did` now (module notes, steps 2-4).
   *
   * @throws {RepoFetchError} when it cannot be fetched or does not verify (nothing applied)
   */
  async backfill(
    did: string,
    opts: { reason?: BackfillReason; signal?: AbortSignal } = {},
  ): Promise<BackfillOutcome> {
    const signal = opts.signal === undefined
      ? this.#abort.signal
      : AbortSignal.any([opts.signal, this.#abort.signal]);
    const writer = this.#ctx.store.writer;
    const expectedRev = await writer.storedRev(did);
    let location;
    let car;
    try {
      location = await this.#source.locate(did, signal);
      car = await this.#source.fetchRepo(location, signal);
    } catch (e) {
      if (!(e instanceof RepoFetchError)) throw e;
      if (e.kind === "inactive") {
        const status = e.status ?? "deactivated";
        await writer.applyOps([{ kind: "account_status", did, active: false, status }]);
        this.#log.info("Backfill: account is inactive on its host", { did, status });
        return { kind: "inactive", status };
      }
      if (e.kind !== "gone") throw e;
      if (!(await this.#state.isLocalRepo(did))) {
        this.#log.info("Backfill: the account host does not have the repository", { did });
        return { kind: "gone" };
      }
      // The index holds it as the account host's, and the host no longer has it (deleted, or a
      // backup from before it existed was restored): it goes as a deleted account does.
      await writer.applyOps([
        { kind: "account_status", did, active: false, status: DELETED_STATUS },
      ]);
      this.#log.info("Backfill: removed an account its host no longer has", { did });
      return { kind: "removed" };
    }
    const repo = await verifyRepo(car, location, { maxBytes: this.#source.maxRepoBytes });
    car = undefined; // the records hold what is needed
    const facts: IndexOp[] = [];
    if (location.handle !== null) {
      facts.push({ kind: "handle", did, handle: location.handle, authoritative: location.local });
    }
    facts.push({ kind: "account", did }, {
      kind: "account_status",
      did,
      active: true,
      status: null,
    });
    const result = await writer.applySnapshot({
      did,
      rev: repo.rev,
      expectedRev,
      facts,
      records: repo.records,
    });
    if (result.stale) {
      this.#log.info("Backfill: snapshot is older than what the stream applied; retrying", {
        did,
        rev: repo.rev,
      });
      return { kind: "stale" };
    }
    const applied = Math.max(0, result.applied - facts.length);
    this.#log.info("Backfill applied", {
      did,
      reason: opts.reason,
      rev: repo.rev,
      previousRev: result.previousRev,
      records: repo.records.length,
      changed: applied,
      skipped: result.skipped,
      otherRecords: repo.otherRecords,
    });
    await this.#state.recordBackfillOutcome(BACKFILL_LOCAL, {
      did,
      at: this.#ctx.now().toISOString(),
      records: repo.records.length,
    });
    return {
      kind: "applied",
      rev: repo.rev,
      records: repo.records.length,
      applied,
      previousRev: result.previousRev,
    };
  }
}

function at(ctx: AppviewContext, delayMs: number): string {
  return new Date(ctx.now().getTime() + delayMs).toISOString();
}

/** The configured account host as the source of repositories (`AppviewConfig.backfill`). */
export function createRepoSource(config: AppviewConfig): RepoSource {
  return new RepoSource({
    pdsUrl: config.pdsUrl,
    pdsPublicUrl: config.webPdsUrl,
    allowPrivate: config.allowPrivateFetch,
    maxRepoBytes: config.backfill.maxRepoBytes,
    timeoutMs: config.backfill.timeoutMs,
  });
}
