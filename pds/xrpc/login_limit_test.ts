// Failed-login limiting per (address, identifier) and per identifier (spec 4.1, 8; DESIGN.md
// section 4 "Passwords"): behind a reverse proxy every client has one address, so one client's
// wrong passwords must not lock other accounts out.

import assert from "node:assert/strict";
import { createTestApp, signUp, startTestServer, xrpcPost } from "../_test_helpers.ts";
import { LoginLimiter } from "../accounts/login_limiter.ts";

const PASSWORD = "correct horse battery";

Deno.test("ten wrong passwords for one account from an address do not lock out other accounts from that address", async () => {
  await using s = await startTestServer();
  await signUp(s.url, "fred.test");
  await signUp(s.url, "gina.test");
  for (let i = 0; i < 10; i++) {
    const res = await xrpcPost(s.url, "com.atproto.server.createSession", {
      identifier: i % 2 === 0 ? "fred.test" : " FRED.test ",
      password: `guess ${i} guess`,
    });
    assert.equal(res.status, 401);
    await res.body?.cancel();
  }
  const fred = await xrpcPost(s.url, "com.atproto.server.createSession", {
    identifier: "fred.test",
    password: PASSWORD,
  });
  assert.equal(fred.status, 429);
  const retryAfter = Number(fred.headers.get("retry-after"));
  assert.ok(retryAfter > 0 && retryAfter <= 900, `Retry-After ${retryAfter}`);
  assert.deepEqual(await fred.json(), {
    error: "RateLimitExceeded",
    message: `Too many failed logins from this address; retry in ${retryAfter} seconds`,
  });
  const gina = await xrpcPost(s.url, "com.atproto.server.createSession", {
    identifier: "gina.test",
    password: PASSWORD,
  });
  assert.equal(gina.status, 200);
  assert.equal((await gina.json()).handle, "gina.test");
});

Deno.test("fifty wrong passwords for one account spread over many addresses lock that account only", async () => {
  await using t = await createTestApp();
  await signUp(t.app, "hana.test");
  await signUp(t.app, "ivan.test");
  const login = (address: string, identifier: string, password: string) =>
    t.app.fetch(
      new Request("http://localhost/xrpc/com.atproto.server.createSession", {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ identifier, password }),
      }),
      { remoteAddr: { hostname: address, port: 40000, transport: "tcp" } },
    );
  for (let i = 0; i < 50; i++) {
    const res = await login(`10.0.${i}.1`, "hana.test", `guess ${i} guess`);
    assert.equal(res.status, 401);
    await res.body?.cancel();
  }
  const hana = await login("10.9.9.9", "hana.test", PASSWORD);
  assert.equal(hana.status, 429);
  const retryAfter = Number(hana.headers.get("retry-after"));
  assert.deepEqual(await hana.json(), {
    error: "RateLimitExceeded",
    message: `Too many failed logins for this account; retry in ${retryAfter} seconds`,
  });
  const ivan = await login("10.0.0.1", "ivan.test", PASSWORD);
  assert.equal(ivan.status, 200);
  await ivan.body?.cancel();
});

Deno.test("LoginLimiter counts pairs and identifiers separately and forgets them after the window", () => {
  const limiter = new LoginLimiter({ maxFailures: 2, maxFailuresPerIdentifier: 3, windowMs: 1000 });
  limiter.recordFailure("a", "Zed.test", 0);
  limiter.recordFailure("a", "zed.test ", 10);
  assert.deepEqual(limiter.check("a", "ZED.TEST", 100), { retryAfter: 1, scope: "address" });
  assert.equal(limiter.check("b", "zed.test", 100), null);
  assert.equal(limiter.check("a", "other.test", 100), null);
  limiter.recordFailure("b", "zed.test", 200);
  assert.deepEqual(limiter.check("c", "zed.test", 200), { retryAfter: 1, scope: "identifier" });
  assert.equal(limiter.retryAfterSeconds("c", "zed.test", 1000), 0);
  assert.equal(limiter.check("a", "zed.test", 1000), null);
});

Deno.test("LoginLimiter full of live entries forgets the fewest failures first, not a locked account", () => {
  const limiter = new LoginLimiter({
    maxFailures: 3,
    maxFailuresPerIdentifier: 5,
    windowMs: 60_000,
    maxEntries: 20,
  });
  for (let i = 0; i < 5; i++) limiter.recordFailure("attacker", "victim.test", i);
  assert.deepEqual(limiter.check("attacker", "victim.test", 10), {
    retryAfter: 60,
    scope: "identifier",
  });
  // One failure at each of many other identifiers, all within the window: both maps overflow.
  for (let i = 0; i < 200; i++) limiter.recordFailure("attacker", `spray${i}.test`, 100 + i);
  assert.deepEqual(limiter.check("attacker", "victim.test", 400), {
    retryAfter: 60,
    scope: "identifier",
  });
  assert.deepEqual(limiter.check("elsewhere", "victim.test", 400), {
    retryAfter: 60,
    scope: "identifier",
  });
  // Among the one-failure entries the oldest are kept and the newest were forgotten.
  limiter.recordFailure("attacker", "spray0.test", 500);
  limiter.recordFailure("attacker", "spray0.test", 501);
  assert.deepEqual(limiter.check("attacker", "spray0.test", 502), {
    retryAfter: 60,
    scope: "address",
  });
  limiter.recordFailure("attacker", "spray198.test", 600);
  limiter.recordFailure("attacker", "spray198.test", 601);
  assert.equal(limiter.check("attacker", "spray198.test", 602), null);
});

Deno.test("LoginLimiter: a spray brought level with a guessed account's count does not wipe it", () => {
  const limiter = new LoginLimiter({
    maxFailures: 100,
    maxFailuresPerIdentifier: 4,
    windowMs: 60_000,
    maxEntries: 20,
  });
  // Three failures at the victim (one short of its lock) from many addresses.
  for (let i = 0; i < 3; i++) limiter.recordFailure(`addr${i}`, "victim.test", i);
  // Then three failures at each of many other identifiers: every live entry has three.
  for (let i = 0; i < 100; i++) {
    for (let k = 0; k < 3; k++) limiter.recordFailure("attacker", `spray${i}.test`, 10 + i);
  }
  // The victim's count survived: one more failure locks it.
  assert.equal(limiter.check("addr9", "victim.test", 200), null);
  limiter.recordFailure("addr9", "victim.test", 200);
  assert.deepEqual(limiter.check("addr10", "victim.test", 201), {
    retryAfter: 60,
    scope: "identifier",
  });
});

Deno.test("behind a trusted proxy (PDS_TRUST_PROXY) failures count per forwarded client address; otherwise the header is ignored", async () => {
  for (const trusted of [true, false]) {
    await using s = await startTestServer({ env: { PDS_TRUST_PROXY: String(trusted) } });
    await signUp(s.url, "jane.test");
    const login = (forwardedFor: string, password: string) =>
      xrpcPost(s.url, "com.atproto.server.createSession", {
        identifier: "jane.test",
        password,
      }, { "x-forwarded-for": forwardedFor });
    for (let i = 0; i < 10; i++) {
      // The first entry is the client's own claim; the proxy appended the last one.
      const res = await login(`198.51.100.${i}, 203.0.113.7`, `guess ${i} guess`);
      assert.equal(res.status, 401);
      await res.body?.cancel();
    }
    const same = await login("198.51.100.99, 203.0.113.7", PASSWORD);
    assert.equal(same.status, 429, `trusted=${trusted}`);
    await same.body?.cancel();
    // Another client of the proxy is not locked out only when the header is trusted.
    const other = await login("203.0.113.8", PASSWORD);
    assert.equal(other.status, trusted ? 200 : 429, `trusted=${trusted}`);
    await other.body?.cancel();
  }
});
