// Identity: /.well-known/did.json (spec 4.1, 5.1), resolveHandle by GET and POST (spec 4.1,
// 4.3 rule 1), account DID documents (docs/behaviour.md 10.4 "DIDs").

import assert from "node:assert/strict";
import { base58btc } from "multiformats/bases/base58";
import { encodeMultikey } from "../../shared/multikey.ts";
import { verifyCompact } from "../../shared/keys.ts";
import { encodeCbor } from "../../shared/cbor.ts";
import { base64url } from "jose";
import { verifySignature } from "@atproto/crypto";
import { createTestApp, signUp, xrpcGet, xrpcPost } from "../_test_helpers.ts";
import {
  loadPlcRotationKey,
  plcDidForOperation,
  type PlcLog,
  plcOperationCid,
} from "../accounts/plc.ts";
import { plcOpKey } from "../store/keys.ts";

Deno.test("did.json publishes the service key as 0x80 0x12 + x + y (spec 5.1)", async () => {
  await using t = await createTestApp();
  const res = await t.app.request("/.well-known/did.json");
  assert.equal(res.status, 200);
  assert.equal(res.headers.get("content-type"), "application/json");
  const doc = await res.json();
  const did = "did:web:localhost%3A2583";
  assert.equal(doc.id, did);
  assert.deepEqual(doc.verificationMethod.length, 1);
  const [method] = doc.verificationMethod;
  assert.equal(method.id, `${did}#atproto`);
  assert.equal(method.type, "Multikey");
  assert.equal(method.controller, did);
  const bytes = base58btc.decode(method.publicKeyMultibase);
  const pub = t.ctx.serviceKeys.keyPair.publicKey;
  assert.deepEqual(bytes, Uint8Array.of(0x80, 0x12, ...pub.subarray(1)));
  assert.deepEqual(doc.service, [{
    id: "#atproto_pds",
    type: "AtprotoPersonalDataServer",
    serviceEndpoint: "http://localhost:2583",
  }]);
});

Deno.test("resolveHandle answers {did, handle} by GET and POST, for handles and DIDs", async () => {
  await using t = await createTestApp();
  const { did } = await signUp(t.app, "uma.test");
  const expected = { did, handle: "uma.test" };
  for (const value of ["uma.test", "UMA.test", did]) {
    const get = await xrpcGet(
      t.app,
      `com.atproto.identity.resolveHandle?handle=${encodeURIComponent(value)}`,
    );
    assert.equal(get.status, 200, value);
    assert.deepEqual(await get.json(), expected);
    const post = await xrpcPost(t.app, "com.atproto.identity.resolveHandle", { handle: value });
    assert.equal(post.status, 200, value);
    assert.deepEqual(await post.json(), expected);
  }
});

Deno.test("resolveHandle answers 400 HandleNotFound for unknown handles and DIDs", async () => {
  await using t = await createTestApp();
  for (const value of ["ghost.test", "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", "not a handle"]) {
    const res = await xrpcPost(t.app, "com.atproto.identity.resolveHandle", { handle: value });
    assert.equal(res.status, 400);
    assert.deepEqual(await res.json(), {
      error: "HandleNotFound",
      message: `Unable to resolve handle: ${JSON.stringify(value)}`,
    });
  }
  const missing = await xrpcGet(t.app, "com.atproto.identity.resolveHandle");
  assert.equal(missing.status, 400);
  assert.deepEqual(await missing.json(), {
    error: "InvalidRequest",
    message: "Parameter handle is required",
  });
});

Deno.test("resolveDid serves the account's DID document with its own signing key", async () => {
  await using t = await createTestApp();
  const { did } = await signUp(t.app, "vera.test");
  const res = await xrpcGet(t.app, `com.atproto.identity.resolveDid?did=${did}`);
  assert.equal(res.status, 200);
  const { didDoc } = await res.json();
  const keyPair = await t.ctx.accountKeys.get(did);
  assert.ok(keyPair);
  assert.deepEqual(didDoc, {
    "@context": ["https://www.w3.org/ns/did/v1", "https://w3id.org/security/multikey/v1"],
    id: did,
    alsoKnownAs: ["at://vera.test"],
    verificationMethod: [{
      id: `${did}#atproto`,
      type: "Multikey",
      controller: did,
      publicKeyMultibase: encodeMultikey(keyPair.publicKey),
    }],
    service: [{
      id: "#atproto_pds",
      type: "AtprotoPersonalDataServer",
      serviceEndpoint: "http://localhost:2583",
    }],
  });
  const unknown = await xrpcGet(
    t.app,
    "com.atproto.identity.resolveDid?did=did:plc:aaaaaaaaaaaaaaaaaaaaaaaa",
  );
  assert.equal(unknown.status, 400);
  assert.equal((await unknown.json()).error, "DidNotFound");
});

Deno.test("the account DID is derived from its signed PLC genesis op, signed by the host's PLC rotation key", async () => {
  await using t = await createTestApp();
  const { did } = await signUp(t.app, "wren.test");
  const log = (await t.ctx.kv.get<PlcLog>(plcOpKey(did))).value;
  assert.ok(log);
  const op = log.genesis;
  assert.deepEqual(log.last, op);
  assert.equal(log.lastCid, plcOperationCid(op));
  assert.equal(log.ops, 1);
  assert.equal(log.publishedTo, null); // no PDS_PLC_URL: minted locally
  assert.equal(plcDidForOperation(op), did);
  assert.equal(op.prev, null);
  assert.deepEqual(op.alsoKnownAs, ["at://wren.test"]);
  const keyPair = await t.ctx.accountKeys.get(did);
  assert.equal(op.verificationMethods.atproto, `did:key:${encodeMultikey(keyPair!.publicKey)}`);
  // The rotation key is the host's own, kept in the store, not the token key.
  const rotation = await loadPlcRotationKey(t.ctx.kv);
  assert.deepEqual(op.rotationKeys, [`did:key:${encodeMultikey(rotation.publicKey)}`]);
  assert.notDeepEqual(rotation.publicKey, t.ctx.serviceKeys.keyPair.publicKey);
  const { sig, ...unsigned } = op;
  assert.match(sig, /^[A-Za-z0-9_-]{86}$/);
  assert.ok(verifyCompact(rotation.publicKey, encodeCbor(unsigned), base64url.decode(sig)));
  // An independent verifier (the reference crypto library) accepts the genesis signature too.
  assert.equal(
    await verifySignature(op.rotationKeys[0], encodeCbor(unsigned), base64url.decode(sig)),
    true,
  );
});

Deno.test("/.well-known/atproto-did answers the DID of the handle named by the Host", async () => {
  await using t = await createTestApp();
  const { did } = await signUp(t.app, "xena.test");
  const res = await t.app.request("http://xena.test/.well-known/atproto-did");
  assert.equal(res.status, 200);
  assert.equal(await res.text(), did);
  const none = await t.app.request("http://nobody.test/.well-known/atproto-did");
  assert.equal(none.status, 404);
  assert.equal(await none.text(), "User not found");
});
