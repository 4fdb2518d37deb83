// Issued tokens against spec 5.1 and 8: every claim, both lifetimes, and verification of the
// access token with the key published in /.well-known/did.json.

import assert from "node:assert/strict";
import { decodeJwtUnverified, importVerifyKey, verifyJwt } from "../../shared/jwt.ts";
import { parseMultikey } from "../../shared/multikey.ts";
import { signUp, startTestServer, xrpcPost } from "../_test_helpers.ts";

Deno.test("issued tokens carry exactly the spec 5.1 claims and lifetimes; the access token verifies with the did.json key", async () => {
  await using s = await startTestServer({ env: { APPVIEW_PUBLIC_URL: "http://localhost:3000" } });
  const before = Math.floor(Date.now() / 1000);
  const session = await signUp(s.url, "tess.test");
  const login = await xrpcPost(s.url, "com.atproto.server.createSession", {
    identifier: "tess.test",
    password: "correct horse battery",
  }).then((r) => r.json());
  const after = Math.floor(Date.now() / 1000);
  const pdsDid = `did:web:127.0.0.1%3A${new URL(s.url).port}`;

  for (const { accessJwt, refreshJwt } of [session, login]) {
    const access = decodeJwtUnverified(accessJwt);
    assert.deepEqual(access.header, { alg: "ES256", typ: "at+jwt" });
    assert.deepEqual(Object.keys(access.claims).sort(), [
      "aud",
      "exp",
      "iat",
      "iss",
      "jti",
      "scope",
      "sub",
    ]);
    assert.equal(access.claims.iss, pdsDid);
    assert.equal(access.claims.sub, session.did);
    assert.equal(access.claims.aud, "did:web:localhost%3A3000");
    assert.equal(access.claims.scope, "com.atproto.access");
    assert.ok(access.claims.iat! >= before && access.claims.iat! <= after);
    assert.equal(access.claims.exp! - access.claims.iat!, 3600);
    assert.match(access.claims.jti!, /^[0-9a-f]{32}$/);

    const refresh = decodeJwtUnverified(refreshJwt);
    assert.deepEqual(refresh.header, { alg: "ES256", typ: "refresh+jwt" });
    assert.equal(refresh.claims.iss, pdsDid);
    assert.equal(refresh.claims.sub, session.did);
    assert.equal(refresh.claims.aud, pdsDid);
    assert.equal(refresh.claims.scope, "com.atproto.refresh");
    assert.ok(refresh.claims.iat! >= before && refresh.claims.iat! <= after);
    assert.equal(refresh.claims.exp! - refresh.claims.iat!, 90 * 24 * 60 * 60);
    assert.match(refresh.claims.jti!, /^[0-9a-f]{64}$/);
  }
  assert.notEqual(
    decodeJwtUnverified(session.refreshJwt).claims.jti,
    decodeJwtUnverified(login.refreshJwt).claims.jti,
  );

  // The index's view: fetch did.json, take the first verificationMethod key, verify.
  const doc = await fetch(`${s.url}/.well-known/did.json`).then((r) => r.json());
  assert.equal(doc.id, pdsDid);
  const method = doc.verificationMethod.find((m: { publicKeyMultibase?: string }) =>
    m.publicKeyMultibase
  );
  const key = await importVerifyKey(parseMultikey(method.publicKeyMultibase));
  const claims = await verifyJwt(session.accessJwt, key);
  assert.equal(claims.sub, session.did);
  assert.deepEqual(
    await verifyJwt(login.refreshJwt, key).then((c) => c.scope),
    "com.atproto.refresh",
  );
});
