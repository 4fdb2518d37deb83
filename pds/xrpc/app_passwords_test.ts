// App passwords (docs/behaviour.md 4.1 rule 12; issue 37): createAppPassword, listAppPasswords,
// revokeAppPassword; a login with one is an `com.atproto.appPass` session that posts and reads
// but cannot change the account's credentials, and revoking it ends its sessions.

import assert from "node:assert/strict";
import { SocialClient, XrpcClientError } from "../../shared/client.ts";
import { decodeJwtUnverified } from "../../shared/jwt.ts";
import { signUp, startTestServer, xrpcGet, xrpcPost } from "../_test_helpers.ts";

const PASSWORD = "correct horse battery";
const APP_PASSWORD_SHAPE = /^[a-z2-7]{4}-[a-z2-7]{4}-[a-z2-7]{4}-[a-z2-7]{4}$/;

function bearer(token: string): Record<string, string> {
  return { authorization: `Bearer ${token}` };
}

async function json(res: Promise<Response>): Promise<{ status: number; body: unknown }> {
  const r = await res;
  const text = await r.text();
  return { status: r.status, body: text === "" ? null : JSON.parse(text) };
}

function login(url: string, password: string): Promise<Response> {
  return xrpcPost(url, "com.atproto.server.createSession", { identifier: "alice.test", password });
}

const BAD_SCOPE = { status: 400, body: { error: "InvalidToken", message: "Bad token scope" } };

Deno.test("createAppPassword answers the password once, listAppPasswords names it without it, revokeAppPassword removes it", async () => {
  await using s = await startTestServer();
  const alice = await signUp(s.url, "alice.test");
  const auth = bearer(alice.accessJwt);

  const created = await json(
    xrpcPost(s.url, "com.atproto.server.createAppPassword", { name: "reader" }, auth),
  );
  assert.equal(created.status, 200);
  const app = created.body as { name: string; password: string; createdAt: string };
  assert.deepEqual(Object.keys(app).sort(), ["createdAt", "name", "password"]);
  assert.equal(app.name, "reader");
  assert.match(app.password, APP_PASSWORD_SHAPE);
  assert.equal(new Date(app.createdAt).toISOString(), app.createdAt);

  const listed = await json(xrpcGet(s.url, "com.atproto.server.listAppPasswords", auth));
  assert.deepEqual(listed, {
    status: 200,
    body: { passwords: [{ name: "reader", createdAt: app.createdAt }] },
  });

  // Stored hashed: the plain password is nowhere in the store.
  const stored = [];
  for await (const e of s.ctx.kv.list({ prefix: ["app_password"] })) stored.push(e.value);
  assert.equal(stored.length, 1);
  assert.ok(!JSON.stringify(stored).includes(app.password));

  const dup = await json(
    xrpcPost(s.url, "com.atproto.server.createAppPassword", { name: "reader" }, auth),
  );
  assert.deepEqual(dup, {
    status: 400,
    body: { error: "InvalidRequest", message: 'App password name is already in use: "reader"' },
  });
  for (const name of ["", "x".repeat(65)]) {
    const bad = await json(xrpcPost(s.url, "com.atproto.server.createAppPassword", { name }, auth));
    assert.deepEqual(bad, {
      status: 400,
      body: {
        error: "InvalidRequest",
        message: `App password name must be 1 to 64 characters: ${JSON.stringify(name)}`,
      },
    });
  }

  const revoked = await json(
    xrpcPost(s.url, "com.atproto.server.revokeAppPassword", { name: "reader" }, auth),
  );
  assert.deepEqual(revoked, { status: 200, body: null });
  assert.deepEqual(await json(xrpcGet(s.url, "com.atproto.server.listAppPasswords", auth)), {
    status: 200,
    body: { passwords: [] },
  });
  // Revoking a name that is not there changes nothing (as on the reference host).
  assert.deepEqual(
    await json(xrpcPost(s.url, "com.atproto.server.revokeAppPassword", { name: "gone" }, auth)),
    { status: 200, body: null },
  );
});

Deno.test("createAppPassword allows at most 25 app passwords per account", async () => {
  await using s = await startTestServer();
  const alice = await signUp(s.url, "alice.test");
  const auth = bearer(alice.accessJwt);
  for (let i = 0; i < 25; i++) {
    const res = await xrpcPost(
      s.url,
      "com.atproto.server.createAppPassword",
      { name: `a${i}` },
      auth,
    );
    assert.equal(res.status, 200);
    await res.body?.cancel();
  }
  assert.deepEqual(
    await json(xrpcPost(s.url, "com.atproto.server.createAppPassword", { name: "one more" }, auth)),
    {
      status: 400,
      body: { error: "InvalidRequest", message: "Account already has 25 app passwords" },
    },
  );
});

Deno.test("an app password logs in with scope com.atproto.appPass, posts and reads, and the main password still works", async () => {
  await using s = await startTestServer();
  const alice = await signUp(s.url, "alice.test");
  const created = await (await xrpcPost(
    s.url,
    "com.atproto.server.createAppPassword",
    { name: "client" },
    bearer(alice.accessJwt),
  )).json();

  const res = await login(s.url, created.password);
  assert.equal(res.status, 200);
  const session = await res.json();
  assert.equal(session.did, alice.did);
  assert.equal(decodeJwtUnverified(session.accessJwt).claims.scope, "com.atproto.appPass");

  const post = await xrpcPost(s.url, "com.atproto.repo.createRecord", {
    repo: alice.did,
    collection: "app.social.feed.post",
    record: { text: "hi", createdAt: new Date().toISOString() },
  }, bearer(session.accessJwt));
  assert.equal(post.status, 200);
  await post.body?.cancel();
  const me = await json(xrpcGet(s.url, "com.atproto.server.getSession", bearer(session.accessJwt)));
  assert.equal(me.status, 200);

  // A refresh keeps the scope.
  const refreshed = await (await xrpcPost(
    s.url,
    "com.atproto.server.refreshSession",
    undefined,
    bearer(session.refreshJwt),
  )).json();
  assert.equal(decodeJwtUnverified(refreshed.accessJwt).claims.scope, "com.atproto.appPass");

  const main = await login(s.url, PASSWORD);
  assert.equal(main.status, 200);
  assert.equal(
    decodeJwtUnverified((await main.json()).accessJwt).claims.scope,
    "com.atproto.access",
  );
  const wrong = await json(login(s.url, "abcd-efgh-ijkl-mnop"));
  assert.deepEqual(wrong, {
    status: 401,
    body: { error: "AuthenticationRequired", message: "Invalid identifier or password" },
  });
});

Deno.test("an app-password session cannot change the password or handle, deactivate, or manage app passwords", async () => {
  await using s = await startTestServer();
  const alice = await signUp(s.url, "alice.test");
  const created = await (await xrpcPost(
    s.url,
    "com.atproto.server.createAppPassword",
    { name: "client" },
    bearer(alice.accessJwt),
  )).json();
  const session = await (await login(s.url, created.password)).json();
  const auth = bearer(session.accessJwt);

  const calls: [string, unknown][] = [
    ["app.social.server.changePassword", {
      currentPassword: PASSWORD,
      newPassword: "n3w password",
    }],
    ["com.atproto.identity.updateHandle", { handle: "mallory.test" }],
    ["com.atproto.server.createAppPassword", { name: "another" }],
    ["com.atproto.server.revokeAppPassword", { name: "client" }],
    ["com.atproto.server.deactivateAccount", {}],
  ];
  for (const [method, body] of calls) {
    assert.deepEqual(await json(xrpcPost(s.url, method, body, auth)), BAD_SCOPE, method);
  }
  assert.deepEqual(
    await json(xrpcGet(s.url, "com.atproto.server.listAppPasswords", auth)),
    BAD_SCOPE,
  );
  // Nothing changed: the handle, the password, the app password, the status.
  const me = await (await xrpcGet(s.url, "com.atproto.server.getSession", auth)).json();
  assert.deepEqual(me, { did: alice.did, handle: "alice.test", active: true });
  const main = await login(s.url, PASSWORD);
  assert.equal(main.status, 200);
  await main.body?.cancel();
  const again = await login(s.url, created.password);
  assert.equal(again.status, 200);
  await again.body?.cancel();
});

Deno.test("revokeAppPassword ends its sessions at their next refresh and the password stops working", async () => {
  await using s = await startTestServer();
  const alice = await signUp(s.url, "alice.test");
  const owner = bearer(alice.accessJwt);
  const created = await (await xrpcPost(
    s.url,
    "com.atproto.server.createAppPassword",
    { name: "client" },
    owner,
  )).json();
  const session = await (await login(s.url, created.password)).json();

  const revoked = await xrpcPost(
    s.url,
    "com.atproto.server.revokeAppPassword",
    { name: "client" },
    owner,
  );
  assert.equal(revoked.status, 200);
  await revoked.body?.cancel();

  assert.deepEqual(
    await json(
      xrpcPost(s.url, "com.atproto.server.refreshSession", undefined, bearer(session.refreshJwt)),
    ),
    { status: 400, body: { error: "ExpiredToken", message: "Token has been revoked" } },
  );
  assert.deepEqual(await json(login(s.url, created.password)), {
    status: 401,
    body: { error: "AuthenticationRequired", message: "Invalid identifier or password" },
  });
  // A new app password under the same name does not revive the old sessions.
  const renewed = await xrpcPost(
    s.url,
    "com.atproto.server.createAppPassword",
    { name: "client" },
    owner,
  );
  assert.equal(renewed.status, 200);
  await renewed.body?.cancel();
  assert.equal(
    (await json(
      xrpcPost(s.url, "com.atproto.server.refreshSession", undefined, bearer(session.refreshJwt)),
    )).status,
    400,
  );
  // The owner's own login is untouched.
  const mine = await xrpcPost(
    s.url,
    "com.atproto.server.refreshSession",
    undefined,
    bearer(alice.refreshJwt),
  );
  assert.equal(mine.status, 200);
  await mine.body?.cancel();
});

Deno.test("SocialClient creates, lists and revokes app passwords, and logs in with one", async () => {
  await using s = await startTestServer();
  const owner = new SocialClient({ pdsUrl: s.url, appviewUrl: "http://127.0.0.1:9" });
  await owner.createAccount({ handle: "alice.test", password: PASSWORD });
  const created = await owner.createAppPassword("phone");
  assert.equal(created.name, "phone");
  assert.match(created.password, APP_PASSWORD_SHAPE);
  assert.deepEqual(await owner.listAppPasswords(), {
    passwords: [{ name: "phone", createdAt: created.createdAt }],
  });

  const third = new SocialClient({ pdsUrl: s.url, appviewUrl: "http://127.0.0.1:9" });
  await third.login("alice.test", created.password);
  await assert.rejects(() => third.listAppPasswords(), (err: unknown) => {
    assert.ok(err instanceof XrpcClientError);
    assert.equal(err.status, 400);
    assert.equal(err.error, "InvalidToken");
    return true;
  });

  await owner.revokeAppPassword("phone");
  assert.deepEqual(await owner.listAppPasswords(), { passwords: [] });
});
