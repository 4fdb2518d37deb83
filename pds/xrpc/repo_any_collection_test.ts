// Records of any collection (issue 38 item 4; docs/behaviour.md 4.1 rule 14, 10.5): stored and
// served under any valid NSID as the reference account host does (packages/pds/src/repo/
// prepare.ts: validationStatus "unknown", validate: true refuses, validate: false validates
// nothing), while app.social.* records are validated as before and the data-model checks apply to
// every record.

import assert from "node:assert/strict";
import { verifyRepoCar } from "@atproto/repo";
import { AtpAgent } from "@atproto/api";
import { COLLECTION_POST } from "../../shared/nsid.ts";
import { createTestApp, signUp, startTestServer, xrpcGet, xrpcPost } from "../_test_helpers.ts";
import { blobChunkPrefix, blobRefIndexKey, blobRefPrefix } from "../store/keys.ts";
import { buildBlobRefIndex, sweepUnreferencedBlobs, UPLOAD_GRACE_MS } from "../blobs/blob_gc.ts";

const THING = "com.example.thing";
const NOW = "2024-05-01T12:00:00.000Z";
/** A CID of a DAG-CBOR block (a link, not a blob). */
const LINK = "bafyreie5737gdxlw5i64vzichcalba3z2v5n6icifvx5xytvske7mr3hpm";

async function setUp() {
  const t = await createTestApp();
  await buildBlobRefIndex(t.ctx.kv, Date.now());
  const session = await signUp(t.app, "alice.test");
  return { t, did: session.did, auth: { authorization: `Bearer ${session.accessJwt}` } };
}

type Account = Awaited<ReturnType<typeof setUp>>;

async function call(a: Account, method: string, body: Record<string, unknown>) {
  const res = await xrpcPost(
    a.t.app,
    `com.atproto.repo.${method}`,
    { repo: a.did, ...body },
    a.auth,
  );
  return { status: res.status, body: await res.json() };
}

async function upload(a: Account, seed: number, mimeType: string, size = 100_000) {
  const res = await a.t.app.request("/xrpc/com.atproto.repo.uploadBlob", {
    method: "POST",
    headers: { ...a.auth, "content-type": mimeType },
    body: new Uint8Array(size).fill(seed),
  });
  assert.equal(res.status, 200);
  return (await res.json()).blob as {
    $type: "blob";
    ref: { $link: string };
    mimeType: string;
    size: number;
  };
}

Deno.test("a com.example.thing record is created, read, listed, updated and exported with validationStatus unknown", async () => {
  const a = await setUp();
  await using _ = a.t;
  const record = {
    title: "anything",
    count: 3,
    nested: { flags: [true, false, null], link: { $link: LINK }, bytes: { $bytes: "AQID" } },
    // An untyped {ref} is a blob only in records with a schema (spec 2.3); here it is data.
    ref: { $link: LINK },
  };
  const created = await call(a, "createRecord", { collection: THING, rkey: "one", record });
  assert.equal(created.status, 200, JSON.stringify(created.body));
  assert.equal(created.body.uri, `at://${a.did}/${THING}/one`);
  assert.equal(created.body.validationStatus, "unknown");
  const stored = { $type: THING, ...record };

  const got = await xrpcGet(
    a.t.app,
    `com.atproto.repo.getRecord?repo=${a.did}&collection=${THING}&rkey=one`,
  );
  assert.equal(got.status, 200);
  assert.deepEqual(await got.json(), {
    uri: created.body.uri,
    cid: created.body.cid,
    value: stored,
  });

  const post = await call(a, "createRecord", {
    collection: COLLECTION_POST,
    record: { text: "hi", createdAt: NOW },
  });
  assert.equal(post.body.validationStatus, "valid");

  const updated = await call(a, "putRecord", {
    collection: THING,
    rkey: "one",
    record: { ...record, count: 4 },
  });
  assert.equal(updated.status, 200);
  assert.equal(updated.body.validationStatus, "unknown");
  const batch = await call(a, "applyWrites", {
    writes: [
      {
        $type: "com.atproto.repo.applyWrites#create",
        collection: THING,
        rkey: "two",
        value: { n: 2 },
      },
      { $type: "com.atproto.repo.applyWrites#create", collection: "org.other.app.item", value: {} },
      {
        $type: "com.atproto.repo.applyWrites#create",
        collection: COLLECTION_POST,
        value: { text: "b", createdAt: NOW },
      },
    ],
  });
  assert.equal(batch.status, 200, JSON.stringify(batch.body));
  assert.deepEqual(
    batch.body.results.map((r: { validationStatus?: string }) => r.validationStatus),
    [
      "unknown",
      "unknown",
      "valid",
    ],
  );

  const listed =
    await (await xrpcGet(a.t.app, `com.atproto.repo.listRecords?repo=${a.did}&collection=${THING}`))
      .json();
  assert.deepEqual(listed.records.map((r: { uri: string }) => r.uri), [
    `at://${a.did}/${THING}/two`,
    `at://${a.did}/${THING}/one`,
  ]);
  assert.deepEqual(listed.records[1].value, { ...stored, count: 4 });

  const described = await (await xrpcGet(a.t.app, `com.atproto.repo.describeRepo?repo=${a.did}`))
    .json();
  assert.deepEqual(described.collections, [COLLECTION_POST, THING, "org.other.app.item"]);

  const doc =
    (await (await xrpcGet(a.t.app, `com.atproto.identity.resolveDid?did=${a.did}`)).json()).didDoc;
  const method = doc.verificationMethod.find((m: { id: string }) => m.id === `${a.did}#atproto`);
  const car = await xrpcGet(a.t.app, `com.atproto.sync.getRepo?did=${a.did}`);
  assert.equal(car.status, 200);
  const verified = await verifyRepoCar(
    new Uint8Array(await car.arrayBuffer()),
    a.did,
    `did:key:${method.publicKeyMultibase}`,
  );
  const paths = verified.creates.map((c) => `${c.collection}/${c.rkey}`).sort();
  assert.equal(paths.length, 5);
  assert.ok(paths.includes(`${THING}/one`) && paths.includes(`${THING}/two`));
  const one = verified.creates.find((c) => c.collection === THING && c.rkey === "one")!;
  assert.equal(one.cid.toString(), updated.body.cid);

  const deleted = await call(a, "deleteRecord", { collection: THING, rkey: "two" });
  assert.equal(deleted.status, 200);
  const gone = await xrpcGet(
    a.t.app,
    `com.atproto.repo.getRecord?repo=${a.did}&collection=${THING}&rkey=two`,
  );
  assert.equal(gone.status, 400);
  assert.equal((await gone.json()).error, "RecordNotFound");
});

Deno.test("the validate flag: true refuses an unknown collection, false validates nothing, app.social.* is always validated", async () => {
  const a = await setUp();
  await using _ = a.t;
  const strict = await call(a, "createRecord", {
    collection: THING,
    record: { a: 1 },
    validate: true,
  });
  assert.deepEqual(strict, {
    status: 400,
    body: { error: "InvalidRequest", message: `Unknown lexicon type: ${THING}` },
  });
  const strictBatch = await call(a, "applyWrites", {
    validate: true,
    writes: [{ $type: "com.atproto.repo.applyWrites#create", collection: THING, value: {} }],
  });
  assert.deepEqual(strictBatch.body, {
    error: "InvalidRequest",
    message: `Unknown lexicon type: ${THING}`,
  });

  const loose = await call(a, "createRecord", {
    collection: THING,
    record: { a: 1 },
    validate: false,
  });
  assert.equal(loose.status, 200);
  assert.equal("validationStatus" in loose.body, false);
  const loosePut = await call(a, "putRecord", {
    collection: THING,
    rkey: "k",
    record: {},
    validate: false,
  });
  assert.equal(loosePut.status, 200);
  assert.equal("validationStatus" in loosePut.body, false);

  // validate: false does not let a bad app.social record in: the index relies on the check.
  for (const validate of [false, undefined, true]) {
    const bad = await call(a, "createRecord", {
      collection: COLLECTION_POST,
      record: { text: "x".repeat(161), createdAt: NOW },
      validate,
    });
    assert.equal(bad.status, 400);
    assert.equal(bad.body.error, "InvalidRecord");
    assert.match(bad.body.message, /^Invalid text, 161 graphemes/);
  }
  const good = await call(a, "createRecord", {
    collection: COLLECTION_POST,
    record: { text: "ok", createdAt: NOW },
    validate: true,
  });
  assert.equal(good.body.validationStatus, "valid");
  // An app.social collection without a schema is like any other collection.
  const unknownSocial = await call(a, "createRecord", {
    collection: "app.social.graph.list",
    record: {},
  });
  assert.equal(unknownSocial.body.validationStatus, "unknown");

  const notBool = await call(a, "createRecord", { collection: THING, record: {}, validate: "yes" });
  assert.deepEqual(notBool.body, {
    error: "InvalidRequest",
    message: "Member validate must be a boolean",
  });
});

Deno.test("the data-model checks apply to records of every collection", async () => {
  const a = await setUp();
  await using _ = a.t;
  let deep: Record<string, unknown> = {};
  for (let i = 0; i < 70; i++) deep = { d: deep };
  const cases: [Record<string, unknown>, number, string, RegExp][] = [
    [
      { collection: "not an nsid", record: {} },
      400,
      "InvalidRequest",
      /^Invalid collection: "not an nsid"$/,
    ],
    [
      { collection: THING, rkey: "a/b", record: {} },
      400,
      "InvalidRequest",
      /^Invalid record key: "a\/b"$/,
    ],
    [
      { collection: THING, record: { $type: "com.example.other" } },
      400,
      "InvalidRecord",
      /^Record \$type is not com\.example\.thing: "com\.example\.other"$/,
    ],
    [
      { collection: THING, record: { n: 1.5 } },
      400,
      "InvalidRecord",
      /^Number at \$\.n is not a safe integer: 1\.5$/,
    ],
    [{ collection: THING, record: deep }, 400, "InvalidRecord", /^Nesting too deep at \$/],
    [
      { collection: THING, record: { l: { $link: "nope" } } },
      400,
      "InvalidRecord",
      /^\$link at \$\.l is not a CID/,
    ],
    [
      { collection: THING, record: { b: { $type: "blob", ref: { $link: LINK } } } },
      400,
      "InvalidRecord",
      /^Blob at \$\.b has no string mimeType$/,
    ],
    [
      { collection: THING, record: { s: "x".repeat(200_000) } },
      400,
      "InvalidRecord",
      /^Record is \d+ bytes, over the \d+ byte limit$/,
    ],
    [{ collection: THING, record: [1] }, 400, "InvalidRecord", /^Record is not an object$/],
  ];
  for (const [body, status, error, message] of cases) {
    const res = await call(a, "createRecord", body);
    assert.equal(res.status, status, JSON.stringify(body).slice(0, 80));
    assert.equal(res.body.error, error, JSON.stringify(res.body));
    assert.match(res.body.message, message);
  }
  // A typed blob anywhere must be the account's own upload, as uploaded.
  const missing = await call(a, "createRecord", {
    collection: THING,
    record: {
      deep: {
        list: [{
          file: {
            $type: "blob",
            ref: { $link: "bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku" },
            mimeType: "video/mp4",
            size: 3,
          },
        }],
      },
    },
  });
  assert.deepEqual(missing, {
    status: 400,
    body: {
      error: "BlobNotFound",
      message:
        "Could not find blob bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku (at deep.list[0].file)",
    },
  });
  const video = await upload(a, 1, "video/mp4", 10);
  const wrongType = await call(a, "createRecord", {
    collection: THING,
    record: { file: { ...video, mimeType: "image/png" } },
  });
  assert.equal(wrongType.body.error, "InvalidMimeType");
  // No field of a schemaless record must hold an image: a video as `thumb` is fine.
  const thumb = await call(a, "createRecord", { collection: THING, record: { thumb: video } });
  assert.equal(thumb.status, 200, JSON.stringify(thumb.body));
});

Deno.test("a blob referenced only by a com.example.thing record survives GC until the record goes", async () => {
  const a = await setUp();
  await using _ = a.t;
  const kv = a.t.ctx.kv;
  const blob = await upload(a, 7, "application/octet-stream");
  const cid = blob.ref.$link;
  const created = await call(a, "createRecord", {
    collection: THING,
    rkey: "with-blob",
    record: { attachments: [{ name: "data", file: blob }] },
  });
  assert.equal(created.status, 200, JSON.stringify(created.body));
  const count = async (prefix: Deno.KvKey) => (await Array.fromAsync(kv.list({ prefix }))).length;
  assert.equal(await count(blobRefPrefix(a.did, cid)), 1);

  // A day and more later, the sweep keeps it: a record references it.
  assert.equal(await sweepUnreferencedBlobs(kv, { now: Date.now() + UPLOAD_GRACE_MS + 60_000 }), 0);
  const served = await a.t.app.request(`/xrpc/com.atproto.sync.getBlob?did=${a.did}&cid=${cid}`);
  assert.equal(served.status, 200);
  assert.deepEqual(new Uint8Array(await served.arrayBuffer()), new Uint8Array(100_000).fill(7));
  assert.equal(await count(blobChunkPrefix(a.did, cid)), 2);

  // The backfill of the reference index finds it too (a store indexed before this record).
  await kv.delete(blobRefIndexKey());
  for await (const e of kv.list({ prefix: blobRefPrefix(a.did, cid) })) await kv.delete(e.key);
  assert.equal(await count(blobRefPrefix(a.did, cid)), 0);
  await buildBlobRefIndex(kv, Date.now());
  assert.equal(await count(blobRefPrefix(a.did, cid)), 1);

  const deleted = await call(a, "deleteRecord", { collection: THING, rkey: "with-blob" });
  assert.equal(deleted.status, 200);
  assert.equal(await count(blobRefPrefix(a.did, cid)), 0);
  assert.equal(await count(blobChunkPrefix(a.did, cid)), 0);
});

Deno.test("AtpAgent writes, reads and lists a com.example.thing record", async () => {
  await using s = await startTestServer();
  const agent = new AtpAgent({ service: s.url });
  await agent.createAccount({ handle: "agent.test", password: "correct horse battery" });
  const did = agent.session!.did;
  const created = await agent.com.atproto.repo.createRecord({
    repo: did,
    collection: THING,
    record: { $type: THING, note: "from another app" },
  });
  assert.equal(created.data.validationStatus, "unknown");
  const rkey = created.data.uri.split("/").pop()!;
  const got = await agent.com.atproto.repo.getRecord({ repo: did, collection: THING, rkey });
  assert.deepEqual(got.data.value, { $type: THING, note: "from another app" });
  const put = await agent.com.atproto.repo.putRecord({
    repo: did,
    collection: THING,
    rkey,
    record: { $type: THING, note: "changed" },
    validate: false,
  });
  assert.equal(put.data.validationStatus, undefined);
  const listed = await agent.com.atproto.repo.listRecords({ repo: did, collection: THING });
  assert.deepEqual(listed.data.records.map((r) => r.value), [{ $type: THING, note: "changed" }]);
  await assert.rejects(
    agent.com.atproto.repo.createRecord({
      repo: did,
      collection: THING,
      record: {},
      validate: true,
    }),
    (e: Error & { error?: string; status?: number }) =>
      e.status === 400 && e.error === "InvalidRequest" &&
      e.message === `Unknown lexicon type: ${THING}`,
  );
});
