// The bound on concurrent repository exports (spec 4.1: the account host serves getRepo to
// anyone; limits are enforced on the server).
import assert from "node:assert/strict";
import { ConcurrencyGate, GateFullError } from "./concurrency_gate.ts";

/** A promise and the function that settles it. */
function held(): { promise: Promise<void>; release: () => void } {
  let release!: () => void;
  const promise = new Promise<void>((r) => release = r);
  return { promise, release };
}

Deno.test("ConcurrencyGate runs at most `running` tasks, queues `waiting`, refuses the rest", async () => {
  const gate = new ConcurrencyGate({ running: 2, waiting: 3 });
  const holds = Array.from({ length: 5 }, held);
  let concurrent = 0;
  let most = 0;
  const started: number[] = [];
  const tasks = holds.map((h, i) =>
    gate.run(async () => {
      started.push(i);
      most = Math.max(most, ++concurrent);
      await h.promise;
      concurrent--;
      return i * 10;
    })
  );
  await Promise.resolve();
  assert.deepEqual(started, [0, 1]);
  assert.equal(gate.active, 2);
  assert.equal(gate.queued, 3);
  await assert.rejects(gate.run(() => Promise.resolve(0)), {
    name: "GateFullError",
    message: "2 running and 3 waiting (the most allowed)",
  });

  holds[1].release();
  await tasks[1];
  await new Promise((r) => setTimeout(r, 0));
  assert.deepEqual(started, [0, 1, 2], "the first waiting task takes the freed place");
  assert.equal(gate.active, 2);
  assert.equal(gate.queued, 2);
  for (const h of holds) h.release();
  assert.deepEqual(await Promise.all(tasks), [0, 10, 20, 30, 40]);
  assert.deepEqual(started, [0, 1, 2, 3, 4]);
  assert.equal(most, 2);
  assert.equal(gate.active, 0);
  assert.equal(gate.queued, 0);
});

Deno.test("ConcurrencyGate frees the place of a task that throws", async () => {
  const gate = new ConcurrencyGate({ running: 1, waiting: 0 });
  await assert.rejects(gate.run(() => Promise.reject(new Error("boom"))), { message: "boom" });
  assert.equal(gate.active, 0);
  assert.equal(await gate.run(() => Promise.resolve("next")), "next");
  assert.ok(new GateFullError("x") instanceof Error);
  assert.throws(() => new ConcurrencyGate({ running: 0, waiting: 1 }), {
    name: "RangeError",
    message: "Invalid gate: 0 running, 1 waiting",
  });
});
