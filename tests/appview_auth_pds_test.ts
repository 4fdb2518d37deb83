// Spec 5.1 + 5.2 end to end: tokens issued by a real account host (`startPds`, temp KV file,
// port 0) checked by the index's verifier, which reads the key from the host's
// `/.well-known/did.json`. Covers issue 8's "real account host" rows: access token accepted,
// refresh token refused, subject check, host down at startup, and key rotation after a restart
// with a new PDS_JWT_SECRET.

import assert from "node:assert/strict";
import { Hono } from "hono";
import { silentLogger } from "../shared/log.ts";
import { onApiError } from "../appview/api/errors.ts";
import { loadAppviewConfig } from "../appview/config.ts";
import {
  type AuthEnv,
  checkSubject,
  createTokenVerifier,
  requireViewer,
  type TokenVerifier,
} from "../appview/auth/verifier.ts";
import { type RunningPds, startPds } from "../pds/server.ts";
import { freePort, makeTempDir } from "./_util.ts";

const APPVIEW_PUBLIC_URL = "http://localhost:3000";
const PASSWORD = "correct horse battery staple";

function pdsEnv(kvPath: string, secret: string): Record<string, string> {
  return { PDS_JWT_SECRET: secret, PDS_KV_PATH: kvPath, APPVIEW_PUBLIC_URL };
}

async function xrpc(
  pds: RunningPds,
  method: string,
  body: unknown,
): Promise<Record<string, string>> {
  const res = await fetch(`${pds.url}/xrpc/${method}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const json = await res.json();
  assert.equal(res.status, 200, JSON.stringify(json));
  return json;
}

function privateApp(verifier: TokenVerifier): Hono<AuthEnv> {
  const app = new Hono<AuthEnv>();
  app.onError(onApiError(silentLogger));
  app.get("/api/timeline/home", requireViewer(verifier), (c) => {
    checkSubject(c, c.req.query("did") ?? "");
    return c.json({ viewer: c.get("viewerDid") });
  });
  return app;
}

async function call(app: Hono<AuthEnv>, token: string, did: string) {
  const res = await app.request(`/api/timeline/home?did=${encodeURIComponent(did)}`, {
    headers: { authorization: `Bearer ${token}` },
  });
  return { status: res.status, body: await res.json() };
}

/** A fetch that counts the DID document requests it makes. */
function countingFetch(): { fetch: typeof fetch; count: () => number } {
  let n = 0;
  return {
    fetch: (input, init) => {
      if (String(input).endsWith("/.well-known/did.json")) n++;
      return fetch(input, init);
    },
    count: () => n,
  };
}

Deno.test("tokens of a real account host pass the index verifier; refresh tokens do not", async () => {
  await using dir = await makeTempDir();
  await using pds = await startPds({
    env: pdsEnv(`${dir.path}/pds.kv`, "first jwt secret, 32 chars long!"),
    hostname: "127.0.0.1",
    port: 0,
    log: silentLogger,
  });
  const session = await xrpc(pds, "com.atproto.server.createAccount", {
    handle: "alice.test",
    password: PASSWORD,
  });
  const config = loadAppviewConfig({ APPVIEW_PUBLIC_URL, PDS_INTERNAL_URL: `${pds.url}/` });
  const verifier = createTokenVerifier(config, { log: silentLogger });
  await verifier.keySource.warmUp();
  assert.notEqual(verifier.keySource.current(), null);
  const app = privateApp(verifier);

  assert.deepEqual(await call(app, session.accessJwt, session.did), {
    status: 200,
    body: { viewer: session.did },
  });
  assert.deepEqual(await call(app, session.refreshJwt, session.did), {
    status: 401,
    body: {
      error: "TokenInvalid",
      message: "Token scope is not com.atproto.access or com.atproto.appPass: com.atproto.refresh",
    },
  });
  for (const did of ["did:plc:someoneelse", `${session.did}0`, session.did.slice(0, -1)]) {
    assert.deepEqual(await call(app, session.accessJwt, did), {
      status: 403,
      body: { error: "Forbidden", message: "Token subject does not match the requested did" },
    });
  }

  // An index at another public URL (another service DID) refuses the token as TokenInvalid.
  const other = createTokenVerifier(
    loadAppviewConfig({ APPVIEW_PUBLIC_URL: "http://localhost:4000", PDS_INTERNAL_URL: pds.url }),
    { log: silentLogger },
  );
  assert.deepEqual(await call(privateApp(other), session.accessJwt, session.did), {
    status: 401,
    body: {
      error: "TokenInvalid",
      message: "Token audience is not did:web:localhost%3A4000: did:web:localhost%3A3000",
    },
  });
});

Deno.test("an app password's access token reads the member's private views on the index", async () => {
  await using dir = await makeTempDir();
  await using pds = await startPds({
    env: pdsEnv(`${dir.path}/pds.kv`, "first jwt secret, 32 chars long!"),
    hostname: "127.0.0.1",
    port: 0,
    log: silentLogger,
  });
  const owner = await xrpc(pds, "com.atproto.server.createAccount", {
    handle: "alice.test",
    password: PASSWORD,
  });
  const created = await fetch(`${pds.url}/xrpc/com.atproto.server.createAppPassword`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${owner.accessJwt}` },
    body: JSON.stringify({ name: "third-party reader" }),
  });
  assert.equal(created.status, 200);
  const { password } = await created.json();
  const session = await xrpc(pds, "com.atproto.server.createSession", {
    identifier: "alice.test",
    password,
  });
  const config = loadAppviewConfig({ APPVIEW_PUBLIC_URL, PDS_INTERNAL_URL: pds.url });
  const app = privateApp(createTokenVerifier(config, { log: silentLogger }));

  assert.deepEqual(await call(app, session.accessJwt, owner.did), {
    status: 200,
    body: { viewer: owner.did },
  });
  // Still only for its own account.
  assert.deepEqual(await call(app, session.accessJwt, "did:plc:someoneelse"), {
    status: 403,
    body: { error: "Forbidden", message: "Token subject does not match the requested did" },
  });
});

Deno.test("account host down at startup, then up: the first request fetches the key", async () => {
  await using dir = await makeTempDir();
  const port = freePort();
  const counter = countingFetch();
  const config = loadAppviewConfig({
    APPVIEW_PUBLIC_URL,
    PDS_PUBLIC_URL: `http://127.0.0.1:${port}`,
  });
  const verifier = createTokenVerifier(config, { log: silentLogger, fetch: counter.fetch });
  await verifier.keySource.warmUp();
  assert.equal(verifier.keySource.current(), null);
  const app = privateApp(verifier);

  await using pds = await startPds({
    env: pdsEnv(`${dir.path}/pds.kv`, "first jwt secret, 32 chars long!"),
    hostname: "127.0.0.1",
    port,
    log: silentLogger,
  });
  const session = await xrpc(pds, "com.atproto.server.createAccount", {
    handle: "bob.test",
    password: PASSWORD,
  });
  assert.equal(counter.count(), 1);
  assert.deepEqual(await call(app, session.accessJwt, session.did), {
    status: 200,
    body: { viewer: session.did },
  });
  assert.equal(counter.count(), 2);
  await pds.close();
  // Key cached: the host being down again does not matter for a known token.
  assert.equal((await call(app, session.accessJwt, session.did)).status, 200);
  assert.equal(counter.count(), 2);
});

Deno.test("account host restarted with a new PDS_JWT_SECRET: new tokens pass after one re-fetch", async () => {
  await using dir = await makeTempDir();
  const kvPath = `${dir.path}/pds.kv`;
  let nowMs = Date.now();
  const counter = countingFetch();
  const first = await startPds({
    env: pdsEnv(kvPath, "first jwt secret, 32 chars long!"),
    hostname: "127.0.0.1",
    port: 0,
    log: silentLogger,
  });
  const port = new URL(first.url).port;
  const oldSession = await xrpc(first, "com.atproto.server.createAccount", {
    handle: "carol.test",
    password: PASSWORD,
  });
  const config = loadAppviewConfig({ APPVIEW_PUBLIC_URL, PDS_INTERNAL_URL: first.url });
  const verifier = createTokenVerifier(config, {
    log: silentLogger,
    fetch: counter.fetch,
    now: () => nowMs,
  });
  await verifier.keySource.warmUp();
  const app = privateApp(verifier);
  assert.equal((await call(app, oldSession.accessJwt, oldSession.did)).status, 200);
  await first.close();

  await using second = await startPds({
    env: pdsEnv(kvPath, "second jwt secret, 32 chars long"),
    hostname: "127.0.0.1",
    port: Number(port),
    log: silentLogger,
  });
  const session = await xrpc(second, "com.atproto.server.createSession", {
    identifier: "carol.test",
    password: PASSWORD,
  });
  nowMs += 61_000;
  assert.equal(counter.count(), 1);
  assert.deepEqual(await call(app, session.accessJwt, session.did), {
    status: 200,
    body: { viewer: session.did },
  });
  assert.equal(counter.count(), 2);
  // The old key's token is now refused, without another fetch within 60 s.
  assert.deepEqual(await call(app, oldSession.accessJwt, oldSession.did), {
    status: 401,
    body: { error: "TokenInvalid", message: "Token signature is invalid" },
  });
  assert.equal(counter.count(), 2);
});
