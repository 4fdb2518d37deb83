// Browser clients on any origin may call the account host (tokens are bearer headers, never
// cookies): CORS headers on every answer, and preflights (spec 5, DESIGN.md section 4).

import assert from "node:assert/strict";
import { COLLECTION_POST, EMBED_IMAGES } from "../shared/nsid.ts";
import { makeTempDir } from "../tests/_util.ts";
import { captureLogger, createTestApp, signUp, TEST_ENV } from "./_test_helpers.ts";
import { startPds } from "./server.ts";

Deno.test("the account host answers every origin: success, error, not found and preflight", async () => {
  await using dir = await makeTempDir();
  await using pds = await startPds({
    env: { ...TEST_ENV, DATA_DIR: dir.path, PDS_KV_PATH: `${dir.path}/pds.kv` },
    hostname: "127.0.0.1",
    port: 0,
    log: captureLogger().log,
  });
  const origin = { origin: "https://client.example" };
  const alice = await signUp(pds.url, "alice.test");

  // A procedure that succeeds: the JSON body arrives whole, with the header.
  const created = await fetch(`${pds.url}/xrpc/com.atproto.repo.createRecord`, {
    method: "POST",
    headers: {
      ...origin,
      "content-type": "application/json",
      authorization: `Bearer ${alice.accessJwt}`,
    },
    body: JSON.stringify({
      repo: alice.did,
      collection: "app.social.feed.post",
      record: { text: "hello", createdAt: new Date().toISOString() },
    }),
  });
  assert.equal(created.status, 200);
  assert.equal(created.headers.get("access-control-allow-origin"), "*");
  assert.equal(created.headers.get("content-type"), "application/json");
  const body = await created.json();
  assert.match(body.uri, new RegExp(`^at://${alice.did}/app\\.social\\.feed\\.post/`));

  // An error answer and an unknown method keep the header too.
  const denied = await fetch(`${pds.url}/xrpc/com.atproto.server.getSession`, { headers: origin });
  assert.equal(denied.status, 401);
  assert.equal(denied.headers.get("access-control-allow-origin"), "*");
  assert.equal((await denied.json()).error, "AuthMissing");
  const unknown = await fetch(`${pds.url}/xrpc/com.example.nothing`, { headers: origin });
  assert.equal(unknown.status, 501);
  assert.equal(unknown.headers.get("access-control-allow-origin"), "*");
  await unknown.body?.cancel();

  // Answers the handlers build themselves, not through Hono's helpers: a blob, a CAR, a HEAD.
  const uploaded = await fetch(`${pds.url}/xrpc/com.atproto.repo.uploadBlob`, {
    method: "POST",
    headers: { ...origin, "content-type": "image/png", authorization: `Bearer ${alice.accessJwt}` },
    body: new Uint8Array([1, 2, 3]),
  });
  assert.equal(uploaded.status, 200);
  assert.equal(uploaded.headers.get("access-control-allow-origin"), "*");
  const image = (await uploaded.json()).blob;
  const cid = image.ref.$link;
  // getBlob serves a blob a record references.
  const referenced = await fetch(`${pds.url}/xrpc/com.atproto.repo.createRecord`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${alice.accessJwt}` },
    body: JSON.stringify({
      repo: alice.did,
      collection: COLLECTION_POST,
      record: {
        text: "a picture",
        createdAt: new Date().toISOString(),
        embed: { $type: EMBED_IMAGES, images: [{ alt: "", image }] },
      },
    }),
  });
  assert.equal(referenced.status, 200);
  await referenced.body?.cancel();
  const blob = await fetch(
    `${pds.url}/xrpc/com.atproto.sync.getBlob?did=${alice.did}&cid=${cid}`,
    { headers: origin },
  );
  assert.equal(blob.status, 200);
  assert.equal(blob.headers.get("access-control-allow-origin"), "*");
  assert.deepEqual(new Uint8Array(await blob.arrayBuffer()), new Uint8Array([1, 2, 3]));
  for (const method of ["GET", "HEAD"]) {
    const car = await fetch(`${pds.url}/xrpc/com.atproto.sync.getRepo?did=${alice.did}`, {
      method,
      headers: origin,
    });
    assert.equal(car.status, 200, method);
    assert.equal(car.headers.get("content-type"), "application/vnd.ipld.car", method);
    assert.equal(car.headers.get("access-control-allow-origin"), "*", method);
    await car.body?.cancel();
  }

  // A preflight.
  const preflight = await fetch(`${pds.url}/xrpc/com.atproto.repo.createRecord`, {
    method: "OPTIONS",
    headers: {
      ...origin,
      "access-control-request-method": "POST",
      "access-control-request-headers": "authorization,content-type",
    },
  });
  assert.equal(preflight.status, 204);
  assert.equal(preflight.headers.get("access-control-allow-origin"), "*");
  assert.equal(preflight.headers.get("access-control-max-age"), "600");
  assert.equal(preflight.headers.get("access-control-allow-headers"), "authorization,content-type");
  assert.match(preflight.headers.get("access-control-allow-methods") ?? "", /POST/);
  await preflight.body?.cancel();
});

Deno.test("the account host hands a handler's response on as it is: not copied around a body stream", async () => {
  await using t = await createTestApp();
  const made: { res?: Response } = {};
  t.app.get("/test/made", (c) => (made.res = c.json({ ok: true })));
  const res = await t.app.request("/test/made", { headers: { origin: "https://client.example" } });
  assert.ok(res === made.res, "the handler's own response");
  assert.equal(res.headers.get("access-control-allow-origin"), "*");
  assert.deepEqual(await res.json(), { ok: true });
});
