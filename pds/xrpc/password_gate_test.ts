// Password hashing is bounded (issue 36 item 3): createAccount looks at the invite code before
// it hashes anything, and hashes beyond the running and waiting places are refused with 503.

import assert from "node:assert/strict";
import { Hono } from "hono";
import { createTestApp, signUp, xrpcPost } from "../_test_helpers.ts";
import { createInviteCodes, disableInviteCode } from "../accounts/invites.ts";
import { INVALID_INVITE_MESSAGE } from "../accounts/accounts.ts";
import { PasswordGate, type PasswordWork, SCRYPT_WORK } from "../accounts/password_gate.ts";
import type { PdsContext, PdsEnv } from "../context.ts";
import { handleXrpcError } from "./errors.ts";
import { serverRoutes } from "./server.ts";

const PASSWORD = "correct horse battery";

function appWith(ctx: PdsContext, passwordGate: PasswordGate): Hono<PdsEnv> {
  const app = new Hono<PdsEnv>();
  app.onError(handleXrpcError(ctx.log));
  app.route("/", serverRoutes(ctx, { passwordGate }));
  return app;
}

/** Real scrypt, counted. */
function countedWork(): PasswordWork & { hashes: number } {
  const work = {
    hashes: 0,
    hash: (p: string) => (work.hashes++, SCRYPT_WORK.hash(p)),
    verify: (p: string, s: string) => (work.hashes++, SCRYPT_WORK.verify(p, s)),
    burn: (p: string) => (work.hashes++, SCRYPT_WORK.burn(p)),
  };
  return work;
}

Deno.test("createAccount refuses an unusable invite code before it hashes the password", async () => {
  await using t = await createTestApp({ env: { PDS_INVITE_REQUIRED: "true" } });
  const work = countedWork();
  const app = appWith(t.ctx, new PasswordGate({ running: 2, waiting: 8, work }));
  const [good, exhausted, disabled] = await createInviteCodes(t.ctx.kv, { count: 3, uses: 1 });
  await signUp(app, "first.test", { inviteCode: exhausted.code });
  await disableInviteCode(t.ctx.kv, disabled.code);
  work.hashes = 0;
  for (const inviteCode of [undefined, "", "nope-nope-nope", exhausted.code, disabled.code]) {
    const res = await xrpcPost(app, "com.atproto.server.createAccount", {
      handle: "second.test",
      password: PASSWORD,
      inviteCode,
    });
    assert.equal(res.status, 400, String(inviteCode));
    assert.deepEqual(await res.json(), {
      error: "InvalidInviteCode",
      message: INVALID_INVITE_MESSAGE,
    });
  }
  assert.equal(work.hashes, 0);
  await signUp(app, "second.test", { inviteCode: good.code });
  assert.equal(work.hashes, 1);
});

Deno.test("password checks beyond the running and waiting places are answered 503 with Retry-After", async () => {
  await using t = await createTestApp();
  await signUp(t.app, "hold.test");
  let release!: () => void;
  const released = new Promise<void>((resolve) => release = resolve);
  let started = 0;
  const blocking: PasswordWork = {
    hash: async () => (started++, await released, "scrypt$1$1$1$AA==$AA=="),
    verify: async () => (started++, await released, false),
    burn: async () => void (started++, await released),
  };
  const gate = new PasswordGate({ running: 2, waiting: 1, work: blocking });
  const app = appWith(t.ctx, gate);
  const login = (identifier: string) =>
    xrpcPost(app, "com.atproto.server.createSession", { identifier, password: "wrong guess" });
  // A known and an unknown identifier both take a place (uniform work); a third waits.
  const held = [login("hold.test"), login("nobody.test"), login("hold.test")];
  while (gate.queued < 1) await new Promise((r) => setTimeout(r, 1));
  assert.deepEqual([started, gate.active, gate.queued], [2, 2, 1]);
  const refused = [
    await login("hold.test"),
    await xrpcPost(app, "com.atproto.server.createAccount", {
      handle: "late.test",
      password: PASSWORD,
    }),
  ];
  for (const res of refused) {
    assert.equal(res.status, 503);
    assert.equal(res.headers.get("retry-after"), "1");
    assert.deepEqual(await res.json(), {
      error: "NotEnoughResources",
      message: "Too many password checks at once; retry in 1 second",
    });
  }
  release();
  const answers = await Promise.all(held);
  assert.deepEqual(answers.map((r) => r.status), [401, 401, 401]);
  await Promise.all(answers.map((r) => r.body?.cancel()));
  assert.deepEqual([started, gate.active, gate.queued], [3, 0, 0]);
});
