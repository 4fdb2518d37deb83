// Account creation, invite codes and describeServer (spec 2.12, 3.2, 4.1 rule 5, 5.3, 7).

import assert from "node:assert/strict";
import { createTestApp, signUp, startTestServer, xrpcGet, xrpcPost } from "../_test_helpers.ts";
import { createInviteCodes, disableInviteCode, getInviteCode } from "../accounts/invites.ts";
import { INVALID_INVITE_MESSAGE } from "../accounts/accounts.ts";
import { inviteUsePrefix } from "../store/keys.ts";

const INVITES_ON = { PDS_INVITE_REQUIRED: "true" };
const PASSWORD = "correct horse battery";

async function redemptions(kv: Deno.Kv, code: string): Promise<string[]> {
  const dids: string[] = [];
  for await (const e of kv.list<{ did: string }>({ prefix: inviteUsePrefix(code) })) {
    dids.push(e.value.did);
  }
  return dids;
}

Deno.test("describeServer reports the invite setting under both names, the DID and domains (spec 4.1)", async () => {
  await using t = await createTestApp({ env: INVITES_ON });
  const res = await xrpcGet(t.app, "com.atproto.server.describeServer");
  assert.equal(res.status, 200);
  assert.deepEqual(await res.json(), {
    did: "did:web:localhost%3A2583",
    availableUserDomains: [".test"],
    inviteCodeRequired: true,
    invite_code_required: true,
    links: {},
    contact: {},
  });
});

Deno.test("createAccount mints a did:plc and returns a session with a lower-case handle", async () => {
  await using t = await createTestApp();
  const res = await xrpcPost(t.app, "com.atproto.server.createAccount", {
    handle: "Alice.TEST",
    password: PASSWORD,
  });
  assert.equal(res.status, 200);
  const body = await res.json();
  assert.match(body.did, /^did:plc:[a-z2-7]{24}$/);
  assert.equal(body.handle, "alice.test");
  assert.equal(typeof body.accessJwt, "string");
  assert.equal(typeof body.refreshJwt, "string");
  // The default hook has written the repository's initial commit.
  const head = await xrpcGet(t.app, `com.atproto.sync.getLatestCommit?did=${body.did}`);
  assert.equal(head.status, 200);
  assert.match((await head.json()).rev, /^[a-z2-7]{13}$/);
  assert.deepEqual(t.lines.filter((l) => JSON.parse(l).level === "error"), []);
});

Deno.test("createAccount calls onAccountCreated once with the new DID and handle", async () => {
  const calls: string[][] = [];
  await using t = await createTestApp({
    hooks: { onAccountCreated: (did, handle) => Promise.resolve(void calls.push([did, handle])) },
  });
  const session = await signUp(t.app, "hooked.test");
  assert.deepEqual(calls, [[session.did, "hooked.test"]]);
});

Deno.test("createAccount rejects bad handles, foreign domains, taken handles and bad passwords", async () => {
  await using t = await createTestApp();
  await signUp(t.app, "taken.test");
  const cases: [Record<string, unknown>, string, string][] = [
    [{ handle: "", password: PASSWORD }, "InvalidHandle", "Handle is required"],
    [
      { handle: "bad_handle.test", password: PASSWORD },
      "InvalidHandle",
      'Handle is invalid: "bad_handle.test"',
    ],
    [
      { handle: "bob.example.com", password: PASSWORD },
      "UnsupportedDomain",
      'Handle must end with .test: "bob.example.com"',
    ],
    [
      { handle: "ab.test", password: PASSWORD },
      "InvalidHandle",
      'Handle must be one label of at least 3 characters before .test: "ab.test"',
    ],
    [
      { handle: "a.b.c.test", password: PASSWORD },
      "InvalidHandle",
      'Handle must be one label of at least 3 characters before .test: "a.b.c.test"',
    ],
    [
      { handle: "TAKEN.test", password: PASSWORD },
      "HandleNotAvailable",
      'Handle is already taken: "taken.test"',
    ],
    [
      { handle: "carol.test", password: "short" },
      "InvalidPassword",
      "Password must be between 8 and 256 characters",
    ],
    [
      { handle: "carol.test", password: "x".repeat(257) },
      "InvalidPassword",
      "Password must be between 8 and 256 characters",
    ],
    [{ handle: 42, password: PASSWORD }, "InvalidRequest", "Member handle must be a string"],
  ];
  for (const [body, error, message] of cases) {
    const res = await xrpcPost(t.app, "com.atproto.server.createAccount", body);
    assert.equal(res.status, 400, JSON.stringify(body));
    assert.deepEqual(await res.json(), { error, message }, JSON.stringify(body));
  }
});

Deno.test("50 concurrent createAccount requests racing for the last use of a code: exactly one wins (spec 4.1 rule 5)", async () => {
  // All 50 pass the invite pre-check at once; room for all of them to wait for a password hash,
  // so that the redemption, not the hashing bound (503), decides.
  await using s = await startTestServer({ env: { ...INVITES_ON, PDS_PASSWORD_HASH_QUEUE: "64" } });
  const [invite] = await createInviteCodes(s.ctx.kv, { count: 1, uses: 1 });
  const results = await Promise.all(
    Array.from({ length: 50 }, (_, i) =>
      xrpcPost(s.url, "com.atproto.server.createAccount", {
        handle: `racer${i}.test`,
        password: PASSWORD,
        inviteCode: invite.code,
      }).then(async (res) => ({ status: res.status, body: await res.json() }))),
  );
  const winners = results.filter((r) => r.status === 200);
  const losers = results.filter((r) => r.status !== 200);
  assert.equal(winners.length, 1);
  assert.equal(losers.length, 49);
  for (const loser of losers) {
    assert.equal(loser.status, 400);
    assert.deepEqual(loser.body, { error: "InvalidInviteCode", message: INVALID_INVITE_MESSAGE });
  }
  const after = await getInviteCode(s.ctx.kv, invite.code);
  assert.equal(after?.usedCount, 1);
  assert.equal(after?.maxUses, 1);
  assert.deepEqual(await redemptions(s.ctx.kv, invite.code), [winners[0].body.did]);
});

Deno.test("two concurrent requests for one handle with a two-use code make one account and use the code once", async () => {
  await using s = await startTestServer({ env: INVITES_ON });
  const [invite] = await createInviteCodes(s.ctx.kv, { count: 1, uses: 2 });
  const results = await Promise.all(
    [0, 1].map(() =>
      xrpcPost(s.url, "com.atproto.server.createAccount", {
        handle: "twin.test",
        password: PASSWORD,
        inviteCode: invite.code,
      }).then(async (res) => ({ status: res.status, body: await res.json() }))
    ),
  );
  const statuses = results.map((r) => r.status).sort();
  assert.deepEqual(statuses, [200, 400]);
  const loser = results.find((r) => r.status === 400)!;
  assert.deepEqual(loser.body, {
    error: "HandleNotAvailable",
    message: 'Handle is already taken: "twin.test"',
  });
  const after = await getInviteCode(s.ctx.kv, invite.code);
  assert.equal(after?.usedCount, 1);
  const winner = results.find((r) => r.status === 200)!;
  assert.deepEqual(await redemptions(s.ctx.kv, invite.code), [winner.body.did]);
});

Deno.test("missing, empty, unknown, disabled and exhausted invite codes give byte-identical responses (spec 7)", async () => {
  await using t = await createTestApp({ env: INVITES_ON });
  const [disabled, exhausted] = await createInviteCodes(t.ctx.kv, { count: 2, uses: 1 });
  assert.equal(await disableInviteCode(t.ctx.kv, disabled.code), true);
  await signUp(t.app, "first.test", { inviteCode: exhausted.code });

  const variants: Record<string, unknown>[] = [
    {},
    { inviteCode: "" },
    { inviteCode: "nope0-nope0-nope0" },
    { inviteCode: disabled.code },
    { inviteCode: exhausted.code },
  ];
  const responses = [];
  for (const [i, extra] of variants.entries()) {
    const res = await xrpcPost(t.app, "com.atproto.server.createAccount", {
      handle: `user${i}.test`,
      password: PASSWORD,
      ...extra,
    });
    responses.push({
      status: res.status,
      type: res.headers.get("content-type"),
      bytes: new Uint8Array(await res.arrayBuffer()),
    });
  }
  const expected = new TextEncoder().encode(
    JSON.stringify({ error: "InvalidInviteCode", message: INVALID_INVITE_MESSAGE }),
  );
  for (const r of responses) {
    assert.equal(r.status, 400);
    assert.equal(r.type, "application/json");
    assert.deepEqual(r.bytes, expected);
  }
  assert.equal((await getInviteCode(t.ctx.kv, disabled.code))?.usedCount, 0);
});

Deno.test("with invites off, createAccount ignores the code and startup warns once (spec 5.3)", async () => {
  await using s = await startTestServer();
  const session = await signUp(s.url, "free.test", { inviteCode: "whatever" });
  assert.match(session.did, /^did:plc:/);
  assert.deepEqual(inviteWarnings(s.lines), [
    "PDS_INVITE_REQUIRED is false: anyone can create an account",
  ]);
});

Deno.test("with invites required, startup does not warn about invites", async () => {
  await using s = await startTestServer({ env: INVITES_ON });
  assert.deepEqual(inviteWarnings(s.lines), []);
});

/** The startup warnings about invites (others, such as the CORS one, have tests of their own). */
function inviteWarnings(lines: string[]): string[] {
  return lines.map((l) => JSON.parse(l))
    .filter((l) => l.level === "warn" && String(l.msg).startsWith("PDS_INVITE_REQUIRED"))
    .map((l) => l.msg);
}
