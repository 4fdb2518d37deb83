/**
 * Background WAL checkpoints for the account host's Deno KV file.
 *
 * Deno KV keeps its data in SQLite in WAL mode, and SQLite copies the WAL back into the
 * database inside the commit that takes the WAL past 1,000 pages: on KV's one writer thread,
 * so that commit, and the group of commits queued behind it (spec 6.1: one seq order, one
 * writer), waits while hundreds of pages are copied and the file is synced. At 1,000
 * createRecord/s that was a 12-15 ms commit about every 60 ms.
 *
 * A worker thread with its own SQLite connection runs passive checkpoints on its own timer
 * instead. A passive checkpoint never blocks KV's writer or its readers. The WAL still grows to
 * 1,000 pages (KV's writer rarely starts a transaction at the moment the WAL is fully copied,
 * which is when SQLite restarts it), but the checkpoint inside that commit then finds the pages
 * already copied back, and has little left to do. SQLite's own checkpoint also remains the
 * backstop when the worker falls behind or is gone.
 *
 * Only for a local KV file; `:memory:` and remote KV have no WAL to copy.
 *
 * @module
 */

import type { Logger } from "../../shared/log.ts";
import type { KvCheckpointRequest, KvCheckpointResult } from "./kv_checkpoint_worker.ts";

export type { KvCheckpointResult } from "./kv_checkpoint_worker.ts";

/**
 * Interval between background checkpoints (ms): several per 1,000 WAL pages at 2,000 commits/s
 * (about 45 pages per group commit). A checkpoint that finds nothing to copy costs microseconds.
 */
export const KV_CHECKPOINT_INTERVAL_MS = 25;

/** How long {@link KvCheckpointer.stop} waits for the worker to close its connection (ms). */
const STOP_TIMEOUT_MS = 5_000;

type WorkerMessage =
  | { ready: true }
  | { fatal: string }
  | { done: KvCheckpointResult; id: number }
  | { error: string; id?: number }
  | { stopped: true };

/** Runs passive checkpoints of one Deno KV file from a worker thread. */
export class KvCheckpointer {
  readonly #log: Logger;
  #worker: Worker | null;
  #nextId = 0;
  readonly #waiters = new Map<number, (r: KvCheckpointResult | null) => void>();
  #stopped: (() => void) | null = null;

  private constructor(worker: Worker, log: Logger) {
    this.#worker = worker;
    this.#log = log;
  }

  /**
   * Starts checkpointing the KV file at `path`; null for a path that is not a local file, or
   * (logged) when the worker cannot start: SQLite then checkpoints inside KV's commits as usual.
   */
  static start(
    path: string,
    opts: { log: Logger; intervalMs?: number },
  ): KvCheckpointer | null {
    if (path === ":memory:" || /^https?:\/\//.test(path)) return null;
    const intervalMs = opts.intervalMs ?? KV_CHECKPOINT_INTERVAL_MS;
    if (!Number.isInteger(intervalMs) || intervalMs < 1) {
      throw new RangeError(`KV checkpoint interval must be a positive integer (ms): ${intervalMs}`);
    }
    let worker: Worker;
    try {
      worker = new Worker(new URL("./kv_checkpoint_worker.ts", import.meta.url), {
        type: "module",
      });
    } catch (err) {
      opts.log.warn("Cannot start the KV checkpoint worker; SQLite checkpoints inline", {
        error: err,
      });
      return null;
    }
    const checkpointer = new KvCheckpointer(worker, opts.log);
    worker.onmessage = (event: MessageEvent<WorkerMessage>) => checkpointer.#onMessage(event.data);
    worker.onerror = (event: ErrorEvent) => {
      event.preventDefault();
      checkpointer.#fail(event.message);
    };
    const open: KvCheckpointRequest = { path, intervalMs };
    worker.postMessage(open);
    return checkpointer;
  }

  /** Whether the worker is still running. */
  get running(): boolean {
    return this.#worker !== null;
  }

  /**
   * Runs a checkpoint now (after the worker's current one); resolves with its result, or null
   * when the worker is gone or the checkpoint failed.
   */
  checkpoint(): Promise<KvCheckpointResult | null> {
    if (this.#worker === null) return Promise.resolve(null);
    const id = this.#nextId++;
    const run: KvCheckpointRequest = { run: id };
    this.#worker.postMessage(run);
    return new Promise((resolve) => this.#waiters.set(id, resolve));
  }

  /**
   * Stops the worker once it has closed its connection, so that KV's own close, which comes
   * after, is the last connection and removes the WAL. A worker that does not answer within
   * {@link STOP_TIMEOUT_MS} is terminated.
   */
  async stop(): Promise<void> {
    const worker = this.#worker;
    if (worker === null) return;
    this.#worker = null;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const closed = new Promise<void>((r) => (this.#stopped = r));
    const stop: KvCheckpointRequest = { stop: true };
    worker.postMessage(stop);
    await Promise.race([
      closed,
      new Promise<void>((r) => (timer = setTimeout(r, STOP_TIMEOUT_MS))),
    ]);
    clearTimeout(timer);
    worker.terminate();
    this.#settleAll();
  }

  #onMessage(msg: WorkerMessage): void {
    if ("ready" in msg) return;
    if ("stopped" in msg) {
      this.#stopped?.();
      return;
    }
    if ("fatal" in msg) {
      this.#fail(msg.fatal);
      return;
    }
    const waiter = msg.id === undefined ? undefined : this.#waiters.get(msg.id);
    if (msg.id !== undefined) this.#waiters.delete(msg.id);
    if ("done" in msg) {
      waiter?.(msg.done);
      return;
    }
    this.#log.warn("KV checkpoint failed", { error: msg.error });
    waiter?.(null);
  }

  #fail(message: string): void {
    this.#log.warn("KV checkpoint worker failed; SQLite checkpoints inline", { error: message });
    this.#worker?.terminate();
    this.#worker = null;
    this.#settleAll();
  }

  #settleAll(): void {
    for (const w of this.#waiters.values()) w(null);
    this.#waiters.clear();
  }
}
