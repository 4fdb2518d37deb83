/**
 * Commit signing. Where the process may load the system's OpenSSL (`native_sign.ts`), every
 * signature is made there, inline: ~40 µs of native code. Otherwise a signature (P-256,
 * `@noble/curves`) costs ~0.3 ms of JavaScript, the largest single cost of a commit, so under
 * concurrent load the signatures are computed by one process-wide worker thread, while the main
 * thread builds the next commits. Without concurrency (one commit at a time) signing stays
 * inline: no worker is started and a signature costs no thread hop.
 *
 * Jobs and signatures travel through a ring of slots in a `SharedArrayBuffer`, with two
 * counters and `Atomics` wake-ups, not through `postMessage`: on the 2-core bench machine a
 * message round trip to a worker cost ~100 µs of CPU (structured clone, the message port, the
 * wake-ups), a third of the signature it carried; the shared ring costs a few µs.
 *
 * - `submitted` (written by the main thread): jobs written so far; the worker sleeps in
 *   `Atomics.wait` while it equals the jobs it has done;
 * - `done` (written by the worker after each signature): the main thread waits for it with
 *   `Atomics.waitAsync`, so the event loop keeps serving requests meanwhile.
 *
 * Both counters are int32 and wrap; slots are indexed by `counter & (SLOTS - 1)`, and a slot is
 * reused only after its signature was read. The worker is unref'd, so it never keeps a process
 * alive; if it cannot start or fails, signing falls back to the main thread.
 *
 * @module
 */

import { Worker } from "node:worker_threads";
import { useNativeSha256 } from "../../shared/cid.ts";
import { signCompact } from "../../shared/keys.ts";
import { NativeP256Signer } from "./native_sign.ts";

/** Slots of the ring (a power of two). */
export const SIGN_SLOTS = 128;
/** Longest unsigned commit the ring carries (~150 bytes with a did:plc); longer ones sign inline. */
export const SIGN_MAX_MESSAGE = 1024;
/** Slot layout: key, u16 message length, message, signature, status (0 ok, 1 failed). */
export const SLOT_KEY = 0;
export const SLOT_LENGTH = 32;
export const SLOT_MESSAGE = 34;
export const SLOT_SIG = SLOT_MESSAGE + SIGN_MAX_MESSAGE;
export const SLOT_STATUS = SLOT_SIG + 64;
export const SLOT_BYTES = 1152;
/** Int32 indexes of the control words at the start of the shared buffer. */
export const CTL_SUBMITTED = 0;
export const CTL_DONE = 1;
export const CTL_READY = 2;
/** Bytes of the control words before the slots. */
export const CTL_BYTES = 16;

/** How long the main thread sleeps on `done` before looking at the worker's state again. */
const WAIT_MS = 1_000;

interface Job {
  key: Uint8Array;
  message: Uint8Array;
  resolve: (sig: Uint8Array) => void;
  reject: (err: unknown) => void;
}

/** Signs commits, in a worker thread when there is concurrent work to overlap with. */
export class CommitSigner {
  readonly #workerUrl: URL;
  #worker: Worker | null = null;
  #failed = false;
  #ctl: Int32Array | null = null;
  #slots: Uint8Array | null = null;
  /** Jobs not yet in the ring (the ring was full). */
  #queue: Job[] = [];
  /** Jobs in the ring, oldest first; the first one is at counter `#done`. */
  #inflight: Job[] = [];
  #submitted = 0;
  #done = 0;
  #watching = false;

  readonly #start0: number;
  readonly #native: NativeP256Signer | null;

  /**
   * `native`: OpenSSL signing (`native_sign.ts`), used for every signature when given (inline:
   * ~40 µs, no worker); the worker and noble sign whatever it fails on. The other options are for
   * tests: `workerUrl` (a worker that fails; default `sign_worker.ts`) and `startCounter` (the
   * counters' first value, to cross the int32 wrap).
   */
  constructor(
    opts: { native?: NativeP256Signer | null; workerUrl?: URL; startCounter?: number } = {},
  ) {
    this.#native = opts.native ?? null;
    this.#workerUrl = opts.workerUrl ?? new URL("./sign_worker.ts", import.meta.url);
    this.#start0 = opts.startCounter ?? 0;
    this.#submitted = this.#done = this.#start0 | 0;
  }

  /** The OpenSSL library signing here; null when noble signs. */
  get nativePath(): string | null {
    return this.#native?.path ?? null;
  }

  /**
   * Returns the 64-byte compact low-S signature of `message`. `concurrent` tells whether other
   * commits are being prepared at the same time (only then is the worker worth its hop).
   */
  sign(
    key: Uint8Array,
    message: Uint8Array,
    concurrent: boolean,
  ): Uint8Array | Promise<Uint8Array> {
    if (this.#native !== null) {
      try {
        return this.#native.sign(key, message);
      } catch {
        // OpenSSL refused this key or failed: noble signs it below.
      }
    }
    if (this.#failed || (!concurrent && this.#inflight.length === 0)) {
      return signCompact(key, message);
    }
    if (this.#worker === null) this.#start();
    if (
      this.#ctl === null || Atomics.load(this.#ctl, CTL_READY) !== 1 || key.length !== 32 ||
      message.length > SIGN_MAX_MESSAGE
    ) {
      return signCompact(key, message);
    }
    return new Promise((resolve, reject) => {
      this.#queue.push({ key, message, resolve, reject });
      this.#submit();
    });
  }

  /** Whether the worker is up and has not failed (for tests). */
  get usingWorker(): boolean {
    return !this.#failed && this.#ctl !== null && Atomics.load(this.#ctl, CTL_READY) === 1;
  }

  #start(): void {
    try {
      const sab = new SharedArrayBuffer(CTL_BYTES + SIGN_SLOTS * SLOT_BYTES);
      this.#ctl = new Int32Array(sab, 0, CTL_BYTES / 4);
      this.#slots = new Uint8Array(sab, CTL_BYTES);
      this.#ctl[CTL_SUBMITTED] = this.#ctl[CTL_DONE] = this.#start0 | 0;
      const worker = new Worker(this.#workerUrl, { workerData: { sab } });
      worker.unref();
      const fail = () => this.#fail();
      worker.on("error", fail);
      worker.on("exit", fail);
      this.#worker = worker;
    } catch {
      this.#failed = true;
    }
  }

  /** Moves queued jobs into free slots and wakes the worker. */
  #submit(): void {
    const ctl = this.#ctl!;
    const slots = this.#slots!;
    let n = 0;
    while (this.#queue.length > 0 && this.#inflight.length < SIGN_SLOTS) {
      const job = this.#queue.shift()!;
      const off = (this.#submitted & (SIGN_SLOTS - 1)) * SLOT_BYTES;
      slots.set(job.key, off + SLOT_KEY);
      slots[off + SLOT_LENGTH] = job.message.length >> 8;
      slots[off + SLOT_LENGTH + 1] = job.message.length & 0xff;
      slots.set(job.message, off + SLOT_MESSAGE);
      this.#inflight.push(job);
      this.#submitted = (this.#submitted + 1) | 0;
      n++;
    }
    if (n > 0) {
      Atomics.store(ctl, CTL_SUBMITTED, this.#submitted);
      Atomics.notify(ctl, CTL_SUBMITTED);
    }
    if (!this.#watching && this.#inflight.length > 0) void this.#watch();
  }

  /** Collects signatures as the worker finishes them, until nothing is in flight. */
  async #watch(): Promise<void> {
    this.#watching = true;
    const ctl = this.#ctl!;
    // A pending `waitAsync` does not keep Deno's event loop alive; the ref'd worker does.
    this.#worker?.ref();
    try {
      while (this.#inflight.length > 0 && !this.#failed) {
        const done = Atomics.load(ctl, CTL_DONE);
        if (done !== this.#done) {
          this.#collect(done);
          continue;
        }
        const wait = Atomics.waitAsync(ctl, CTL_DONE, done, WAIT_MS);
        if (wait.async) await wait.value;
      }
    } finally {
      this.#watching = false;
      this.#worker?.unref();
    }
  }

  #collect(done: number): void {
    const slots = this.#slots!;
    while (this.#done !== done) {
      const off = (this.#done & (SIGN_SLOTS - 1)) * SLOT_BYTES;
      const job = this.#inflight.shift()!;
      this.#done = (this.#done + 1) | 0;
      if (slots[off + SLOT_STATUS] === 0) {
        job.resolve(slots.slice(off + SLOT_SIG, off + SLOT_SIG + 64));
      } else {
        signInline(job);
      }
    }
    if (this.#queue.length > 0) this.#submit();
  }

  /** Stops the worker (tests); later signatures are computed inline. */
  async close(): Promise<void> {
    const worker = this.#worker;
    this.#fail();
    await worker?.terminate();
  }

  /** The worker is gone: sign everything pending inline from now on. */
  #fail(): void {
    if (this.#failed) return;
    this.#failed = true;
    this.#worker = null;
    const pending = this.#inflight.concat(this.#queue);
    this.#inflight = [];
    this.#queue = [];
    for (const job of pending) signInline(job);
    // Wake the watcher, so it sees the failure now rather than at its next timeout.
    if (this.#ctl !== null) Atomics.notify(this.#ctl, CTL_DONE);
  }
}

function signInline(job: Job): void {
  try {
    job.resolve(signCompact(job.key, job.message));
  } catch (err) {
    job.reject(err);
  }
}

let shared: CommitSigner | null = null;

/**
 * The process-wide signer: OpenSSL when this process may load it (`--allow-ffi` for one of
 * `LIBCRYPTO_PATHS`), else one worker thread running noble for every repository service.
 */
export function commitSigner(): CommitSigner {
  if (shared === null) {
    const native = NativeP256Signer.open();
    // The same library hashes every block's CID (shared/cid.ts); this signer is never closed.
    if (native !== null) useNativeSha256((data, out) => native.sha256Into(data, out));
    shared = new CommitSigner({ native });
  }
  return shared;
}
