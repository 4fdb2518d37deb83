// What cheap unauthenticated requests may cost (issue 36 item 3): sign-ups and logins are rate
// limited per client address (an IPv6 /64 being one client), answered with 429 and Retry-After.

import assert from "node:assert/strict";
import { createInviteCodes, disableInviteCode } from "../accounts/invites.ts";
import { INVALID_INVITE_MESSAGE } from "../accounts/accounts.ts";
import { ManualClock, signUp, startTestServer, xrpcPost } from "../_test_helpers.ts";

const PASSWORD = "correct horse battery";

async function call(url: string, nsid: string, address: string, body: unknown) {
  const res = await xrpcPost(url, nsid, body, { "x-forwarded-for": address });
  return { status: res.status, retryAfter: res.headers.get("retry-after"), body: await res.json() };
}

const tooMany = (what: string, seconds: number) => ({
  status: 429,
  retryAfter: String(seconds),
  body: {
    error: "RateLimitExceeded",
    message: `Too many ${what} from this address; retry in ${seconds} seconds`,
  },
});

Deno.test("sign-ups are limited per client address (PDS_SIGNUPS_PER_HOUR), an IPv6 /64 counting as one", async () => {
  const clock = new ManualClock();
  await using s = await startTestServer({
    env: { PDS_TRUST_PROXY: "true", PDS_SIGNUPS_PER_HOUR: "2" },
    now: clock.now,
  });
  const signUpFrom = (address: string, handle: string) =>
    call(s.url, "com.atproto.server.createAccount", address, { handle, password: PASSWORD });
  assert.equal((await signUpFrom("198.51.100.1", "amy.test")).status, 200);
  // A refused sign-up counts too: every attempt costs the server work.
  assert.equal((await signUpFrom("198.51.100.1", "x.test")).status, 400);
  assert.deepEqual(await signUpFrom("198.51.100.1", "ann.test"), tooMany("sign-ups", 1800));
  assert.equal((await signUpFrom("198.51.100.2", "ann.test")).status, 200);

  assert.equal((await signUpFrom("2001:db8:1:2::5", "bea.test")).status, 200);
  assert.equal((await signUpFrom("2001:DB8:1:2:ffff:ffff:ffff:1", "bob.test")).status, 200);
  assert.deepEqual(await signUpFrom("2001:db8:1:2:0:0:0:9", "bud.test"), tooMany("sign-ups", 1800));
  assert.equal((await signUpFrom("2001:db8:1:3::5", "bud.test")).status, 200);

  // The bucket refills at the hourly rate: one more sign-up after half an hour.
  clock.advance(1800);
  assert.equal((await signUpFrom("198.51.100.1", "cat.test")).status, 200);
  assert.deepEqual(await signUpFrom("198.51.100.1", "cid.test"), tooMany("sign-ups", 1800));
});

Deno.test("logins are limited per client address (PDS_LOGINS_PER_HOUR), unknown identifiers included", async () => {
  const clock = new ManualClock();
  await using s = await startTestServer({
    env: { PDS_TRUST_PROXY: "true", PDS_LOGINS_PER_HOUR: "3" },
    now: clock.now,
  });
  await signUp(s.url, "dora.test", {}); // from the test's own address
  const login = (address: string, identifier: string) =>
    call(s.url, "com.atproto.server.createSession", address, { identifier, password: PASSWORD });
  assert.equal((await login("203.0.113.5", "dora.test")).status, 200);
  assert.equal((await login("203.0.113.5", "nobody.test")).status, 401);
  assert.equal((await login("203.0.113.5", "dora.test")).status, 200);
  assert.deepEqual(await login("203.0.113.5", "dora.test"), tooMany("logins", 1200));
  assert.deepEqual(await login("203.0.113.5", "nobody.test"), tooMany("logins", 1200));
  assert.equal((await login("203.0.113.6", "dora.test")).status, 200);
  clock.advance(1200);
  assert.equal((await login("203.0.113.5", "dora.test")).status, 200);
});

Deno.test("createAccount still refuses every unusable invite code with the one uniform 400", async () => {
  await using s = await startTestServer({ env: { PDS_INVITE_REQUIRED: "true" } });
  const [used, disabled] = await createInviteCodes(s.ctx.kv, { count: 2, uses: 1 });
  await disableInviteCode(s.ctx.kv, disabled.code);
  await signUp(s.url, "first.test", { inviteCode: used.code });
  const expected = { error: "InvalidInviteCode", message: INVALID_INVITE_MESSAGE };
  for (const inviteCode of [undefined, "", "nope-nope-nope", used.code, disabled.code]) {
    const res = await xrpcPost(s.url, "com.atproto.server.createAccount", {
      handle: "second.test",
      password: PASSWORD,
      inviteCode,
    });
    assert.equal(res.status, 400, String(inviteCode));
    assert.deepEqual(await res.json(), expected);
  }
});
