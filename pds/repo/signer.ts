/**
 * Commit signing off the main thread. Signing a commit (P-256, `@noble/curves`) costs ~0.4 ms
 * of JavaScript, the largest single cost of a commit, so under concurrent load the signatures
 * are computed by one process-wide worker thread in batches, while the main thread builds the
 * next commits. Without concurrency (one commit at a time) signing stays inline: no worker is
 * started and a signature costs no thread hop.
 *
 * The worker is unref'd whenever no batch is in flight, so it never keeps a process alive; if
 * it cannot start or fails, signing falls back to the main thread.
 *
 * @module
 */

import { Worker } from "node:worker_threads";
import { signCompact } from "../../shared/keys.ts";

interface Job {
  key: Uint8Array;
  message: Uint8Array;
  resolve: (sig: Uint8Array) => void;
}

/** Most signatures per message to the worker. */
const MAX_BATCH = 64;

/** Signs commits, in a worker thread when there is concurrent work to overlap with. */
export class CommitSigner {
  #worker: Worker | null = null;
  #ready = false;
  #failed = false;
  #queue: Job[] = [];
  readonly #inflight = new Map<number, Job[]>();
  #nextId = 0;

  /**
   * Returns the 64-byte compact low-S signature of `message`. `concurrent` tells whether other
   * commits are being prepared at the same time (only then is the worker worth its hop).
   */
  sign(
    key: Uint8Array,
    message: Uint8Array,
    concurrent: boolean,
  ): Uint8Array | Promise<Uint8Array> {
    if (this.#failed || (!concurrent && this.#inflight.size === 0 && this.#queue.length === 0)) {
      return signCompact(key, message);
    }
    if (!this.#worker) this.#start();
    if (!this.#ready || key.length !== 32 || message.length > 0xffff) {
      return signCompact(key, message);
    }
    return new Promise((resolve) => {
      this.#queue.push({ key, message, resolve });
      if (this.#inflight.size === 0) this.#flush();
    });
  }

  #start(): void {
    try {
      const worker = new Worker(new URL("./sign_worker.ts", import.meta.url));
      worker.unref();
      worker.on("message", (msg: { ready?: true; id?: number; sigs?: ArrayBuffer }) => {
        if (msg.ready) {
          this.#ready = true;
          return;
        }
        const jobs = this.#inflight.get(msg.id!);
        if (!jobs) return;
        this.#inflight.delete(msg.id!);
        // ArrayBuffers both ways (see sign_worker.ts): Deno's node:worker_threads walks every
        // element of a typed array in a message.
        const sigs = msg.sigs instanceof ArrayBuffer ? new Uint8Array(msg.sigs) : null;
        if (sigs !== null && sigs.length === jobs.length * 64) {
          jobs.forEach((j, i) => j.resolve(sigs.subarray(i * 64, i * 64 + 64)));
        } else {
          for (const j of jobs) j.resolve(signCompact(j.key, j.message));
        }
        if (this.#queue.length > 0) this.#flush();
        else if (this.#inflight.size === 0) worker.unref();
      });
      const fail = () => this.#fail();
      worker.on("error", fail);
      worker.on("exit", fail);
      this.#worker = worker;
    } catch {
      this.#failed = true;
    }
  }

  /** Sends the queued jobs (at most {@link MAX_BATCH}) as one batch. */
  #flush(): void {
    const jobs = this.#queue.splice(0, MAX_BATCH);
    const id = this.#nextId++;
    this.#inflight.set(id, jobs);
    const packed = new Uint8Array(jobs.reduce((n, j) => n + 34 + j.message.length, 0));
    let pos = 0;
    for (const j of jobs) {
      packed.set(j.key, pos);
      packed[pos + 32] = j.message.length >> 8;
      packed[pos + 33] = j.message.length & 0xff;
      packed.set(j.message, pos + 34);
      pos += 34 + j.message.length;
    }
    this.#worker!.ref();
    this.#worker!.postMessage({ id, n: jobs.length, jobs: packed.buffer }, [packed.buffer]);
  }

  /** The worker is gone: sign everything pending inline from now on. */
  #fail(): void {
    if (this.#failed) return;
    this.#failed = true;
    this.#worker = null;
    const pending = [...this.#inflight.values()].flat().concat(this.#queue);
    this.#inflight.clear();
    this.#queue = [];
    for (const j of pending) j.resolve(signCompact(j.key, j.message));
  }
}

let shared: CommitSigner | null = null;

/** The process-wide signer (one worker thread for every repository service). */
export function commitSigner(): CommitSigner {
  return shared ??= new CommitSigner();
}
