// Background jobs (event retention, blob sweep): closing the host stops a run in progress
// rather than waiting for a sweep over the whole store.
import assert from "node:assert/strict";
import { silentLogger } from "../shared/log.ts";
import { PeriodicTask } from "./periodic_task.ts";

Deno.test("PeriodicTask.close tells the run in progress to stop, and waits for it", async () => {
  let started!: () => void;
  const running = new Promise<void>((r) => started = r);
  let sawAbort = false;
  const task = new PeriodicTask({
    intervalMs: 60_000,
    log: silentLogger,
    failure: "test run failed",
    run: async (signal) => {
      started();
      // A long run that checks its signal between steps.
      for (let step = 0; step < 1_000 && !signal.aborted; step++) {
        await new Promise((r) => setTimeout(r, 10));
      }
      sawAbort = signal.aborted;
    },
  });
  task.start();
  await running;
  const closed = task.close().then(() => "closed");
  const late = new Promise((r) => setTimeout(() => r("still running after 2 s"), 2_000));
  const first = await Promise.race([closed, late]);
  assert.equal(first, "closed");
  assert.equal(sawAbort, true);
  await closed;
});

Deno.test("a PeriodicTask started again after close runs with a live signal", async () => {
  const seen: boolean[] = [];
  const task = new PeriodicTask({
    intervalMs: 60_000,
    log: silentLogger,
    failure: "test run failed",
    run: (signal) => {
      seen.push(signal.aborted);
      return Promise.resolve();
    },
  });
  task.start();
  await task.close();
  task.start();
  await task.close();
  assert.deepEqual(seen, [false, false]);
});
