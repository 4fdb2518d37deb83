/**
 * Background WAL checkpoints for the index database. SQLite checkpoints automatically inside
 * the COMMIT that pushes the WAL past `wal_autocheckpoint` pages, on the writing thread: for the
 * index that thread applies the ops and, in the index process, serves HTTP, and copying a large
 * WAL back holds it for hundreds of milliseconds. A worker thread with its own connection runs
 * passive checkpoints on its own timer instead (a passive checkpoint never blocks the writer or
 * the readers), so the WAL is copied back while the main thread keeps writing. The automatic
 * checkpoint stays as the backstop when the worker falls behind or is gone.
 *
 * @module
 */

import type { Logger } from "../../shared/log.ts";
import type { CheckpointRequest } from "./checkpoint_worker.ts";

/**
 * Default interval between background checkpoints (ms). Short, so that the writer's own
 * checkpoint (`WAL_AUTOCHECKPOINT_PAGES` in `open.ts`, which makes the WAL restart from its
 * beginning) finds little left to copy, and the writer's pauses often find the WAL fully copied
 * back, which also restarts it. At 1 s the WAL grew to 170 MiB over 100k stream frames and
 * COMMIT slowed with it (from about 7 to 30 µs per page, in the kernel, appending to new file
 * pages). Stream benchmark, 4 interleaved rounds: 21,700 against 19,600 ops/s overall, 21,600
 * against 18,000 sustained. While nothing commits, the worker skips the checkpoint and stays
 * silent (`checkpoint_worker.ts`).
 */
export const CHECKPOINT_INTERVAL_MS = 100;

/** Outcome of one passive checkpoint (`PRAGMA wal_checkpoint` columns and its duration). */
export interface CheckpointResult {
  busy: number;
  log: number;
  checkpointed: number;
  ms: number;
}

type WorkerMessage =
  | { ready: true }
  | { fatal: string }
  | { done: CheckpointResult; id?: number }
  | { error: string; id?: number }
  | { stopped: true };

/** How long {@link WalCheckpointer.stop} waits for the worker to close its connection (ms). */
const STOP_TIMEOUT_MS = 5_000;

/** Runs passive checkpoints of one database file from a worker thread. */
export class WalCheckpointer {
  readonly #path: string;
  readonly #log: Logger;
  readonly #intervalMs: number;
  #worker: Worker | null = null;
  #nextId = 0;
  readonly #waiters = new Map<number, (r: CheckpointResult | null) => void>();
  #checkpoints = 0;
  #stopped: (() => void) | null = null;

  constructor(path: string, opts: { log: Logger; intervalMs?: number }) {
    const intervalMs = opts.intervalMs ?? CHECKPOINT_INTERVAL_MS;
    if (!Number.isInteger(intervalMs) || intervalMs < 1) {
      throw new RangeError(`Checkpoint interval must be a positive integer (ms): ${intervalMs}`);
    }
    this.#path = path;
    this.#log = opts.log;
    this.#intervalMs = intervalMs;
  }

  /** Checkpoints completed so far (the results the main thread has received). */
  get checkpoints(): number {
    return this.#checkpoints;
  }

  /** Starts the worker; false (logged) when it cannot start. */
  start(): boolean {
    if (this.#worker !== null) return true;
    try {
      const worker = new Worker(new URL("./checkpoint_worker.ts", import.meta.url), {
        type: "module",
      });
      worker.onmessage = (event: MessageEvent<WorkerMessage>) => this.#onMessage(event.data);
      worker.onerror = (event: ErrorEvent) => {
        event.preventDefault();
        this.#fail(event.message);
      };
      const open: CheckpointRequest = { path: this.#path, intervalMs: this.#intervalMs };
      worker.postMessage(open);
      this.#worker = worker;
      return true;
    } catch (e) {
      this.#log.warn("Cannot start the checkpoint worker; SQLite checkpoints inline", {
        error: e,
      });
      return false;
    }
  }

  /**
   * Runs a checkpoint now, after whatever the worker is doing; resolves with its result, or null
   * when the worker is gone or the checkpoint failed.
   */
  checkpoint(): Promise<CheckpointResult | null> {
    if (this.#worker === null) return Promise.resolve(null);
    const id = this.#nextId++;
    const run: CheckpointRequest = { run: id };
    this.#worker.postMessage(run);
    return new Promise((resolve) => this.#waiters.set(id, resolve));
  }

  /**
   * Stops the worker once it has closed its connection (after the checkpoint in progress), so
   * the writer's own close can checkpoint and remove the WAL. A worker that does not answer
   * within {@link STOP_TIMEOUT_MS} is terminated.
   */
  async stop(): Promise<void> {
    const worker = this.#worker;
    if (worker === null) return;
    this.#worker = null;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const closed = new Promise<void>((r) => (this.#stopped = r));
    const stop: CheckpointRequest = { stop: true };
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
      this.#checkpoints++;
      if (msg.done.checkpointed > 0) this.#log.debug("WAL checkpoint", { ...msg.done });
      waiter?.(msg.done);
    } else {
      this.#log.warn("Background checkpoint failed", { error: msg.error });
      waiter?.(null);
    }
  }

  #fail(message: string): void {
    this.#log.warn("Checkpoint worker failed; SQLite checkpoints inline", { error: message });
    this.#worker?.terminate();
    this.#worker = null;
    this.#settleAll();
  }

  #settleAll(): void {
    for (const w of this.#waiters.values()) w(null);
    this.#waiters.clear();
  }
}
