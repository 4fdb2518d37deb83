/**
 * The client refresh contract of spec 5.4 against a real account host and index: an expired
 * access token is refreshed once and the call repeated; concurrent failures share one
 * refreshSession; a revoked refresh token ends in "log in again" after one attempt; login and
 * refresh failures never trigger a refresh.
 */

import assert from "node:assert/strict";
import {
  LoginRequiredError,
  MemorySessionStore,
  type Session,
  type SocialClient,
  XrpcClientError,
} from "../shared/client.ts";
import { startSystem, type TestSystem } from "./_system.ts";

const HOUR_MS = 3600_000;

/** Counts requests per XRPC/API path. */
function countingFetch(): { fetch: typeof fetch; count(path: string): number } {
  const counts = new Map<string, number>();
  return {
    fetch: (input, init) => {
      const url = new URL(input instanceof Request ? input.url : String(input));
      counts.set(url.pathname, (counts.get(url.pathname) ?? 0) + 1);
      return fetch(input, init);
    },
    count: (path) => counts.get(path) ?? 0,
  };
}

const REFRESH = "/xrpc/com.atproto.server.refreshSession";

/**
 * A system whose account host clock can be set back, and an account logged in while it was two
 * hours behind: its access token (1 h) is expired for both servers, its refresh token valid.
 */
async function expiredSession(): Promise<{
  sys: TestSystem;
  session: Session;
  did: string;
}> {
  let offset = 0;
  const sys = await startSystem({ pdsNow: () => Date.now() + offset });
  const setup = sys.client();
  await setup.createAccount({ handle: "carol.test", password: "carol-password-1" });
  offset = -2 * HOUR_MS;
  const session = await setup.login("carol.test", "carol-password-1");
  offset = 0;
  return { sys, session, did: session.did };
}

function clientWith(sys: TestSystem, session: Session | null, f: typeof fetch): SocialClient {
  return sys.client({ store: new MemorySessionStore(session), fetch: f });
}

Deno.test("an expired access token is refreshed once and the call succeeds (index and account host)", async () => {
  const { sys, session } = await expiredSession();
  await using _ = sys;
  const counter = countingFetch();
  const client = clientWith(sys, session, counter.fetch);

  const page = await client.timeline();
  assert.deepEqual(page.posts, []);
  assert.equal(counter.count(REFRESH), 1);
  assert.equal(counter.count("/api/timeline/home"), 2, "the failed call is repeated once");
  const fresh = await client.session();
  assert.notEqual(fresh?.accessJwt, session.accessJwt);
  assert.notEqual(fresh?.refreshJwt, session.refreshJwt);

  // The account host's own expired-token error (400 ExpiredToken) also refreshes.
  const expired = { ...fresh!, accessJwt: session.accessJwt };
  const other = clientWith(sys, expired, counter.fetch);
  const created = await other.post({ text: "after a refresh" });
  assert.match(created.uri, /^at:\/\/did:plc:[a-z2-7]{24}\/app\.social\.feed\.post\//);
  assert.equal(counter.count(REFRESH), 2);
  assert.equal(counter.count("/xrpc/com.atproto.repo.createRecord"), 2);
});

Deno.test("ten concurrent calls with an expired token cause exactly one refreshSession", async () => {
  const { sys, session } = await expiredSession();
  await using _ = sys;
  const counter = countingFetch();
  const client = clientWith(sys, session, counter.fetch);
  const results = await Promise.all(
    Array.from({ length: 10 }, () => client.notificationCount()),
  );
  assert.deepEqual(results, Array(10).fill({ count: 0 }));
  assert.equal(counter.count(REFRESH), 1);
  assert.equal(counter.count("/api/notifications/count"), 20);
});

Deno.test("a revoked refresh token ends in 'log in again' after one attempt and clears the session", async () => {
  const { sys, session } = await expiredSession();
  await using _ = sys;
  // Another client holding the same session logs out: the refresh token is revoked.
  await clientWith(sys, session, fetch).logout();
  const counter = countingFetch();
  const store = new MemorySessionStore(session);
  const client = sys.client({ store, fetch: counter.fetch });
  await assert.rejects(client.timeline(), (err: unknown) => {
    assert.ok(err instanceof LoginRequiredError);
    assert.match(err.message, /log in again/);
    return true;
  });
  assert.equal(counter.count(REFRESH), 1);
  assert.equal(counter.count("/api/timeline/home"), 1);
  assert.equal(store.load(), null);
  await assert.rejects(client.timeline(), LoginRequiredError);
  assert.equal(counter.count(REFRESH), 1, "no session: no further refresh");
});

Deno.test("createSession and refreshSession failures never trigger a refresh", async () => {
  await using sys = await startSystem();
  const counter = countingFetch();
  const client = clientWith(sys, null, counter.fetch);
  await client.createAccount({ handle: "dave.test", password: "dave-password-1" });
  await assert.rejects(client.login("dave.test", "wrong-password"), (err: unknown) => {
    assert.ok(err instanceof XrpcClientError);
    assert.equal(err.status, 401);
    assert.equal(err.error, "AuthenticationRequired");
    return true;
  });
  assert.equal(counter.count(REFRESH), 0);

  // A refresh that fails is not itself refreshed: one attempt, then "log in again".
  const broken = clientWith(sys, {
    did: "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa",
    handle: "dave.test",
    accessJwt: "not-a-token",
    refreshJwt: "not-a-token-either",
  }, counter.fetch);
  await assert.rejects(broken.timeline(), LoginRequiredError);
  assert.equal(counter.count(REFRESH), 1);
});
