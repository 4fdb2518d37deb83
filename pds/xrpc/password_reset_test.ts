// com.atproto.server.resetPassword: tokens (unknown, replaced, expired), password rules and the
// login rate limit. The token from the operator's CLI end to end: scripts/admin_test.ts.

import assert from "node:assert/strict";
import { createTestApp, offsetClock, signUp, xrpcPost } from "../_test_helpers.ts";
import { createResetToken, RESET_TOKEN_TTL_MS } from "../accounts/password_reset.ts";

const NEW_PASSWORD = "a brand new password";

Deno.test("resetPassword refuses an expired token with ExpiredToken and keeps the old password", async () => {
  const clock = offsetClock();
  await using t = await createTestApp({ now: clock.now });
  const alice = await signUp(t.app, "alice.test");
  const { token } = await createResetToken(t.ctx.kv, alice.did, clock.now());
  clock.advance(RESET_TOKEN_TTL_MS);
  const res = await xrpcPost(t.app, "com.atproto.server.resetPassword", {
    token,
    password: NEW_PASSWORD,
  });
  assert.equal(res.status, 400);
  assert.deepEqual(await res.json(), { error: "ExpiredToken", message: "Reset token has expired" });
  const login = await xrpcPost(t.app, "com.atproto.server.createSession", {
    identifier: "alice.test",
    password: "correct horse battery",
  });
  assert.equal(login.status, 200);
});

Deno.test("resetPassword refuses an unknown token and one replaced by a newer token with InvalidToken", async () => {
  await using t = await createTestApp();
  const alice = await signUp(t.app, "alice.test");
  const first = await createResetToken(t.ctx.kv, alice.did, Date.now());
  const second = await createResetToken(t.ctx.kv, alice.did, Date.now());
  for (const token of ["aaaaa-bbbbb-ccccc-ddddd", first.token]) {
    const res = await xrpcPost(t.app, "com.atproto.server.resetPassword", {
      token,
      password: NEW_PASSWORD,
    });
    assert.equal(res.status, 400);
    assert.deepEqual(await res.json(), {
      error: "InvalidToken",
      message: "Reset token is invalid or was already used",
    });
  }
  const ok = await xrpcPost(t.app, "com.atproto.server.resetPassword", {
    token: second.token,
    password: NEW_PASSWORD,
  });
  assert.equal(ok.status, 200);
});

Deno.test("resetPassword applies createAccount's password rules and requires both members", async () => {
  await using t = await createTestApp();
  const alice = await signUp(t.app, "alice.test");
  const { token } = await createResetToken(t.ctx.kv, alice.did, Date.now());
  const short = await xrpcPost(t.app, "com.atproto.server.resetPassword", {
    token,
    password: "short",
  });
  assert.equal(short.status, 400);
  assert.deepEqual(await short.json(), {
    error: "InvalidPassword",
    message: "Password must be between 8 and 256 characters",
  });
  const missing = await xrpcPost(t.app, "com.atproto.server.resetPassword", { token });
  assert.equal(missing.status, 400);
  assert.deepEqual(await missing.json(), {
    error: "InvalidRequest",
    message: "Members token and password are required",
  });
  // The refused attempts did not use the token up.
  const ok = await xrpcPost(t.app, "com.atproto.server.resetPassword", {
    token,
    password: NEW_PASSWORD,
  });
  assert.equal(ok.status, 200);
});

Deno.test("resetPassword counts against the per-address login rate: 429 with Retry-After", async () => {
  await using t = await createTestApp({ env: { PDS_LOGINS_PER_HOUR: "2" } });
  const body = { token: "aaaaa-bbbbb-ccccc-ddddd", password: NEW_PASSWORD };
  for (let i = 0; i < 2; i++) {
    const res = await xrpcPost(t.app, "com.atproto.server.resetPassword", body);
    assert.equal(res.status, 400);
    await res.body?.cancel();
  }
  const limited = await xrpcPost(t.app, "com.atproto.server.resetPassword", body);
  assert.equal(limited.status, 429);
  assert.equal(limited.headers.get("retry-after"), "1800");
  assert.deepEqual(await limited.json(), {
    error: "RateLimitExceeded",
    message: "Too many logins and password resets from this address; retry in 1800 seconds",
  });
});
