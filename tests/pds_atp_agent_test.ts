// An off-the-shelf atproto client against the account host (docs/behaviour.md 10.1: an
// off-the-shelf atproto client works unchanged, its automatic session refresh included;
// spec 5.1 token lifetimes).

import assert from "node:assert/strict";
import { AtpAgent, type AtpSessionEvent } from "@atproto/api";
import { decodeJwtUnverified } from "../shared/jwt.ts";
import { offsetClock, startTestServer } from "../pds/_test_helpers.ts";
import { REFRESH_GRACE_MS } from "../pds/accounts/sessions.ts";

const PASSWORD = "correct horse battery";

Deno.test("AtpAgent creates an account, logs in, resumes a session and recovers from an expired access token", async () => {
  const clock = offsetClock();
  await using s = await startTestServer({ now: clock.now });

  const signup = new AtpAgent({ service: s.url });
  const created = await signup.createAccount({ handle: "agent.test", password: PASSWORD });
  assert.match(created.data.did, /^did:plc:[a-z2-7]{24}$/);
  assert.equal(created.data.handle, "agent.test");
  assert.equal(signup.session?.did, created.data.did);

  const events: AtpSessionEvent[] = [];
  const agent = new AtpAgent({ service: s.url, persistSession: (evt) => void events.push(evt) });
  const login = await agent.login({ identifier: "agent.test", password: PASSWORD });
  assert.equal(login.data.did, created.data.did);
  assert.deepEqual(events, ["create"]);
  const stored = { ...agent.session! };

  const resumed = new AtpAgent({ service: s.url, persistSession: (evt) => void events.push(evt) });
  await resumed.resumeSession(stored);
  assert.equal(resumed.session?.did, created.data.did);
  assert.equal(resumed.session?.handle, "agent.test");

  // Two hours later the access token has expired; the agent refreshes by itself and retries.
  clock.advance(2 * 60 * 60 * 1000);
  const me = await resumed.com.atproto.server.getSession();
  assert.equal(me.data.did, created.data.did);
  assert.equal(events.at(-1), "update");
  assert.notEqual(resumed.session?.accessJwt, stored.accessJwt);
  assert.notEqual(resumed.session?.refreshJwt, stored.refreshJwt);
  const fresh = decodeJwtUnverified(resumed.session!.accessJwt).claims;
  assert.ok(fresh.exp! * 1000 > clock.now(), "the new access token is valid at the new time");

  // The identity methods work through the client too.
  const resolved = await resumed.com.atproto.identity.resolveHandle({ handle: "agent.test" });
  assert.equal(resolved.data.did, created.data.did);
  const described = await resumed.com.atproto.server.describeServer();
  assert.deepEqual(described.data.availableUserDomains, [".test"]);
});

Deno.test("AtpAgent with a rotated-out refresh token ends its session", async () => {
  const clock = offsetClock();
  await using s = await startTestServer({ now: clock.now });
  const first = new AtpAgent({ service: s.url });
  await first.createAccount({ handle: "twice.test", password: PASSWORD });
  const copy = { ...first.session! };

  // The first agent refreshes; a second one still holding the old pair beyond the grace window
  // of a rotated-out refresh token is then rejected.
  clock.advance(2 * 60 * 60 * 1000);
  await first.com.atproto.server.getSession();
  clock.advance(REFRESH_GRACE_MS + 1);
  const events: AtpSessionEvent[] = [];
  const second = new AtpAgent({ service: s.url, persistSession: (evt) => void events.push(evt) });
  await assert.rejects(second.resumeSession(copy));
  assert.equal(events.at(-1), "expired");
});
