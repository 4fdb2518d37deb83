/**
 * Worker thread of `CommitSigner` (`signer.ts`): signs batches of commits off the main thread.
 * In: `{id, n, jobs}` where `jobs` (an ArrayBuffer) packs, per job, a 32-byte private key, a u16
 * message length and the message. Out: `{id, sigs}` with the 64-byte signatures back to back (an
 * ArrayBuffer), or `{id, error}`.
 *
 * Both directions carry ArrayBuffers, not Uint8Arrays: Deno's `node:worker_threads` walks every
 * enumerable property of a received message looking for MessagePorts, and a typed array's
 * properties are its elements (a 64-signature batch was 4,096 calls, and the walk deoptimised
 * over and over on the varying shapes).
 *
 * @module
 */

import { parentPort } from "node:worker_threads";
import { signCompact } from "../../shared/keys.ts";

const port = parentPort;
if (port) {
  port.on("message", (batch: { id: number; n: number; jobs: ArrayBuffer }) => {
    try {
      const sigs = new Uint8Array(batch.n * 64);
      const jobs = new Uint8Array(batch.jobs);
      let pos = 0;
      for (let i = 0; i < batch.n; i++) {
        const key = jobs.subarray(pos, pos + 32);
        const len = (jobs[pos + 32] << 8) | jobs[pos + 33];
        pos += 34;
        sigs.set(signCompact(key, jobs.subarray(pos, pos + len)), i * 64);
        pos += len;
      }
      port.postMessage({ id: batch.id, sigs: sigs.buffer }, [sigs.buffer]);
    } catch (err) {
      port.postMessage({ id: batch.id, error: String((err as Error)?.message ?? err) });
    }
  });
  // Warm up the curve tables before announcing readiness.
  signCompact(new Uint8Array(32).fill(1), new Uint8Array(1));
  port.postMessage({ ready: true });
}
