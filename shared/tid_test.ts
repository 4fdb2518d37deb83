// TID generator and codec (spec 4.1 rule 2: monotonic and safe across counter wrap).
import assert from "node:assert/strict";
import {
  encodeTid,
  isValidTid,
  nextTid,
  tidClockId,
  TidError,
  TidGenerator,
  tidTimestampMicros,
} from "./tid.ts";

function assertStrictlyIncreasing(tids: string[]): void {
  for (let i = 1; i < tids.length; i++) {
    if (!(tids[i] > tids[i - 1])) {
      assert.fail(`TID ${i} (${tids[i]}) is not greater than TID ${i - 1} (${tids[i - 1]})`);
    }
  }
}

Deno.test("encodeTid matches the reference example 3jzfcijpj2z2a", () => {
  assert.equal(encodeTid(1688137381887007, 6), "3jzfcijpj2z2a");
  assert.equal(tidTimestampMicros("3jzfcijpj2z2a"), 1688137381887007);
  assert.equal(tidClockId("3jzfcijpj2z2a"), 6);
});

Deno.test("encodeTid writes zero as 2222222222222 and the largest value as bzzzzzzzzzzzz", () => {
  assert.equal(encodeTid(0, 0), "2222222222222");
  assert.equal(encodeTid(Number.MAX_SAFE_INTEGER, 1023), "bzzzzzzzzzzzz");
  assert.equal(tidTimestampMicros("bzzzzzzzzzzzz"), Number.MAX_SAFE_INTEGER);
  assert.equal(tidClockId("bzzzzzzzzzzzz"), 1023);
});

Deno.test("encodeTid rejects out-of-range timestamps and clock ids", () => {
  assert.throws(() => encodeTid(-1, 0), TidError);
  assert.throws(() => encodeTid(2 ** 53, 0), TidError);
  assert.throws(() => encodeTid(1.5, 0), TidError);
  assert.throws(() => encodeTid(0, 1024), TidError);
  assert.throws(() => encodeTid(0, -1), TidError);
});

Deno.test("tidTimestampMicros rejects non-TIDs and TIDs with the high bit set", () => {
  assert.throws(() => tidTimestampMicros("3jzf-cij-pj2z-2a"), {
    name: "TidError",
    message: 'Invalid TID: "3jzf-cij-pj2z-2a"',
  });
  assert.throws(() => tidTimestampMicros("jzzzzzzzzzzzz"), {
    name: "TidError",
    message: "TID timestamp overflows 53 bits: jzzzzzzzzzzzz",
  });
});

Deno.test("TidGenerator output round-trips timestamp and clock id and is valid TID syntax", () => {
  const gen = new TidGenerator({ nowMicros: () => 1_700_000_000_123_456, clockId: 517 });
  const tid = gen.next();
  assert.equal(isValidTid(tid), true);
  assert.equal(tid.length, 13);
  assert.equal(tidTimestampMicros(tid), 1_700_000_000_123_456);
  assert.equal(tidClockId(tid), 517);
});

Deno.test("TidGenerator gives 100,000 strictly increasing TIDs in a tight loop", () => {
  const gen = new TidGenerator();
  const tids = new Array<string>(100_000);
  for (let i = 0; i < tids.length; i++) tids[i] = gen.next();
  assertStrictlyIncreasing(tids);
  assert.equal(new Set(tids).size, tids.length);
});

Deno.test("TidGenerator stays strictly increasing when the injected clock steps back", () => {
  const clock = [5_000_000, 5_000_010, 4_000_000, 4_000_001, 5_000_010, 5_000_011, 1, 6_000_000];
  let i = 0;
  const gen = new TidGenerator({ nowMicros: () => clock[i++], clockId: 3 });
  const tids = clock.map(() => gen.next());
  assertStrictlyIncreasing(tids);
  // After the step back the timestamp is bumped past the last one, never reused.
  assert.deepEqual(
    tids.map(tidTimestampMicros),
    [5_000_000, 5_000_010, 5_000_011, 5_000_012, 5_000_013, 5_000_014, 5_000_015, 6_000_000],
  );
  assert.ok(tids.every((t) => tidClockId(t) === 3));
});

Deno.test("TidGenerator carries into the timestamp when more than 1024 TIDs share a microsecond", () => {
  const gen = new TidGenerator({ nowMicros: () => 42_000_000, clockId: 1023 });
  const tids = Array.from({ length: 3000 }, () => gen.next());
  assertStrictlyIncreasing(tids);
  assert.equal(tidTimestampMicros(tids[0]), 42_000_000);
  assert.equal(tidTimestampMicros(tids[2999]), 42_002_999);
  // The highest clock id never wraps to a smaller value.
  assert.ok(tids.every((t) => tidClockId(t) === 1023));
});

Deno.test("TidGenerator refuses to overflow the 53-bit timestamp", () => {
  const gen = new TidGenerator({ nowMicros: () => Number.MAX_SAFE_INTEGER, clockId: 0 });
  assert.equal(tidTimestampMicros(gen.next()), Number.MAX_SAFE_INTEGER);
  assert.throws(() => gen.next(), { name: "TidError" });
});

Deno.test("TidGenerator rejects a clock id outside [0, 1023]", () => {
  assert.throws(() => new TidGenerator({ clockId: 1024 }), {
    name: "TidError",
    message: "Clock id must be an integer in [0, 1023]: 1024",
  });
});

Deno.test("TidGenerator.nextAfter returns a TID above a stored one from a faster clock", () => {
  const gen = new TidGenerator({ nowMicros: () => 1_000, clockId: 10 });
  const stored = encodeTid(9_000, 20);
  const next = gen.nextAfter(stored);
  assert.ok(next > stored);
  assert.equal(tidTimestampMicros(next), 9_001);
  // Same timestamp suffices when our clock id sorts after the stored one.
  const gen2 = new TidGenerator({ nowMicros: () => 1_000, clockId: 30 });
  assert.equal(gen2.nextAfter(stored), encodeTid(9_000, 30));
  assert.ok(gen2.next() > encodeTid(9_000, 30));
});

Deno.test("nextTid is monotonic across calls and near the wall clock", () => {
  const before = Date.now() * 1000;
  const a = nextTid();
  const b = nextTid();
  assert.ok(b > a);
  assert.ok(Math.abs(tidTimestampMicros(a) - before) < 60_000_000);
});

Deno.test("isValidTid checks length, alphabet, case and the high bit", () => {
  assert.equal(isValidTid("3jzfcijpj2z2a"), true);
  assert.equal(isValidTid("2222222222222"), true);
  assert.equal(isValidTid("3jzfcijpj2z2"), false);
  assert.equal(isValidTid("3jzfcijpj2z2aa"), false);
  assert.equal(isValidTid("3JZFCIJPJ2Z2A"), false);
  assert.equal(isValidTid("3jzfcijpj2z21"), false);
  assert.equal(isValidTid("kjzfcijpj2z2a"), false);
  assert.equal(isValidTid(undefined as unknown as string), false);
});
