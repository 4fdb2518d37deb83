// app.social.server.changePassword (docs/behaviour.md 4.1 rule 9): a logged-in member changes the
// password with the current one; the other logins end, the caller gets a new session.

import assert from "node:assert/strict";
import { SocialClient } from "../../shared/client.ts";
import { signUp, startTestServer, xrpcGet, xrpcPost } from "../_test_helpers.ts";

const OLD_PASSWORD = "correct horse battery";
const NEW_PASSWORD = "a brand new password";
const METHOD = "app.social.server.changePassword";

function bearer(token: string): Record<string, string> {
  return { authorization: `Bearer ${token}` };
}

function login(url: string, password: string): Promise<Response> {
  return xrpcPost(url, "com.atproto.server.createSession", { identifier: "alice.test", password });
}

Deno.test("changePassword sets the new password, ends the other logins and hands the caller a new session", async () => {
  await using s = await startTestServer();
  const alice = await signUp(s.url, "alice.test");
  const other = await (await login(s.url, OLD_PASSWORD)).json();

  const res = await xrpcPost(
    s.url,
    METHOD,
    { currentPassword: OLD_PASSWORD, newPassword: NEW_PASSWORD },
    bearer(alice.accessJwt),
  );
  assert.equal(res.status, 200);
  const session = await res.json();
  assert.deepEqual(Object.keys(session).sort(), ["accessJwt", "did", "handle", "refreshJwt"]);
  assert.equal(session.did, alice.did);
  assert.equal(session.handle, "alice.test");

  // The other login and the caller's old refresh token are refused at their next refresh.
  for (const token of [other.refreshJwt, alice.refreshJwt]) {
    const refresh = await xrpcPost(s.url, "com.atproto.server.refreshSession", undefined, {
      ...bearer(token),
    });
    assert.equal(refresh.status, 400);
    assert.deepEqual(await refresh.json(), {
      error: "ExpiredToken",
      message: "Token has been revoked",
    });
  }
  // The caller's new session works and refreshes.
  const me = await xrpcGet(s.url, "com.atproto.server.getSession", bearer(session.accessJwt));
  assert.equal(me.status, 200);
  assert.equal((await me.json()).did, alice.did);
  const refreshed = await xrpcPost(
    s.url,
    "com.atproto.server.refreshSession",
    undefined,
    bearer(session.refreshJwt),
  );
  assert.equal(refreshed.status, 200);
  await refreshed.body?.cancel();

  // The old password no longer works, the new one does.
  const old = await login(s.url, OLD_PASSWORD);
  assert.equal(old.status, 401);
  assert.equal((await old.json()).error, "AuthenticationRequired");
  const fresh = await login(s.url, NEW_PASSWORD);
  assert.equal(fresh.status, 200);
  await fresh.body?.cancel();
});

Deno.test("changePassword refuses a wrong current password and keeps everything as it was", async () => {
  await using s = await startTestServer();
  const alice = await signUp(s.url, "alice.test");
  const res = await xrpcPost(
    s.url,
    METHOD,
    { currentPassword: "not the password", newPassword: NEW_PASSWORD },
    bearer(alice.accessJwt),
  );
  assert.equal(res.status, 401);
  assert.deepEqual(await res.json(), {
    error: "AuthenticationRequired",
    message: "Current password is wrong",
  });
  const refresh = await xrpcPost(
    s.url,
    "com.atproto.server.refreshSession",
    undefined,
    bearer(alice.refreshJwt),
  );
  assert.equal(refresh.status, 200);
  await refresh.body?.cancel();
  const still = await login(s.url, OLD_PASSWORD);
  assert.equal(still.status, 200);
  await still.body?.cancel();
});

Deno.test("changePassword requires an access token, both members and a valid new password", async () => {
  await using s = await startTestServer();
  const alice = await signUp(s.url, "alice.test");
  const anonymous = await xrpcPost(s.url, METHOD, {
    currentPassword: OLD_PASSWORD,
    newPassword: NEW_PASSWORD,
  });
  assert.equal(anonymous.status, 401);
  assert.equal((await anonymous.json()).error, "AuthMissing");

  const missing = await xrpcPost(
    s.url,
    METHOD,
    { currentPassword: OLD_PASSWORD },
    bearer(alice.accessJwt),
  );
  assert.equal(missing.status, 400);
  assert.deepEqual(await missing.json(), {
    error: "InvalidRequest",
    message: "Members currentPassword and newPassword are required",
  });

  const short = await xrpcPost(
    s.url,
    METHOD,
    { currentPassword: OLD_PASSWORD, newPassword: "short" },
    bearer(alice.accessJwt),
  );
  assert.equal(short.status, 400);
  assert.deepEqual(await short.json(), {
    error: "InvalidPassword",
    message: "Password must be between 8 and 256 characters",
  });
  const still = await login(s.url, OLD_PASSWORD);
  assert.equal(still.status, 200);
  await still.body?.cancel();
});

Deno.test("SocialClient.changePassword keeps the client logged in with the new session", async () => {
  await using s = await startTestServer();
  const client = new SocialClient({ pdsUrl: s.url, appviewUrl: "http://127.0.0.1:9" });
  await client.createAccount({ handle: "alice.test", password: OLD_PASSWORD });
  const before = await client.session();
  const after = await client.changePassword(OLD_PASSWORD, NEW_PASSWORD);
  assert.notEqual(after.refreshJwt, before?.refreshJwt);
  assert.deepEqual(await client.session(), after);
  const refresh = await xrpcPost(
    s.url,
    "com.atproto.server.refreshSession",
    undefined,
    bearer(after.refreshJwt),
  );
  assert.equal(refresh.status, 200);
  await refresh.body?.cancel();
});
