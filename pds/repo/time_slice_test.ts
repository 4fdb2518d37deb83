import assert from "node:assert/strict";
import { generateP256KeyPair } from "../../shared/keys.ts";
import { silentLogger } from "../../shared/log.ts";
import { COLLECTION_POST } from "../../shared/nsid.ts";
import { makeTempDir } from "../../runtime/_test_helpers.ts";
import { exportRepoCar } from "./reader.ts";
import { storeParts } from "../_test_helpers.ts";
import { RepoService } from "./repository.ts";
import { BACKGROUND_PACE, SLICE_MS, TimeSlicer, timeSlicing } from "./time_slice.ts";

Deno.test("TimeSlicer reads the clock every 8 steps and is due once the slice has passed", () => {
  const spent = new TimeSlicer({ sliceMs: 0, restMs: 0 });
  const answers = Array.from({ length: 16 }, () => spent.due());
  assert.deepEqual(answers.map((due, i) => due ? i : -1).filter((i) => i >= 0), [7, 15]);
  const long = new TimeSlicer({ sliceMs: 60_000, restMs: 0 });
  assert.equal(Array.from({ length: 1_000 }, () => long.due()).some(Boolean), false);
});

Deno.test("TimeSlicer.next lets due timers run, then starts a new slice", async () => {
  const slicer = new TimeSlicer({ sliceMs: 0, restMs: 0 });
  let ran = false;
  setTimeout(() => ran = true, 0);
  await slicer.next();
  assert.equal(ran, true);
  // A new slice: the step count starts again.
  assert.deepEqual(Array.from({ length: 8 }, () => slicer.due()), [...Array(7).fill(false), true]);
});

Deno.test("TimeSlicer.next rests for the pace's rest: the background pace leaves 2/3 to others", async () => {
  assert.deepEqual(BACKGROUND_PACE, { sliceMs: 4, restMs: 8 });
  assert.ok(BACKGROUND_PACE.restMs >= 2 * BACKGROUND_PACE.sliceMs);
  const slicer = new TimeSlicer({ sliceMs: 0, restMs: 30 });
  let early = false;
  let late = false;
  setTimeout(() => early = true, 5);
  const timer = setTimeout(() => late = true, 200);
  const t0 = performance.now();
  await slicer.next();
  const rested = performance.now() - t0;
  clearTimeout(timer);
  assert.ok(rested >= 29, `rested ${rested.toFixed(1)} ms, not the pace's 30`);
  assert.equal(early, true, "a timer due during the rest ran");
  assert.equal(late, false);
});

Deno.test("TimeSlicer.next throws the pace's abort reason once its signal is aborted", async () => {
  const abort = new AbortController();
  const slicer = new TimeSlicer({ sliceMs: 0, restMs: 0, signal: abort.signal });
  await slicer.next();
  const reason = new Error("stopped");
  abort.abort(reason);
  await assert.rejects(() => slicer.next(), (err) => err === reason);
});

Deno.test("a repository export lets the event loop run between slices", async () => {
  await using dir = await makeTempDir();
  const kv = await Deno.openKv(`${dir.path}/pds.kv`);
  const did = "did:plc:dddddddddddddddddddddddd";
  const key = generateP256KeyPair();
  const repo = new RepoService({
    ...storeParts(kv),
    log: silentLogger,
    now: Date.now,
    signingKey: () => Promise.resolve(key),
  });
  try {
    await repo.applyWrites(
      did,
      Array.from({ length: 100 }, (_, i) => ({
        action: "create" as const,
        collection: COLLECTION_POST,
        record: { text: `post ${i}`, createdAt: "2024-05-01T12:00:00.000Z" },
      })),
    );
    /** Timer turns while an export runs, and its CAR. */
    const exportCounting = async () => {
      let turns = 0;
      const timer = setInterval(() => turns++, 0);
      try {
        const car = await exportRepoCar(repo.blocks, did);
        return { turns, car };
      } finally {
        clearInterval(timer);
      }
    };
    const whole = await exportCounting();
    timeSlicing.ms = 0; // every 8 steps: the 100 records and their nodes take many slices
    let sliced;
    try {
      sliced = await exportCounting();
    } finally {
      timeSlicing.ms = SLICE_MS;
    }
    assert.deepEqual(sliced.car, whole.car);
    // About 20 turns (a slice per 8 blocks or nodes); unsliced, the KV reads alone give ~0.
    assert.ok(sliced.turns >= 10, `only ${sliced.turns} timer turns during the export`);
    assert.ok(sliced.turns > whole.turns, `${sliced.turns} turns sliced, ${whole.turns} not`);
  } finally {
    kv.close();
  }
});
