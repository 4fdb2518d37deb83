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

Deno.test("ConcurrencyGate drops a waiting task whose signal aborts; the next one takes the place", async () => {
  const gate = new ConcurrencyGate({ running: 1, waiting: 2 });
  const first = held();
  const running = gate.run(() => first.promise);
  const gone = new AbortController();
  let abandonedRan = false;
  const abandoned = gate.run(() => {
    abandonedRan = true;
    return Promise.resolve("abandoned");
  }, gone.signal);
  const kept = gate.run(() => Promise.resolve("kept"), new AbortController().signal);
  await Promise.resolve();
  assert.equal(gate.queued, 2);

  gone.abort(new DOMException("The client went away", "AbortError"));
  await assert.rejects(abandoned, { name: "AbortError", message: "The client went away" });
  assert.equal(gate.queued, 1, "the aborted task left the queue at once");
  // Its freed waiting place can be taken again.
  const late = gate.run(() => Promise.resolve("late"));
  assert.equal(gate.queued, 2);

  first.release();
  await running;
  assert.equal(await kept, "kept");
  assert.equal(await late, "late");
  assert.equal(abandonedRan, false);
  assert.equal(gate.active, 0);
  assert.equal(gate.queued, 0);

  // An already aborted signal never queues.
  const aborted = AbortSignal.abort(new Error("already gone"));
  await assert.rejects(gate.run(() => Promise.resolve(1), aborted), { message: "already gone" });
  assert.equal(gate.active, 0);
});

Deno.test("ConcurrencyGate.acquire holds a place until released, once", async () => {
  const gate = new ConcurrencyGate({ running: 1, waiting: 1 });
  const release = await gate.acquire();
  assert.equal(gate.active, 1);
  let second: (() => void) | null = null;
  const waiting = gate.acquire().then((r) => second = r);
  await Promise.resolve();
  assert.equal(gate.queued, 1);
  await assert.rejects(gate.acquire(), { name: "GateFullError" });
  release();
  release(); // a second call must not free another place
  await waiting;
  assert.equal(gate.active, 1, "the place went to the waiter");
  assert.equal(gate.queued, 0);
  second!();
  assert.equal(gate.active, 0);
});
