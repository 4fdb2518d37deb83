/**
 * Background WAL checkpoints of an SQLite file in WAL mode: the index database (`node:sqlite`)
 * and the account host's Deno KV file (Deno KV keeps its data in SQLite).
 *
 * SQLite copies the WAL back into the database inside the COMMIT that takes the WAL past its
 * `wal_autocheckpoint` pages, on the writing thread. For the index that thread applies the ops
 * and, in the index process, serves HTTP; for Deno KV it is KV's one writer thread, so the group
 * of commits queued behind it (behaviour 6.1: one seq order, one writer) waits too (at 1,000
 * createRecord/s that was a 12-15 ms commit about every 60 ms). Copying hundreds of pages and
 * syncing the file holds the writer for that long.
 *
 * A worker thread with its own connection runs passive checkpoints on its own timer instead (a
 * passive checkpoint never blocks the writer or the readers), so the WAL is copied back while the
 * writer goes on; the checkpoint inside a commit then finds the pages already copied back. The
 * automatic checkpoint stays as the backstop when the worker falls behind or is gone.
 *
 * @module
 */

import type { Logger } from "../shared/log.ts";
import type { CheckpointRequest, CheckpointResult } from "./wal_checkpoint_worker.ts";

export type { CheckpointResult } from "./wal_checkpoint_worker.ts";

/**
 * Default interval between background checkpoints (ms), the index database's. Short, so that the
 * writer's own checkpoint (`WAL_AUTOCHECKPOINT_PAGES` in `appview/db/open.ts`, which makes the
 * WAL restart from its beginning) finds little left to copy, and the writer's pauses often find
 * the WAL fully copied back, which also restarts it. At 1 s the WAL grew to 170 MiB over 100k
 * stream frames and COMMIT slowed with it (from about 7 to 30 µs per page, in the kernel,
 * appending to new file pages). Stream benchmark, 4 interleaved rounds: 21,700 against 19,600
 * ops/s overall, 21,600 against 18,000 sustained. While nothing commits, the worker skips the
 * checkpoint and stays silent (`wal_checkpoint_worker.ts`).
 */
export const CHECKPOINT_INTERVAL_MS = 100;

/**
 * The options for a Deno KV file. Every 25 ms: several checkpoints per 1,000 WAL pages (Deno KV's
 * automatic checkpoint) at 2,000 commits/s (about 45 pages per group commit); a checkpoint that
 * finds nothing to copy costs microseconds. The WAL still grows to 1,000 pages (KV's writer
 * rarely starts a transaction at the moment the WAL is fully copied, which is when SQLite
 * restarts it), but the checkpoint inside that commit has little left to do. Timed results stay
 * in the worker: the main thread hears only of requested checkpoints and failures.
 */
export const KV_CHECKPOINTS = { name: "KV", intervalMs: 25, reportTimed: false } as const;

/** Options of {@link WalCheckpointer}. */
export interface WalCheckpointerOptions {
  log: Logger;
  /** Interval between timed checkpoints (ms). Default {@link CHECKPOINT_INTERVAL_MS}. */
  intervalMs?: number;
  /**
   * What is checkpointed, in messages: `"KV"` makes "KV checkpoint worker failed; ...". Default
   * none: "Checkpoint worker failed; ...".
   */
  name?: string;
  /**
   * Whether every timed checkpoint's result reaches the main thread (counted in
   * {@link WalCheckpointer.checkpoints}, logged at debug when it copied frames). Default true;
   * false: only requested checkpoints and failures are posted.
   */
  reportTimed?: boolean;
}

type WorkerMessage =
  | { ready: true }
  | { fatal: string }
  | { done: CheckpointResult; id?: number }
  | { error: string; id?: number }
  | { stopped: true };

/** How long {@link WalCheckpointer.stop} waits for the worker to close its connection (ms). */
const STOP_TIMEOUT_MS = 5_000;

/** Runs passive checkpoints of one SQLite file from a worker thread. */
export class WalCheckpointer {
  readonly #path: string;
  readonly #log: Logger;
  readonly #intervalMs: number;
  readonly #reportTimed: boolean;
  /** The name option, for messages. */
  readonly #name: string | undefined;
  #worker: Worker | null = null;
  #nextId = 0;
  readonly #waiters = new Map<number, (r: CheckpointResult | null) => void>();
  #checkpoints = 0;
  #stopped: (() => void) | null = null;

  constructor(path: string, opts: WalCheckpointerOptions) {
    this.#name = opts.name;
    const intervalMs = opts.intervalMs ?? CHECKPOINT_INTERVAL_MS;
    if (!Number.isInteger(intervalMs) || intervalMs < 1) {
      throw new RangeError(
        `${this.#noun(true)} interval must be a positive integer (ms): ${intervalMs}`,
      );
    }
    this.#path = path;
    this.#log = opts.log;
    this.#intervalMs = intervalMs;
    this.#reportTimed = opts.reportTimed ?? true;
  }

  /** Checkpoints completed so far (the results the main thread has received). */
  get checkpoints(): number {
    return this.#checkpoints;
  }

  /** Whether the worker is still running. */
  get running(): boolean {
    return this.#worker !== null;
  }

  /** Starts the worker; false (logged) when it cannot start. */
  start(): boolean {
    if (this.#worker !== null) return true;
    try {
      const worker = new Worker(new URL("./wal_checkpoint_worker.ts", import.meta.url), {
        type: "module",
      });
      worker.onmessage = (event: MessageEvent<WorkerMessage>) => this.#onMessage(event.data);
      worker.onerror = (event: ErrorEvent) => {
        event.preventDefault();
        this.#fail(event.message);
      };
      const open: CheckpointRequest = {
        path: this.#path,
        intervalMs: this.#intervalMs,
        reportTimed: this.#reportTimed,
      };
      worker.postMessage(open);
      this.#worker = worker;
      return true;
    } catch (e) {
      this.#log.warn(
        `Cannot start the ${this.#noun(false)} worker; SQLite checkpoints inline`,
        { error: e },
      );
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
   * the writer's own close, which comes after, is the last connection and removes the WAL. A
   * worker that does not answer within {@link STOP_TIMEOUT_MS} is terminated.
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
      this.#log.warn(`${this.#name ?? "Background"} checkpoint failed`, { error: msg.error });
      waiter?.(null);
    }
  }

  #fail(message: string): void {
    this.#log.warn(`${this.#noun(true)} worker failed; SQLite checkpoints inline`, {
      error: message,
    });
    this.#worker?.terminate();
    this.#worker = null;
    this.#settleAll();
  }

  /** "KV checkpoint", or "Checkpoint" (sentence start) and "checkpoint" without a name. */
  #noun(start: boolean): string {
    if (this.#name) return `${this.#name} checkpoint`;
    return start ? "Checkpoint" : "checkpoint";
  }

  #settleAll(): void {
    for (const w of this.#waiters.values()) w(null);
    this.#waiters.clear();
  }
}

/**
 * Starts a {@link WalCheckpointer} of the file at `path`; null for a path that is not a local
 * file (`:memory:` and a remote KV Connect URL have no WAL to copy), or (logged) when the worker
 * cannot start: SQLite then checkpoints inside the writer's commits as usual.
 */
export function startWalCheckpointer(
  path: string,
  opts: WalCheckpointerOptions,
): WalCheckpointer | null {
  if (path === ":memory:" || /^https?:\/\//.test(path)) return null;
  const checkpointer = new WalCheckpointer(path, opts);
  return checkpointer.start() ? checkpointer : null;
}
