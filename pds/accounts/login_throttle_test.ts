// The growing delay of failed logins (issue 36 items 2 and 7): counted on arrival, refunded on
// success, one address adding at most its free failures to an account's count, bounded maps.

import assert from "node:assert/strict";
import { Backoff } from "./backoff.ts";
import { accountKey, isLoginRefusal, type LoginAttempt, LoginThrottle } from "./login_throttle.ts";

const OPTS = { free: 2, baseMs: 1000, capMs: 8000, forgetMs: 60_000, maxEntries: 20 };

Deno.test("Backoff: free attempts, then a delay doubling from the last attempt up to its cap", () => {
  const b = new Backoff(OPTS);
  const waits: number[] = [];
  let t = 0;
  for (let i = 0; i < 7; i++) {
    t += b.waitMs("k", t);
    b.begin("k", t);
    b.fail("k", t + 100); // the check took 100 ms: the delay runs from its end
    waits.push(b.waitMs("k", t + 100));
  }
  assert.deepEqual(waits, [0, 1000, 2000, 4000, 8000, 8000, 8000]);
});

Deno.test("Backoff: concurrent attempts are counted when they begin; a refund uncounts one", () => {
  const b = new Backoff(OPTS);
  b.begin("k", 0);
  b.begin("k", 0);
  assert.equal(b.waitMs("k", 0), 1000);
  b.refund("k");
  assert.equal(b.waitMs("k", 0), 0);
  b.refund("k");
  assert.equal(b.size, 0);
});

Deno.test("Backoff forgets a key idle for forgetMs", () => {
  const b = new Backoff(OPTS);
  for (let i = 0; i < 5; i++) b.begin("k", 0);
  assert.equal(b.waitMs("k", 59_999), 0);
  assert.equal(b.attempts("k", 59_999), 5);
  assert.equal(b.attempts("k", 60_000), 0);
  assert.equal(b.size, 0);
});

Deno.test("Backoff full of live keys forgets the fewest attempts first, not a guessed account", () => {
  const b = new Backoff(OPTS);
  for (let i = 0; i < 6; i++) b.begin("victim", i);
  for (let i = 0; i < 200; i++) b.begin(`spray${i}`, 100 + i);
  assert.ok(b.size <= 20, `size ${b.size}`);
  assert.equal(b.attempts("victim", 400), 6);
  // Among the one-attempt keys the oldest are kept, the newest forgotten.
  assert.equal(b.attempts("spray0", 400), 1);
  assert.equal(b.attempts("spray199", 400), 1); // just added after the last sweep
  assert.equal(b.attempts("spray198", 400), 0);
});

Deno.test("Backoff refuses options that cannot work", () => {
  assert.throws(() => new Backoff({ ...OPTS, capMs: 500 }), RangeError);
  assert.throws(() => new Backoff({ ...OPTS, forgetMs: 1000 }), RangeError);
  assert.throws(() => new Backoff({ ...OPTS, maxEntries: 0 }), RangeError);
});

Deno.test("LoginThrottle: one address adds at most its free failures to the account's count", () => {
  const throttle = new LoginThrottle({
    pair: { free: 3, capMs: 1000, forgetMs: 60_000 },
    account: { free: 5, capMs: 8000, forgetMs: 60_000 },
    address: { free: 100, capMs: 8000, forgetMs: 60_000 },
  });
  const fail = (address: string, t: number) => {
    const attempt = throttle.begin(address, "did:plc:victim", t);
    assert.ok(!isLoginRefusal(attempt), `${address} at ${t}`);
    (attempt as LoginAttempt).failed(t);
  };
  // The attacker's own address waits; it added three failures to the account.
  let t = 0;
  for (let i = 0; i < 20; i++, t += 1000) fail("attacker", t);
  assert.deepEqual(throttle.begin("attacker", "did:plc:victim", t - 1000), {
    retryAfter: 1,
    scope: "address",
  });
  const owner = throttle.begin("owner", "did:plc:victim", t);
  assert.ok(!isLoginRefusal(owner));
  owner.refund();
  // Two failures from another address make the account's five: everyone waits, the owner too.
  fail("b", t);
  fail("b", t);
  assert.deepEqual(throttle.begin("owner", "did:plc:victim", t), {
    retryAfter: 1,
    scope: "account",
  });
});

Deno.test("accountKey: the DID of a known account, else the trimmed lower-case identifier", () => {
  assert.equal(accountKey("did:plc:abc", " Whoever.TEST "), "did:plc:abc");
  assert.equal(accountKey(null, " Nobody.TEST "), "?nobody.test");
  assert.equal(accountKey(null, "x".repeat(400)).length, 301);
});
