/**
 * The private endpoints behind bearer tokens (spec 5.2, part 7): 401 `AuthMissing` without
 * a token, 401 `TokenInvalid` for a bad one, 403 `Forbidden` when the subject is not the
 * requested `did`, 200 with a valid token; public endpoints need none; with authentication off no
 * token is read.
 */

import assert from "node:assert/strict";
import { silentLogger } from "../../shared/log.ts";
import {
  accessClaims,
  ALICE,
  type Backend,
  DidDocServer,
  didDocument,
  endBackendTests,
  forEachBackend,
  makeSigner,
  openHarness,
  openQueryHarness,
  type QueryHarness,
} from "../_test_helpers.ts";
import { createTokenVerifier } from "../auth/verifier.ts";
import { loadAppviewConfig } from "../config.ts";

const BOB = "did:plc:bob2345678abcdefghijklm";
const MUTED = "did:plc:mutedabcdefghijklmnopqrs";

type Call = { path: (did: string) => string; init?: (did: string) => RequestInit };

const PRIVATE: Record<string, Call> = {
  timeline: { path: (did) => `/api/timeline/home?did=${did}` },
  notifications: { path: (did) => `/api/notifications?did=${did}` },
  count: { path: (did) => `/api/notifications/count?did=${did}` },
  seen: {
    path: () => "/api/notifications/seen",
    init: (did) => ({ method: "POST", body: JSON.stringify({ did, seenAt: null }) }),
  },
  mutes: { path: (did) => `/api/mutes?did=${did}` },
  mute: {
    path: () => "/api/mutes",
    init: (did) => ({ method: "POST", body: JSON.stringify({ did, subject: MUTED }) }),
  },
  muted: { path: (did) => `/api/mutes/${MUTED}?did=${did}` },
  unmute: { path: (did) => `/api/mutes/${MUTED}?did=${did}`, init: () => ({ method: "DELETE" }) },
};

async function authHarness(backend: Backend = "sqlite") {
  const signer = await makeSigner("query-auth-test-secret");
  const docs = new DidDocServer({ body: didDocument(signer.keyPair.publicKey) });
  const env = {
    APPVIEW_AUTH_REQUIRED: "true",
    APPVIEW_PUBLIC_URL: "http://localhost:3000",
    PDS_PUBLIC_URL: docs.url,
  };
  const verifier = createTokenVerifier(loadAppviewConfig(env), { log: silentLogger });
  const h = await openHarness(backend, { env, verifier });
  return {
    h,
    signer,
    docs,
    async [Symbol.asyncDispose]() {
      await h[Symbol.asyncDispose]();
      await docs.stop();
    },
  };
}

function send(
  h: QueryHarness,
  call: Call,
  did: string,
  authorization?: string,
) {
  const init = call.init?.(did) ?? {};
  const headers = new Headers(init.headers);
  if (authorization !== undefined) headers.set("authorization", authorization);
  return h.request(call.path(did), { ...init, headers });
}

// Refused before the index is reached: one backend.
Deno.test("private endpoints answer 401 AuthMissing without a bearer token", async () => {
  await using t = await authHarness();
  for (const [name, call] of Object.entries(PRIVATE)) {
    for (const header of [undefined, "Basic abc", "Bearer", "Bearer "]) {
      const { status, body } = await send(t.h, call, ALICE, header);
      assert.equal(status, 401, `${name} ${header}`);
      assert.equal(body.error, "AuthMissing");
    }
  }
});

// Refused before the index is reached: one backend.
Deno.test("private endpoints answer 401 TokenInvalid for a bad token", async () => {
  await using t = await authHarness();
  const other = await makeSigner("another-secret");
  const forged = await other.sign(accessClaims(Date.now()));
  const refresh = await t.signer.sign(accessClaims(Date.now(), { scope: "com.atproto.refresh" }));
  for (const [name, call] of Object.entries(PRIVATE)) {
    for (const token of ["not.a.jwt", forged, refresh]) {
      const { status, body } = await send(t.h, call, ALICE, `Bearer ${token}`);
      assert.equal(status, 401, name);
      assert.equal(body.error, "TokenInvalid");
    }
  }
});

// Refused before the index is reached: one backend.
Deno.test("private endpoints answer 403 Forbidden when the subject is not the did", async () => {
  await using t = await authHarness();
  const token = await t.signer.sign(accessClaims(Date.now()));
  for (const [name, call] of Object.entries(PRIVATE)) {
    for (const did of [BOB, `${ALICE}x`]) {
      const { status, body } = await send(t.h, call, did, `Bearer ${token}`);
      assert.equal(status, 403, `${name} ${did}`);
      assert.deepEqual(body, {
        error: "Forbidden",
        message: "Token subject does not match the requested did",
      });
    }
  }
});

forEachBackend(
  "private endpoints serve the token's subject with a valid token",
  async (backend) => {
    await using t = await authHarness(backend);
    const token = await t.signer.sign(accessClaims(Date.now()));
    const expected: Record<string, unknown> = {
      timeline: { posts: [], cursor: null },
      notifications: { notifications: [], cursor: null },
      count: { count: 0 },
      seen: { ok: true, updated: 0 },
      mutes: { profiles: [], cursor: null },
      mute: { ok: true, muted: true },
      muted: { muted: true },
      unmute: { ok: true, removed: true },
    };
    for (const [name, call] of Object.entries(PRIVATE)) {
      const { status, body } = await send(t.h, call, ALICE, `bearer ${token}`);
      assert.equal(status, 200, name);
      assert.deepEqual(body, expected[name], name);
    }
    assert.equal(t.docs.requests, 1);
  },
);

forEachBackend("public endpoints need no token while authentication is on", async (backend) => {
  await using t = await authHarness(backend);
  for (
    const path of [
      `/api/profile?did=${ALICE}`,
      "/api/profile/alice.test",
      "/api/search?q=x",
      `/api/followers?did=${ALICE}`,
      `/api/following?did=${ALICE}`,
      `/api/thread?uri=${encodeURIComponent(`at://${ALICE}/app.social.feed.post/3kabc`)}`,
      `/api/post/at://${ALICE}/app.social.feed.post/3kabc`,
    ]
  ) {
    const { status } = await t.h.request(path);
    assert.equal(status, 200, path);
  }
  assert.equal(t.docs.requests, 0);
});

forEachBackend(
  "with authentication off, private endpoints read no token and serve any did",
  async (backend) => {
    await using h = await openHarness(backend);
    for (const [name, call] of Object.entries(PRIVATE)) {
      for (const header of [undefined, "Bearer garbage"]) {
        const { status } = await send(h, call, BOB, header);
        assert.equal(status, 200, `${name} ${header}`);
      }
    }
  },
);

// Refused before the index is reached: one backend.
Deno.test("without a verifier while authentication is required, private endpoints fail closed", async () => {
  using h = openQueryHarness({ env: { APPVIEW_AUTH_REQUIRED: "true" }, verifier: null });
  for (const [name, call] of Object.entries(PRIVATE)) {
    const { status, body } = await send(h, call, ALICE, "Bearer x");
    assert.equal(status, 503, name);
    assert.equal(body.error, "AuthUnavailable");
  }
});

endBackendTests();
