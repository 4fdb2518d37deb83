// Failed-login throttling per (address, account), per account and per address (spec 4.1, 8;
// docs/behaviour.md 10.3 "Passwords"; issue 36 items 2 and 7): behind a reverse proxy every client
// has one address, so one client's wrong passwords must not lock other accounts out; attempts
// count when they arrive; an attacker gets a growing delay, the owner elsewhere gets in.

import assert from "node:assert/strict";
import { createTestApp, ManualClock, signUp, startTestServer, xrpcPost } from "../_test_helpers.ts";

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

/** A real server trusting `X-Forwarded-For`, so a test can log in from any address. */
async function startProxiedServer(now: () => number) {
  const s = await startTestServer({ env: { PDS_TRUST_PROXY: "true" }, now });
  const login = async (address: string, identifier: string, password: string) => {
    const res = await xrpcPost(s.url, "com.atproto.server.createSession", {
      identifier,
      password,
    }, { "x-forwarded-for": address });
    return {
      status: res.status,
      retryAfter: res.headers.get("retry-after"),
      body: await res.json(),
    };
  };
  return { s, login };
}

const refusedFrom = (scope: string, seconds: number) => ({
  status: 429,
  retryAfter: String(seconds),
  body: {
    error: "RateLimitExceeded",
    message: `Too many failed logins ${scope}; retry in ${seconds} seconds`,
  },
});

Deno.test("forty concurrent wrong passwords for one account: ten reach the password check, thirty are refused", async () => {
  const clock = new ManualClock();
  await using s = await startTestServer({ now: clock.now });
  await signUp(s.url, "olga.test");
  const answers = await Promise.all(
    Array.from({ length: 40 }, async (_, i) => {
      const res = await xrpcPost(s.url, "com.atproto.server.createSession", {
        identifier: "olga.test",
        password: `guess ${i} guess`,
      });
      return {
        status: res.status,
        retryAfter: res.headers.get("retry-after"),
        body: await res.json(),
      };
    }),
  );
  const checked = answers.filter((a) => a.status === 401);
  const refused = answers.filter((a) => a.status !== 401);
  assert.equal(checked.length, 10);
  assert.deepEqual(refused, Array(30).fill(refusedFrom("from this address", 1)));
});

Deno.test("handle, DID and any case of the handle share one failed-login budget per account", async () => {
  const clock = new ManualClock();
  const { s, login } = await startProxiedServer(clock.now);
  await using _ = s;
  const { did } = await signUp(s.url, "paul.test");
  const forms = ["paul.test", "PAUL.Test", did];
  // From one address: ten failures over three forms, then every form waits.
  for (let i = 0; i < 10; i++) {
    assert.equal((await login("198.51.100.7", forms[i % 3], `guess ${i} guess`)).status, 401);
  }
  for (const form of forms) {
    assert.deepEqual(
      await login("198.51.100.7", form, PASSWORD),
      refusedFrom("from this address", 1),
      form,
    );
  }
  // From many addresses: fifty failures over three forms make the account wait, in every form.
  for (let i = 10; i < 50; i++) {
    assert.equal((await login(`10.1.${i}.1`, forms[i % 3], `guess ${i} guess`)).status, 401);
  }
  for (const form of forms) {
    assert.deepEqual(
      await login("10.9.9.9", form, PASSWORD),
      refusedFrom("for this account", 1),
      form,
    );
  }
});

Deno.test("fifty failures from many addresses make the owner wait a growing delay, not a quarter-hour", async () => {
  const clock = new ManualClock();
  const { s, login } = await startProxiedServer(clock.now);
  await using _ = s;
  await signUp(s.url, "rita.test");
  for (let i = 0; i < 50; i++) {
    assert.equal((await login(`10.2.${i}.1`, "rita.test", `guess ${i} guess`)).status, 401);
  }
  assert.deepEqual(
    await login("203.0.113.9", "rita.test", PASSWORD),
    refusedFrom("for this account", 1),
  );
  clock.advance(1);
  assert.equal((await login("10.2.99.1", "rita.test", "another guess")).status, 401);
  assert.deepEqual(
    await login("203.0.113.9", "rita.test", PASSWORD),
    refusedFrom("for this account", 2),
  );
  clock.advance(2);
  const owner = await login("203.0.113.9", "rita.test", PASSWORD);
  assert.equal(owner.status, 200);
  assert.equal(owner.body.handle, "rita.test");
});

Deno.test("an attacker hammering one account from one address (an IPv6 /64) gets a growing delay while the owner logs in from another", async () => {
  const clock = new ManualClock();
  const { s, login } = await startProxiedServer(clock.now);
  await using _ = s;
  const { did } = await signUp(s.url, "sven.test");
  const forms = ["sven.test", "SVEN.test", did];
  // Any address of one /64 is one client; the attacker waits out each delay and tries again.
  const waits: number[] = [];
  for (let i = 0; i < 60; i++) {
    const address = `2001:db8:aa:bb:${(i + 1).toString(16)}::1`;
    const res = await login(address, forms[i % 3], `guess ${i} guess`);
    if (res.status === 429) {
      const seconds = Number(res.retryAfter);
      assert.deepEqual(res, refusedFrom("from this address", seconds));
      waits.push(seconds);
      clock.advance(seconds);
    } else {
      assert.equal(res.status, 401);
    }
    if (i % 10 === 9) {
      const owner = await login("203.0.113.20", forms[i % 3], PASSWORD);
      assert.equal(owner.status, 200, `owner after attempt ${i}`);
      assert.equal(owner.body.did, did);
    }
  }
  // Ten free failures, then a delay that doubles from one second up to its cap.
  assert.deepEqual(waits.slice(0, 12), [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 900, 900]);
});
