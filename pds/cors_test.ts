// CORS of the account host (spec 5, docs/behaviour.md 10.1 and 11; PDS_CORS_ORIGINS). Unset, browser
// clients on any origin may call it (tokens are bearer headers, never cookies); with a list, only
// the listed origins. The headers are on every answer, and preflights are answered.

import assert from "node:assert/strict";
import { COLLECTION_POST, EMBED_IMAGES } from "../shared/nsid.ts";
import { makeTempDir } from "../runtime/_test_helpers.ts";
import {
  captureLogger,
  createTestApp,
  signUp,
  startTestServer,
  TEST_ENV,
} from "./_test_helpers.ts";
import { WARN_CORS_UNSET } from "./cors.ts";
import { startPds } from "./server.ts";

const LISTED = "https://app.example";
const CORS_LIST = { PDS_CORS_ORIGINS: `http://127.0.0.1:4000,${LISTED}` };

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
  assert.equal(denied.headers.get("access-control-expose-headers"), "Retry-After");
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
  const cid = await referenceBlob(pds.url, alice, (await uploaded.json()).blob);
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
  assert.equal(
    preflight.headers.get("access-control-allow-headers"),
    "Authorization,Content-Type,atproto-accept-labelers,atproto-proxy",
  );
  assert.equal(preflight.headers.get("access-control-allow-methods"), "GET,POST,OPTIONS");
  await preflight.body?.cancel();
});

Deno.test("the account host hands a handler's response on as it is: not copied around a body stream", async () => {
  for (const [env, allowed] of [[{}, "*"], [CORS_LIST, LISTED]] as const) {
    await using t = await createTestApp({ env });
    const made: { res?: Response } = {};
    t.app.get("/test/made", (c) => (made.res = c.json({ ok: true })));
    const res = await t.app.request("/test/made", { headers: { origin: LISTED } });
    assert.ok(res === made.res, `the handler's own response (${allowed})`);
    assert.equal(res.headers.get("access-control-allow-origin"), allowed);
    assert.deepEqual(await res.json(), { ok: true });
  }
});

Deno.test("with PDS_CORS_ORIGINS, a listed origin is echoed on success, error, blob and preflight answers", async () => {
  await using s = await startTestServer({ env: CORS_LIST });
  const alice = await signUp(s.url, "alice.test");
  const origin = { origin: LISTED };
  const auth = { authorization: `Bearer ${alice.accessJwt}` };

  const session = await fetch(`${s.url}/xrpc/com.atproto.server.getSession`, {
    headers: { ...origin, ...auth },
  });
  assert.equal(session.status, 200);
  assert.equal(session.headers.get("access-control-allow-origin"), LISTED);
  assert.deepEqual(varyList(session), ["Authorization", "Origin"]);
  assert.equal((await session.json()).did, alice.did);

  const denied = await fetch(`${s.url}/xrpc/com.atproto.server.getSession`, { headers: origin });
  assert.equal(denied.status, 401);
  assert.equal(denied.headers.get("access-control-allow-origin"), LISTED);
  // A browser client may read how long to wait after a 429.
  assert.equal(denied.headers.get("access-control-expose-headers"), "Retry-After");
  assert.deepEqual(varyList(denied), ["Origin"]);
  assert.equal((await denied.json()).error, "AuthMissing");

  const uploaded = await fetch(`${s.url}/xrpc/com.atproto.repo.uploadBlob`, {
    method: "POST",
    headers: { ...origin, ...auth, "content-type": "image/png" },
    body: new Uint8Array([4, 5, 6]),
  });
  assert.equal(uploaded.status, 200);
  const cid = await referenceBlob(s.url, alice, (await uploaded.json()).blob);
  const blob = await fetch(`${s.url}/xrpc/com.atproto.sync.getBlob?did=${alice.did}&cid=${cid}`, {
    headers: { origin: "http://127.0.0.1:4000" },
  });
  assert.equal(blob.status, 200);
  assert.equal(blob.headers.get("access-control-allow-origin"), "http://127.0.0.1:4000");
  assert.deepEqual(varyList(blob), ["Origin"]);
  assert.deepEqual(new Uint8Array(await blob.arrayBuffer()), new Uint8Array([4, 5, 6]));

  const preflight = await fetch(`${s.url}/xrpc/com.atproto.repo.createRecord`, {
    method: "OPTIONS",
    headers: {
      ...origin,
      "access-control-request-method": "POST",
      "access-control-request-headers": "authorization,content-type,atproto-proxy",
    },
  });
  assert.equal(preflight.status, 204);
  assert.equal(preflight.headers.get("access-control-allow-origin"), LISTED);
  assert.ok(varyList(preflight).includes("Origin"), preflight.headers.get("vary") ?? "");
  assert.equal(preflight.headers.get("access-control-max-age"), "600");
  assert.equal(preflight.headers.get("access-control-allow-methods"), "GET,POST,OPTIONS");
  const allowHeaders = (preflight.headers.get("access-control-allow-headers") ?? "")
    .toLowerCase().split(",");
  for (
    const header of ["authorization", "content-type", "atproto-accept-labelers", "atproto-proxy"]
  ) {
    assert.ok(allowHeaders.includes(header), header);
  }
  assert.equal(await preflight.text(), "");
});

Deno.test("with PDS_CORS_ORIGINS, an unlisted origin gets no Access-Control-Allow-Origin", async () => {
  await using s = await startTestServer({ env: CORS_LIST });
  const alice = await signUp(s.url, "alice.test");
  // Neither a look-alike nor the same host on another port or scheme is listed.
  for (const origin of ["https://evil.example", "http://127.0.0.1:4001", "http://app.example"]) {
    const session = await fetch(`${s.url}/xrpc/com.atproto.server.getSession`, {
      headers: { origin, authorization: `Bearer ${alice.accessJwt}` },
    });
    assert.equal(session.status, 200, origin);
    assert.equal(session.headers.get("access-control-allow-origin"), null, origin);
    assert.deepEqual(varyList(session), ["Authorization", "Origin"], origin);
    await session.body?.cancel();

    const denied = await fetch(`${s.url}/xrpc/com.atproto.server.getSession`, {
      headers: { origin },
    });
    assert.equal(denied.status, 401, origin);
    assert.equal(denied.headers.get("access-control-allow-origin"), null, origin);
    assert.equal(denied.headers.get("access-control-expose-headers"), null, origin);
    await denied.body?.cancel();

    const preflight = await fetch(`${s.url}/xrpc/com.atproto.repo.createRecord`, {
      method: "OPTIONS",
      headers: { origin, "access-control-request-method": "POST" },
    });
    assert.equal(preflight.headers.get("access-control-allow-origin"), null, origin);
    await preflight.body?.cancel();
  }
  // A request without Origin (not from a browser) is answered as ever, without the header.
  const plain = await fetch(`${s.url}/xrpc/com.atproto.server.describeServer`);
  assert.equal(plain.status, 200);
  assert.equal(plain.headers.get("access-control-allow-origin"), null);
  await plain.body?.cancel();
});

Deno.test("startup warns once when PDS_CORS_ORIGINS is unset, and not when it is set", async () => {
  const corsWarnings = (lines: string[]) =>
    lines.map((l) => JSON.parse(l)).filter((l) => l.level === "warn" && l.msg === WARN_CORS_UNSET);
  {
    await using s = await startTestServer();
    assert.equal(
      WARN_CORS_UNSET,
      "PDS_CORS_ORIGINS is not set: every web origin may call the account host",
    );
    assert.equal(corsWarnings(s.lines).length, 1);
    // Only at startup: answering requests adds none.
    const res = await fetch(`${s.url}/xrpc/com.atproto.server.describeServer`, {
      headers: { origin: "https://client.example" },
    });
    await res.body?.cancel();
    assert.equal(corsWarnings(s.lines).length, 1);
  }
  {
    await using s = await startTestServer({ env: CORS_LIST });
    const warnings = s.lines.map((l) => JSON.parse(l)).filter((l) => l.level === "warn");
    assert.deepEqual(warnings.filter((w) => /CORS/.test(w.msg)), []);
    assert.deepEqual(s.ctx.config.corsOrigins, ["http://127.0.0.1:4000", LISTED]);
  }
});

/** Makes a post embed `image` (an uploadBlob answer), so that getBlob serves it; its CID. */
async function referenceBlob(
  url: string,
  session: { did: string; accessJwt: string },
  image: { ref: { $link: string } },
): Promise<string> {
  const res = await fetch(`${url}/xrpc/com.atproto.repo.createRecord`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${session.accessJwt}` },
    body: JSON.stringify({
      repo: session.did,
      collection: COLLECTION_POST,
      record: {
        text: "a picture",
        createdAt: new Date().toISOString(),
        embed: { $type: EMBED_IMAGES, images: [{ alt: "", image }] },
      },
    }),
  });
  assert.equal(res.status, 200);
  await res.body?.cancel();
  return image.ref.$link;
}

/** The header names of a response's `Vary`, in order. */
function varyList(res: Response): string[] {
  return (res.headers.get("vary") ?? "").split(",").map((v) => v.trim()).filter((v) => v !== "");
}
