// DID publication (docs/behaviour.md 10.4, issue 38): with PDS_PLC_URL the account host submits
// each account's signed genesis operation and its handle changes to the PLC directory, and a
// foreign resolver (@atproto/identity's DidResolver) resolves the DIDs there: against the
// reference directory (@did-plc/server, in memory) on loopback, and a stand-in for refusals.

import assert from "node:assert/strict";
import { DidResolver } from "@atproto/identity";
import { verifySignature } from "@atproto/crypto";
import { base64url } from "jose";
import { encodeCbor } from "../shared/cbor.ts";
import { generateP256KeyPair } from "../shared/keys.ts";
import { encodeDidKey } from "../shared/multikey.ts";
import { signUp, startTestServer, xrpcGet, xrpcPost } from "../pds/_test_helpers.ts";
import {
  loadPlcRotationKey,
  mintPlcDid,
  newPlcLog,
  nextPlcOperation,
  type PlcLog,
  plcOperationCid,
} from "../pds/accounts/plc.ts";
import { submitPlcOperation } from "../pds/accounts/plc_directory.ts";
import { readHeadSeq } from "../pds/sequencer/event_log.ts";
import { handleKey, plcOpKey } from "../pds/store/keys.ts";
import { WARN_PLC_OFF, WARN_PLC_UNSET } from "../pds/server.ts";
import { makeTempDir } from "./_util.ts";
import { loadPlcServer, startPlcDirectory, startStandInDirectory } from "./_plc_directory.ts";

const plc = await loadPlcServer();
const noPlc = typeof plc === "string";
if (noPlc) console.warn(`Skipping the tests against a PLC directory: ${plc}`);

/** The directory's audit log of a DID: each operation with its CID. */
async function auditLog(
  directory: string,
  did: string,
): Promise<{ cid: string; operation: Record<string, unknown> }[]> {
  const res = await fetch(`${directory}/${did}/log/audit`);
  assert.equal(res.status, 200);
  return await res.json();
}

function update(url: string, accessJwt: string, handle: string): Promise<Response> {
  return xrpcPost(url, "com.atproto.identity.updateHandle", { handle }, {
    authorization: `Bearer ${accessJwt}`,
  });
}

Deno.test({
  name:
    "with PDS_PLC_URL an account's DID resolves at the directory to its key, handle and the host's URL; a handle change is an update whose prev is the last operation's CID",
  ignore: noPlc,
  async fn() {
    if (typeof plc === "string") return;
    await using directory = await startPlcDirectory(plc);
    await using s = await startTestServer({ env: { PDS_PLC_URL: directory.url } });
    const resolver = new DidResolver({ plcUrl: directory.url, fetch: globalThis.fetch });

    const account = await signUp(s.url, "plc.test");
    const key = await s.ctx.accountKeys.get(account.did);
    const data = await resolver.resolveAtprotoData(account.did);
    assert.deepEqual(data, {
      did: account.did,
      signingKey: encodeDidKey(key!.publicKey),
      handle: "plc.test",
      pds: s.ctx.config.publicUrl,
    });
    assert.equal(s.ctx.config.publicUrl, s.url);
    const rotation = await loadPlcRotationKey(s.ctx.kv);
    const stateRes = await fetch(`${directory.url}/${account.did}/data`);
    assert.deepEqual((await stateRes.json()).rotationKeys, [encodeDidKey(rotation.publicKey)]);
    assert.ok(
      !s.lines.some((l) => l.includes("PDS_PLC_URL")),
      "no startup warning with a directory",
    );

    assert.equal((await update(s.url, account.accessJwt, "wren.test")).status, 200);
    const moved = await resolver.resolveAtprotoData(account.did, true);
    assert.equal(moved.handle, "wren.test");
    assert.equal(moved.signingKey, data.signingKey);
    const audit = await auditLog(directory.url, account.did);
    assert.equal(audit.length, 2);
    assert.equal(audit[0].operation.prev, null);
    assert.equal(audit[1].operation.prev, audit[0].cid);
    const log = (await s.ctx.kv.get<PlcLog>(plcOpKey(account.did))).value!;
    assert.equal(log.ops, 2);
    assert.equal(log.lastCid, audit[1].cid);
    assert.equal(plcOperationCid(log.genesis), audit[0].cid);
    assert.equal(log.publishedTo, directory.url);

    // Setting the current handle again publishes nothing new (the directory already says it).
    assert.equal((await update(s.url, account.accessJwt, "wren.test")).status, 200);
    assert.equal((await auditLog(directory.url, account.did)).length, 2);
  },
});

Deno.test({
  name:
    "an account created without a directory is published at its first handle change: its genesis, then the update",
  ignore: noPlc,
  async fn() {
    if (typeof plc === "string") return;
    await using dir = await makeTempDir("pds-plc-");
    const kvPath = `${dir.path}/pds.kv`;
    let account;
    {
      await using local = await startTestServer({ env: { PDS_KV_PATH: kvPath } });
      account = await signUp(local.url, "local.test");
      assert.equal(local.lines.filter((l) => l.includes(WARN_PLC_UNSET)).length, 1);
    }
    await using directory = await startPlcDirectory(plc);
    await using s = await startTestServer({
      env: { PDS_KV_PATH: kvPath, PDS_PLC_URL: directory.url },
    });
    const resolver = new DidResolver({ plcUrl: directory.url, fetch: globalThis.fetch });
    assert.equal(await resolver.resolve(account.did), null);
    const login = await xrpcPost(s.url, "com.atproto.server.createSession", {
      identifier: "local.test",
      password: "correct horse battery",
    });
    const { accessJwt } = await login.json();
    assert.equal((await update(s.url, accessJwt, "known.test")).status, 200);
    const data = await resolver.resolveAtprotoData(account.did);
    assert.equal(data.handle, "known.test");
    assert.equal(data.pds, s.url);
    const audit = await auditLog(directory.url, account.did);
    assert.deepEqual(audit[0].operation.alsoKnownAs, ["at://local.test"]);
    assert.deepEqual(audit[1].operation.alsoKnownAs, ["at://known.test"]);
  },
});

Deno.test({
  name:
    "an operation of an account whose genesis lists the service key is signed with it and moves the rotation to the host's rotation key; the directory accepts it",
  ignore: noPlc,
  async fn() {
    if (typeof plc === "string") return;
    await using directory = await startPlcDirectory(plc);
    const service = generateP256KeyPair();
    const rotation = generateP256KeyPair();
    const signing = generateP256KeyPair();
    const state = { signingPublicKey: signing.publicKey, handle: "old.test", pdsUrl: "https://a" };
    const { did, op: genesis } = mintPlcDid({ ...state, rotationKey: service });
    await submitPlcOperation(directory.url, did, genesis);
    const next = nextPlcOperation(newPlcLog(genesis, directory.url), {
      ...state,
      handle: "new.test",
    }, { rotation, service });
    assert.deepEqual(next.rotationKeys, [encodeDidKey(rotation.publicKey)]);
    const { sig, ...unsigned } = next;
    assert.ok(
      await verifySignature(
        encodeDidKey(service.publicKey),
        encodeCbor(unsigned),
        base64url.decode(sig),
      ),
    );
    await submitPlcOperation(directory.url, did, next);
    const data = await new DidResolver({ plcUrl: directory.url, fetch: globalThis.fetch })
      .resolveAtprotoData(did);
    assert.equal(data.handle, "new.test");
    // A key the host does not hold cannot sign the next one.
    assert.throws(
      () =>
        nextPlcOperation(newPlcLog(genesis, null), state, {
          rotation: generateP256KeyPair(),
          service: generateP256KeyPair(),
        }),
      { message: "The account host holds none of the rotation keys of the last PLC operation" },
    );
  },
});

Deno.test("a directory that refuses the genesis operation fails createAccount with 502 UpstreamFailure quoting it, and nothing is written", async () => {
  await using directory = startStandInDirectory([
    { status: 400, body: JSON.stringify({ message: "Invalid signature on op" }) },
  ]);
  await using s = await startTestServer({ env: { PDS_PLC_URL: directory.url } });
  const res = await xrpcPost(s.url, "com.atproto.server.createAccount", {
    handle: "refused.test",
    password: "correct horse battery",
  });
  assert.equal(res.status, 502);
  const body = await res.json();
  assert.equal(body.error, "UpstreamFailure");
  const did = directory.received[0].path.slice(1);
  assert.match(did, /^did:plc:[a-z2-7]{24}$/);
  assert.equal(
    body.message,
    `PLC directory ${directory.url} refused the operation for ${did}: 400 "Invalid signature on op"`,
  );
  assert.deepEqual(directory.received[0].body.alsoKnownAs, ["at://refused.test"]);
  // Nothing half-written: no account, no handle, no operation log, no stream event.
  assert.equal((await s.ctx.kv.get(handleKey("refused.test"))).value, null);
  assert.equal((await s.ctx.kv.get(plcOpKey(did))).value, null);
  assert.equal(await readHeadSeq(s.ctx.kv), 0);
  const resolved = await xrpcGet(s.url, "com.atproto.identity.resolveHandle?handle=refused.test");
  assert.equal(resolved.status, 400);
  // The handle is still free once the directory accepts.
  const account = await signUp(s.url, "refused.test");
  assert.equal(directory.received.length, 2);
  assert.equal(directory.received[1].path, `/${account.did}`);
});

Deno.test("an unreachable directory fails createAccount with 502 naming the directory", async () => {
  const closed = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const url = `http://127.0.0.1:${closed.addr.port}`;
  closed.close();
  await using s = await startTestServer({ env: { PDS_PLC_URL: url } });
  const res = await xrpcPost(s.url, "com.atproto.server.createAccount", {
    handle: "nowhere.test",
    password: "correct horse battery",
  });
  assert.equal(res.status, 502);
  const body = await res.json();
  assert.equal(body.error, "UpstreamFailure");
  assert.match(
    body.message,
    new RegExp(`^PLC directory ${url} could not be reached for did:plc:[a-z2-7]{24}: `),
  );
  assert.equal(await readHeadSeq(s.ctx.kv), 0);
});

Deno.test("a directory that refuses a handle update leaves the handle, the operation log and the stream as they were", async () => {
  await using directory = startStandInDirectory([
    { status: 200, body: "" },
    { status: 409, body: JSON.stringify({ message: "Proposed prev does not match" }) },
  ]);
  await using s = await startTestServer({ env: { PDS_PLC_URL: directory.url } });
  const account = await signUp(s.url, "stay.test");
  const head = await readHeadSeq(s.ctx.kv);
  const before = (await s.ctx.kv.get<PlcLog>(plcOpKey(account.did))).value!;
  const res = await update(s.url, account.accessJwt, "moved.test");
  assert.equal(res.status, 502);
  assert.deepEqual(await res.json(), {
    error: "UpstreamFailure",
    message: `PLC directory ${directory.url} refused the operation for ${account.did}: ` +
      `409 "Proposed prev does not match"`,
  });
  const sent = directory.received[1].body;
  assert.equal(sent.prev, before.lastCid);
  assert.deepEqual(sent.alsoKnownAs, ["at://moved.test"]);
  assert.deepEqual((await s.ctx.kv.get<PlcLog>(plcOpKey(account.did))).value, before);
  assert.equal((await s.ctx.kv.get(handleKey("stay.test"))).value, account.did);
  assert.equal((await s.ctx.kv.get(handleKey("moved.test"))).value, null);
  assert.equal(await readHeadSeq(s.ctx.kv), head);
});

Deno.test("PDS_PLC_URL=off warns once at startup that DIDs are not published", async () => {
  await using s = await startTestServer({ env: { PDS_PLC_URL: "off" } });
  assert.equal(s.lines.filter((l) => l.includes(WARN_PLC_OFF)).length, 1);
  assert.equal(s.lines.filter((l) => l.includes(WARN_PLC_UNSET)).length, 0);
});
