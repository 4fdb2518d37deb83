// Sessions: createSession, refreshSession, getSession, deleteSession (spec 2.13, 4.1, 5.1, 8;
// docs/behaviour.md 10.2 "Refresh token" and 10.3 "Passwords").

import assert from "node:assert/strict";
import { Hono } from "hono";
import {
  createTestApp,
  offsetClock,
  signUp,
  startTestServer,
  xrpcGet,
  xrpcPost,
} from "../_test_helpers.ts";
import { REFRESH_GRACE_MS } from "../accounts/sessions.ts";
import { requireAccess } from "../auth/access.ts";
import type { PdsEnv } from "../context.ts";
import { handleXrpcError } from "./errors.ts";

const PASSWORD = "correct horse battery";
const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

/** Calls refreshSession with `token`; the status and the parsed body. */
async function refreshSession(target: Hono<PdsEnv> | string, token: string) {
  const res = await xrpcPost(target, "com.atproto.server.refreshSession", undefined, bearer(token));
  return { status: res.status, body: await res.json() };
}

Deno.test("createSession accepts a handle in any case or the DID as identifier", async () => {
  await using t = await createTestApp();
  const { did } = await signUp(t.app, "dana.test");
  for (const identifier of ["dana.test", "DANA.Test", did]) {
    const res = await xrpcPost(t.app, "com.atproto.server.createSession", {
      identifier,
      password: PASSWORD,
    });
    assert.equal(res.status, 200, identifier);
    const body = await res.json();
    assert.equal(body.did, did);
    assert.equal(body.handle, "dana.test");
    assert.equal(body.active, true);
    assert.equal(typeof body.accessJwt, "string");
    assert.equal(typeof body.refreshJwt, "string");
  }
});

Deno.test("createSession answers an unknown identifier and a wrong password identically", async () => {
  await using t = await createTestApp();
  await signUp(t.app, "erin.test");
  const bodies = [];
  for (
    const body of [
      { identifier: "erin.test", password: "wrong password" },
      { identifier: "nobody.test", password: PASSWORD },
      { identifier: "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", password: PASSWORD },
    ]
  ) {
    const res = await xrpcPost(t.app, "com.atproto.server.createSession", body);
    assert.equal(res.status, 401);
    bodies.push(await res.text());
  }
  const expected = JSON.stringify({
    error: "AuthenticationRequired",
    message: "Invalid identifier or password",
  });
  assert.deepEqual(bodies, [expected, expected, expected]);
});

Deno.test("createSession refuses an address with 429 after 10 failed logins, even with the right password", async () => {
  await using s = await startTestServer();
  await signUp(s.url, "fred.test");
  for (let i = 0; i < 10; i++) {
    const res = await xrpcPost(s.url, "com.atproto.server.createSession", {
      identifier: "fred.test",
      password: `guess ${i} guess`,
    });
    assert.equal(res.status, 401);
    await res.body?.cancel();
  }
  const res = await xrpcPost(s.url, "com.atproto.server.createSession", {
    identifier: "fred.test",
    password: PASSWORD,
  });
  assert.equal(res.status, 429);
  const retryAfter = Number(res.headers.get("retry-after"));
  assert.ok(retryAfter > 0 && retryAfter <= 900, `Retry-After ${retryAfter}`);
  const body = await res.json();
  assert.equal(body.error, "RateLimitExceeded");
  assert.equal(
    body.message,
    `Too many failed logins from this address; retry in ${retryAfter} seconds`,
  );
});

Deno.test("getSession returns the account of the access token", async () => {
  await using t = await createTestApp();
  const session = await signUp(t.app, "gina.test");
  const res = await xrpcGet(t.app, "com.atproto.server.getSession", bearer(session.accessJwt));
  assert.equal(res.status, 200);
  assert.equal(res.headers.get("cache-control"), "private");
  assert.deepEqual(await res.json(), { did: session.did, handle: "gina.test", active: true });
});

Deno.test("an authenticated endpoint without a bearer header answers 401 AuthMissing", async () => {
  await using t = await createTestApp();
  const res = await xrpcGet(t.app, "com.atproto.server.getSession");
  assert.equal(res.status, 401);
  assert.deepEqual(await res.json(), {
    error: "AuthMissing",
    message: "Authorization header with a bearer token is required",
  });
  const basic = await xrpcGet(t.app, "com.atproto.server.getSession", {
    authorization: "Basic YWRtaW46eA==",
  });
  assert.equal(basic.status, 400);
  assert.deepEqual(await basic.json(), {
    error: "InvalidToken",
    message: "Authorization scheme must be Bearer",
  });
});

Deno.test("a refresh token is refused where an access token is required, also on a write route", async () => {
  await using t = await createTestApp();
  const session = await signUp(t.app, "hank.test");
  const res = await xrpcGet(t.app, "com.atproto.server.getSession", bearer(session.refreshJwt));
  assert.equal(res.status, 400);
  assert.deepEqual(await res.json(), {
    error: "InvalidToken",
    message: 'Token type is not at+jwt: "refresh+jwt"',
  });

  // A write route guarded the way repository writes are.
  const writes = new Hono<PdsEnv>();
  writes.onError(handleXrpcError(t.ctx.log));
  writes.post("/xrpc/test.write", requireAccess(t.ctx), (c) => c.json({ did: c.get("auth").did }));
  const ok = await xrpcPost(writes, "test.write", {}, bearer(session.accessJwt));
  assert.deepEqual(await ok.json(), { did: session.did });
  const refused = await xrpcPost(writes, "test.write", {}, bearer(session.refreshJwt));
  assert.equal(refused.status, 400);
  assert.equal((await refused.json()).error, "InvalidToken");
});

Deno.test("an access token is refused by refreshSession and deleteSession", async () => {
  await using t = await createTestApp();
  const session = await signUp(t.app, "ivan.test");
  for (const nsid of ["com.atproto.server.refreshSession", "com.atproto.server.deleteSession"]) {
    const res = await xrpcPost(t.app, nsid, undefined, bearer(session.accessJwt));
    assert.equal(res.status, 400, nsid);
    assert.deepEqual(await res.json(), {
      error: "InvalidToken",
      message: 'Token type is not refresh+jwt: "at+jwt"',
    });
  }
});

Deno.test("refreshSession rotates both tokens and the old refresh token stops working after the grace window", async () => {
  const clock = offsetClock();
  await using t = await createTestApp({ now: clock.now });
  const first = await signUp(t.app, "jane.test");
  const res = await xrpcPost(
    t.app,
    "com.atproto.server.refreshSession",
    undefined,
    bearer(first.refreshJwt),
  );
  assert.equal(res.status, 200);
  const second = await res.json();
  assert.equal(second.did, first.did);
  assert.equal(second.handle, "jane.test");
  assert.notEqual(second.accessJwt, first.accessJwt);
  assert.notEqual(second.refreshJwt, first.refreshJwt);
  const me = await xrpcGet(t.app, "com.atproto.server.getSession", bearer(second.accessJwt));
  assert.equal(me.status, 200);
  await me.body?.cancel();

  clock.advance(REFRESH_GRACE_MS + 1);
  const reuse = await xrpcPost(
    t.app,
    "com.atproto.server.refreshSession",
    undefined,
    bearer(first.refreshJwt),
  );
  assert.equal(reuse.status, 400);
  assert.deepEqual(await reuse.json(), {
    error: "ExpiredToken",
    message: "Token has been revoked",
  });
});

Deno.test("presenting a rotated-out refresh token after the grace window revokes every token descended from that login", async () => {
  const clock = offsetClock();
  await using t = await createTestApp({ now: clock.now });
  const login = await signUp(t.app, "kate.test");
  const refresh = (token: string) => refreshSession(t.app, token);
  const r1 = await refresh(login.refreshJwt);
  const r2 = await refresh(r1.body.refreshJwt);
  assert.equal(r2.status, 200);
  // A second, independent login of the same account is not affected.
  const other = await xrpcPost(t.app, "com.atproto.server.createSession", {
    identifier: "kate.test",
    password: PASSWORD,
  }).then((r) => r.json());

  clock.advance(REFRESH_GRACE_MS + 1);
  const stolen = await refresh(r1.body.refreshJwt); // rotated out by r2
  assert.equal(stolen.status, 400);
  assert.equal(stolen.body.error, "ExpiredToken");
  const descendant = await refresh(r2.body.refreshJwt); // was current until the reuse
  assert.equal(descendant.status, 400);
  assert.deepEqual(descendant.body, { error: "ExpiredToken", message: "Token has been revoked" });
  assert.equal((await refresh(other.refreshJwt)).status, 200);
  const warned = t.lines.map((l) => JSON.parse(l)).filter((l) => l.level === "warn");
  assert.deepEqual(warned.map((l) => l.msg), [
    "rotated-out refresh token presented; login revoked",
  ]);
});

Deno.test("deleteSession revokes the login of its refresh token", async () => {
  await using t = await createTestApp();
  const session = await signUp(t.app, "liam.test");
  const del = await xrpcPost(
    t.app,
    "com.atproto.server.deleteSession",
    undefined,
    bearer(session.refreshJwt),
  );
  assert.equal(del.status, 200);
  await del.body?.cancel();
  const res = await xrpcPost(
    t.app,
    "com.atproto.server.refreshSession",
    undefined,
    bearer(session.refreshJwt),
  );
  assert.equal(res.status, 400);
  assert.deepEqual(await res.json(), { error: "ExpiredToken", message: "Token has been revoked" });
});

Deno.test("an expired access token answers 400 ExpiredToken and the refresh token still works", async () => {
  const clock = offsetClock();
  await using t = await createTestApp({ now: clock.now });
  const session = await signUp(t.app, "mona.test");
  clock.advance(60 * 60 * 1000); // exactly the 1 hour lifetime
  const res = await xrpcGet(t.app, "com.atproto.server.getSession", bearer(session.accessJwt));
  assert.equal(res.status, 400);
  assert.deepEqual(await res.json(), { error: "ExpiredToken", message: "Token has expired" });
  const refreshed = await xrpcPost(
    t.app,
    "com.atproto.server.refreshSession",
    undefined,
    bearer(session.refreshJwt),
  );
  assert.equal(refreshed.status, 200);
  const { accessJwt } = await refreshed.json();
  const me = await xrpcGet(t.app, "com.atproto.server.getSession", bearer(accessJwt));
  assert.equal(me.status, 200);
  await me.body?.cancel();
});

Deno.test("an expired refresh token answers 400 ExpiredToken", async () => {
  const clock = offsetClock();
  await using t = await createTestApp({ now: clock.now });
  const session = await signUp(t.app, "nora.test");
  clock.advance(90 * 24 * 60 * 60 * 1000);
  const res = await xrpcPost(
    t.app,
    "com.atproto.server.refreshSession",
    undefined,
    bearer(session.refreshJwt),
  );
  assert.equal(res.status, 400);
  assert.deepEqual(await res.json(), { error: "ExpiredToken", message: "Token has expired" });
});

Deno.test("a token signed by another key or garbled answers 400 InvalidToken", async () => {
  await using t = await createTestApp();
  await using other = await createTestApp({ env: { PDS_JWT_SECRET: "another-secret-0123456789" } });
  const foreign = await signUp(other.app, "oscar.test");
  const res = await xrpcGet(t.app, "com.atproto.server.getSession", bearer(foreign.accessJwt));
  assert.equal(res.status, 400);
  assert.deepEqual(await res.json(), {
    error: "InvalidToken",
    message: "Token signature is invalid",
  });
  const garbled = await xrpcGet(t.app, "com.atproto.server.getSession", bearer("a.b.c"));
  assert.equal(garbled.status, 400);
  assert.deepEqual(await garbled.json(), { error: "InvalidToken", message: "Token is malformed" });
});

Deno.test("ten concurrent refreshSession calls with one refresh token all get a working session", async () => {
  await using s = await startTestServer();
  const login = await signUp(s.url, "tabs.test");
  const refresh = (token: string) =>
    xrpcPost(s.url, "com.atproto.server.refreshSession", undefined, bearer(token));
  const answers = await Promise.all(Array.from({ length: 10 }, () => refresh(login.refreshJwt)));
  const bodies = await Promise.all(answers.map((r) => r.json()));
  assert.deepEqual(answers.map((r) => r.status), Array(10).fill(200));
  for (const body of bodies) {
    const me = await xrpcGet(s.url, "com.atproto.server.getSession", bearer(body.accessJwt));
    assert.equal(me.status, 200);
    assert.deepEqual(await me.json(), { did: login.did, handle: "tabs.test", active: true });
  }
  // Every tab's new refresh token keeps working: none was taken for a stolen one.
  for (const body of bodies) {
    const next = await refresh(body.refreshJwt);
    assert.equal(next.status, 200);
    assert.equal((await next.json()).did, login.did);
  }
  const warned = s.lines.map((l) => JSON.parse(l)).filter((l) => l.msg.includes("refresh"));
  assert.deepEqual(warned, []);
});

Deno.test("a rotated-out refresh token presented within the grace window gets the same successor, after it revokes the login", async () => {
  const clock = offsetClock();
  await using s = await startTestServer({ now: clock.now });
  const login = await signUp(s.url, "late.test");
  const refresh = (token: string) => refreshSession(s.url, token);
  const first = await refresh(login.refreshJwt);
  assert.equal(first.status, 200);
  clock.advance(REFRESH_GRACE_MS - 1000);
  const retried = await refresh(login.refreshJwt); // a response lost on the way, retried
  assert.equal(retried.status, 200);
  // Both answers name one successor: refreshing either rotates it for both.
  const second = await refresh(retried.body.refreshJwt);
  assert.equal(second.status, 200);
  clock.advance(REFRESH_GRACE_MS + 1);
  const stale = await refresh(first.body.refreshJwt); // rotated out beyond the window
  assert.deepEqual(stale, {
    status: 400,
    body: { error: "ExpiredToken", message: "Token has been revoked" },
  });
  const descendant = await refresh(second.body.refreshJwt);
  assert.deepEqual(descendant, {
    status: 400,
    body: { error: "ExpiredToken", message: "Token has been revoked" },
  });
});
