import assert from "node:assert/strict";
import { signCompact, verifyCompact } from "../../shared/keys.ts";
import { p256 } from "@noble/curves/nist.js";
import { CommitSigner, SIGN_MAX_MESSAGE, SIGN_SLOTS } from "./signer.ts";

function keyOf(i: number): Uint8Array {
  return new Uint8Array(32).fill(0x10 + (i % 7)).map((b, j) => (j === 31 ? (b + i) & 0xff : b));
}

function messageOf(i: number): Uint8Array {
  return new TextEncoder().encode(`commit ${i} `.repeat(1 + (i % 9)));
}

/** Starts the signer's worker and waits until it takes jobs. */
async function started(signer: CommitSigner): Promise<void> {
  await signer.sign(keyOf(0), messageOf(0), true);
  const deadline = Date.now() + 10_000;
  while (!signer.usingWorker) {
    if (Date.now() > deadline) throw new Error("the signing worker did not start");
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** Signs `n` jobs concurrently and checks each against the inline signature. */
async function signMany(signer: CommitSigner, n: number): Promise<void> {
  const sigs = await Promise.all(
    Array.from({ length: n }, (_, i) => signer.sign(keyOf(i), messageOf(i), true)),
  );
  for (let i = 0; i < n; i++) {
    assert.deepEqual(sigs[i], signCompact(keyOf(i), messageOf(i)), `signature ${i}`);
  }
}

Deno.test("the signing worker's signatures equal inline ones, more jobs than ring slots (spec 2.3)", async () => {
  const signer = new CommitSigner();
  try {
    await started(signer);
    await signMany(signer, SIGN_SLOTS * 2 + 37);
    assert.ok(signer.usingWorker);
    // One more round after the ring has gone round: slots are reused correctly.
    await signMany(signer, 50);
    const pub = p256.getPublicKey(keyOf(3), false);
    assert.ok(verifyCompact(pub, messageOf(3), await signer.sign(keyOf(3), messageOf(3), true)));
  } finally {
    await signer.close();
  }
});

Deno.test("the signing ring's int32 counters wrap without losing or mixing jobs", async () => {
  const signer = new CommitSigner({ startCounter: 2 ** 31 - 40 });
  try {
    await started(signer);
    await signMany(signer, 200);
    assert.ok(signer.usingWorker);
  } finally {
    await signer.close();
  }
});

Deno.test("a message longer than a ring slot and a bad key are handled inline", async () => {
  const signer = new CommitSigner();
  try {
    await started(signer);
    const long = new Uint8Array(SIGN_MAX_MESSAGE + 1).fill(7);
    assert.deepEqual(await signer.sign(keyOf(1), long, true), signCompact(keyOf(1), long));
    // A zero scalar is not a private key: the worker reports it and the job is rejected with
    // the library's error, while the jobs around it are signed.
    const [before, bad, after] = await Promise.allSettled([
      signer.sign(keyOf(2), messageOf(2), true),
      signer.sign(new Uint8Array(32), messageOf(3), true),
      signer.sign(keyOf(4), messageOf(4), true),
    ]);
    assert.deepEqual(before, { status: "fulfilled", value: signCompact(keyOf(2), messageOf(2)) });
    assert.deepEqual(bad.status, "rejected");
    assert.deepEqual(after, { status: "fulfilled", value: signCompact(keyOf(4), messageOf(4)) });
    assert.ok(signer.usingWorker);
  } finally {
    await signer.close();
  }
});

Deno.test("a signing worker that fails leaves every job signed inline", async () => {
  const dir = await Deno.makeTempDir();
  const broken = `${dir}/broken_worker.ts`;
  // Announces readiness (so jobs go into the ring), then exits without signing.
  await Deno.writeTextFile(
    broken,
    `import { workerData } from "node:worker_threads";
     const ctl = new Int32Array(workerData.sab, 0, 4);
     Atomics.store(ctl, 2, 1);
     Atomics.wait(ctl, 0, Atomics.load(ctl, 0));
     globalThis.close();`,
  );
  const signer = new CommitSigner({ workerUrl: new URL(`file://${broken}`) });
  try {
    const deadline = Date.now() + 10_000;
    assert.deepEqual(
      signer.sign(keyOf(0), messageOf(0), true),
      signCompact(keyOf(0), messageOf(0)),
    );
    while (!signer.usingWorker) {
      if (Date.now() > deadline) throw new Error("the broken worker did not start");
      await new Promise((r) => setTimeout(r, 10));
    }
    await signMany(signer, 20);
    assert.deepEqual(signer.usingWorker, false);
    // Later jobs sign inline straight away.
    assert.deepEqual(
      signer.sign(keyOf(5), messageOf(5), true),
      signCompact(keyOf(5), messageOf(5)),
    );
  } finally {
    await signer.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("without concurrency a signature is computed inline, with no worker", () => {
  const signer = new CommitSigner();
  const sig = signer.sign(keyOf(9), messageOf(9), false);
  assert.ok(sig instanceof Uint8Array);
  assert.deepEqual(sig, signCompact(keyOf(9), messageOf(9)));
  assert.deepEqual(signer.usingWorker, false);
});
