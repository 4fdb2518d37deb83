// com.atproto.repo.* and com.atproto.sync.* over HTTP (spec 1, 2.3, 2.5, 2.9-2.10, 4.1, 6.1, 8;
// docs/protocol.md 3 and 5).

import assert from "node:assert/strict";
import { verifyProofs, verifyRepoCar } from "@atproto/repo";
import { readCar } from "../../shared/car.ts";
import { base58btc } from "multiformats/bases/base58";
import { parseCid } from "../../shared/cid.ts";
import {
  COLLECTION_FOLLOW,
  COLLECTION_LIKE,
  COLLECTION_POST,
  COLLECTION_PROFILE,
  COLLECTION_REPOST,
  EMBED_IMAGES,
} from "../../shared/nsid.ts";
import type { PdsContext, PdsHooks } from "../context.ts";
import { createTestApp, signUp, startTestServer, xrpcGet, xrpcPost } from "../_test_helpers.ts";
import { initRepo } from "../repo/service.ts";
import { blobChunkPrefix } from "../store/keys.ts";

const NOW = "2024-05-01T12:00:00.000Z";
const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

/** Hooks that write the initial commit, as the lead wires them in `main.ts`. */
function repoHooks(): { hooks: PdsHooks; bind(ctx: PdsContext): void } {
  let ctx: PdsContext | null = null;
  return {
    hooks: { onAccountCreated: async (did) => void await initRepo(ctx!, did) },
    bind: (c) => void (ctx = c),
  };
}

async function appWithAccount(handle = "alice.test") {
  const wiring = repoHooks();
  const t = await createTestApp({ hooks: wiring.hooks });
  wiring.bind(t.ctx);
  const session = await signUp(t.app, handle);
  return { t, session, auth: bearer(session.accessJwt) };
}

Deno.test("account creation writes the initial empty commit with seq 3, after its #identity and #account", async () => {
  const { t, session } = await appWithAccount();
  await using _ = t;
  const res = await xrpcGet(t.app, `com.atproto.sync.getLatestCommit?did=${session.did}`);
  assert.equal(res.status, 200);
  const latest = await res.json();
  const [event] = await t.ctx.sequencer.readEvents(0);
  assert.equal(event.seq, 3);
  assert.equal(event.event.repo, session.did);
  assert.equal(event.event.rev, latest.rev);
  assert.equal(event.event.commit.toString(), latest.cid);
});

Deno.test("createRecord, getRecord, listRecords, deleteRecord and describeRepo round-trip", async () => {
  const { t, session, auth } = await appWithAccount();
  await using _ = t;
  const created = await xrpcPost(t.app, "com.atproto.repo.createRecord", {
    repo: session.did,
    collection: COLLECTION_POST,
    record: { text: "hello", createdAt: NOW },
  }, auth);
  assert.equal(created.status, 200);
  const { uri, cid, commit } = await created.json();
  assert.match(uri, new RegExp(`^at://${session.did}/${COLLECTION_POST}/[2-7a-z]{13}$`));
  assert.equal(typeof commit.rev, "string");
  const rkey = uri.split("/").pop();

  const got = await xrpcGet(
    t.app,
    `com.atproto.repo.getRecord?repo=alice.test&collection=${COLLECTION_POST}&rkey=${rkey}`,
  );
  assert.equal(got.status, 200);
  assert.deepEqual(await got.json(), {
    uri,
    cid,
    value: { $type: COLLECTION_POST, text: "hello", createdAt: NOW },
  });

  const listed = await (await xrpcGet(
    t.app,
    `com.atproto.repo.listRecords?repo=${session.did}&collection=${COLLECTION_POST}`,
  )).json();
  assert.deepEqual(listed.records.map((r: { uri: string }) => r.uri), [uri]);

  const described =
    await (await xrpcGet(t.app, `com.atproto.repo.describeRepo?repo=${session.did}`))
      .json();
  assert.equal(described.handle, "alice.test");
  assert.deepEqual(described.collections, [COLLECTION_POST]);
  assert.equal(described.didDoc.id, session.did);

  const del = await xrpcPost(
    t.app,
    "com.atproto.repo.deleteRecord",
    { repo: session.did, uri },
    auth,
  );
  assert.equal(del.status, 200);
  const delBody = await del.json();
  assert.equal(typeof delBody.commit.cid, "string");
  assert.ok(delBody.commit.rev > commit.rev);

  const gone = await xrpcGet(
    t.app,
    `com.atproto.repo.getRecord?repo=${session.did}&collection=${COLLECTION_POST}&rkey=${rkey}`,
  );
  assert.equal(gone.status, 400);
  assert.equal((await gone.json()).error, "RecordNotFound");
});

Deno.test("a missing or non-string repo is 400 InvalidRequest saying which", async () => {
  const { t, session, auth } = await appWithAccount();
  await using _ = t;
  const create = (repo: unknown) =>
    xrpcPost(t.app, "com.atproto.repo.createRecord", {
      repo,
      collection: COLLECTION_POST,
      record: { text: "x", createdAt: NOW },
    }, auth);
  const cases: [Promise<Response>, string][] = [
    [create(undefined), "Member repo is required"],
    [create(""), "Member repo is required"],
    [create(5), "Invalid repo: expected a string, got number"],
    [create([session.did]), "Invalid repo: expected a string, got array"],
    [
      xrpcGet(t.app, `com.atproto.repo.getRecord?collection=${COLLECTION_POST}&rkey=x`),
      "Parameter repo is required",
    ],
    [xrpcGet(t.app, "com.atproto.repo.describeRepo?repo="), "Parameter repo is required"],
  ];
  for (const [pending, message] of cases) {
    const res = await pending;
    assert.equal(res.status, 400, message);
    assert.deepEqual(await res.json(), { error: "InvalidRequest", message });
  }
});

Deno.test("writes need a token of the repo's own account (401 without, 403 for another repo)", async () => {
  const { t, session, auth } = await appWithAccount();
  await using _ = t;
  const other = await signUp(t.app, "bob.test");
  const body = {
    repo: other.did,
    collection: COLLECTION_POST,
    record: { text: "x", createdAt: NOW },
  };
  const forbidden = await xrpcPost(t.app, "com.atproto.repo.createRecord", body, auth);
  assert.equal(forbidden.status, 403);
  assert.equal((await forbidden.json()).error, "Forbidden");
  const anonymous = await xrpcPost(t.app, "com.atproto.repo.createRecord", {
    ...body,
    repo: session.did,
  });
  assert.equal(anonymous.status, 401);
  assert.equal((await anonymous.json()).error, "AuthMissing");
  const blob = await t.app.request("/xrpc/com.atproto.repo.uploadBlob", {
    method: "POST",
    body: new Uint8Array(10),
  });
  assert.equal(blob.status, 401);
  await blob.body?.cancel();
});

Deno.test("a 161-grapheme post is 400 InvalidRecord, so is one with U+0000; a 160-grapheme post is accepted (spec 8)", async () => {
  const { t, session, auth } = await appWithAccount();
  await using _ = t;
  const write = (text: string) =>
    xrpcPost(t.app, "com.atproto.repo.createRecord", {
      repo: session.did,
      collection: COLLECTION_POST,
      record: { text, createdAt: NOW },
    }, auth);
  const family = "👨‍👩‍👧‍👦";
  const tooLong = await write(family.repeat(100) + "a".repeat(61));
  assert.equal(tooLong.status, 400);
  const err = await tooLong.json();
  assert.equal(err.error, "InvalidRecord");
  assert.match(err.message, /text/);
  const ok = await write(family.repeat(100) + "a".repeat(60));
  assert.equal(ok.status, 200);
  await ok.body?.cancel();
  const nul = await write("cut\0here");
  assert.equal(nul.status, 400);
  assert.deepEqual(await nul.json(), {
    error: "InvalidRecord",
    message: 'Invalid text, contains U+0000: "cut\\u0000here"',
  });
});

Deno.test("profile putRecord overlays fields and null removes one (spec 4.1 rule 3)", async () => {
  const { t, session, auth } = await appWithAccount();
  await using _ = t;
  const put = async (record: Record<string, unknown>) => {
    const res = await xrpcPost(t.app, "com.atproto.repo.putRecord", {
      repo: session.did,
      collection: COLLECTION_PROFILE,
      rkey: "self",
      record,
    }, auth);
    assert.equal(res.status, 200);
    await res.body?.cancel();
  };
  const read = async () =>
    (await (await xrpcGet(
      t.app,
      `com.atproto.repo.getRecord?repo=${session.did}&collection=${COLLECTION_PROFILE}&rkey=self`,
    )).json()).value;
  await put({ displayName: "Alice" });
  await put({ description: "Writes things" });
  assert.deepEqual(await read(), {
    $type: COLLECTION_PROFILE,
    displayName: "Alice",
    description: "Writes things",
  });
  await put({ displayName: null });
  assert.deepEqual(await read(), { $type: COLLECTION_PROFILE, description: "Writes things" });
});

Deno.test("applyWrites commits creates, updates and deletes as one commit", async () => {
  const { t, session, auth } = await appWithAccount();
  await using _ = t;
  const res = await xrpcPost(t.app, "com.atproto.repo.applyWrites", {
    repo: session.did,
    writes: [
      {
        $type: "com.atproto.repo.applyWrites#create",
        collection: COLLECTION_POST,
        rkey: "one",
        value: { text: "one", createdAt: NOW },
      },
      {
        $type: "com.atproto.repo.applyWrites#create",
        collection: COLLECTION_FOLLOW,
        value: { subject: "did:plc:bbbbbbbbbbbbbbbbbbbbbbbb", createdAt: NOW },
      },
    ],
  }, auth);
  assert.equal(res.status, 200);
  const body = await res.json();
  assert.deepEqual(body.results.map((r: { $type: string }) => r.$type), [
    "com.atproto.repo.applyWrites#createResult",
    "com.atproto.repo.applyWrites#createResult",
  ]);
  const second = await (await xrpcPost(t.app, "com.atproto.repo.applyWrites", {
    repo: session.did,
    writes: [
      { $type: "com.atproto.repo.applyWrites#delete", collection: COLLECTION_POST, rkey: "one" },
      {
        $type: "com.atproto.repo.applyWrites#update",
        collection: COLLECTION_POST,
        rkey: "two",
        value: { text: "two", createdAt: NOW },
      },
    ],
  }, auth)).json();
  assert.deepEqual(second.results, [
    { $type: "com.atproto.repo.applyWrites#deleteResult" },
    {
      $type: "com.atproto.repo.applyWrites#createResult",
      uri: `at://${session.did}/${COLLECTION_POST}/two`,
      cid: second.results[1].cid,
      validationStatus: "valid",
    },
  ]);
  const events = await t.ctx.sequencer.readEvents(0);
  assert.deepEqual(events.map((e) => e.event.ops.map((o) => o.action)), [
    [],
    ["create", "create"],
    ["delete", "create"],
  ]);
  const bad = await xrpcPost(t.app, "com.atproto.repo.applyWrites", {
    repo: session.did,
    writes: [{ $type: "com.atproto.repo.applyWrites#nope", collection: COLLECTION_POST }],
  }, auth);
  assert.equal(bad.status, 400);
  assert.equal((await bad.json()).error, "InvalidRequest");
});

Deno.test("100 concurrent createRecord calls on one repo give 100 commits in 100 consecutive seqs (spec 4.1 rule 1, 6.1)", async () => {
  const wiring = repoHooks();
  await using s = await startTestServer({ hooks: wiring.hooks });
  wiring.bind(s.ctx);
  const session = await signUp(s.url, "carol.test");
  const head = await s.ctx.sequencer.headSeq();
  const responses = await Promise.all(
    Array.from({ length: 100 }, (_, i) =>
      xrpcPost(s.url, "com.atproto.repo.createRecord", {
        repo: session.did,
        collection: COLLECTION_POST,
        record: { text: `concurrent ${i}`, createdAt: NOW },
      }, bearer(session.accessJwt)).then(async (r) => {
        assert.equal(r.status, 200);
        return await r.json();
      })),
  );
  assert.equal(new Set(responses.map((r) => r.commit.cid)).size, 100);
  const events = await s.ctx.sequencer.readEvents(head, 1000);
  assert.deepEqual(events.map((e) => e.seq), Array.from({ length: 100 }, (_, i) => head + 1 + i));
  for (let i = 1; i < events.length; i++) {
    assert.ok(events[i].event.rev > events[i - 1].event.rev, `rev at seq ${events[i].seq}`);
  }
  const revs = responses.map((r) => r.commit.rev).sort();
  assert.deepEqual(revs, events.map((e) => e.event.rev));
  const texts = new Set<string>();
  let cursor = "";
  do {
    const page = await (await xrpcGet(
      s.url,
      `com.atproto.repo.listRecords?repo=${session.did}&collection=${COLLECTION_POST}&limit=30&cursor=${cursor}`,
    )).json();
    for (const r of page.records) texts.add(r.value.text);
    cursor = page.cursor ?? "";
  } while (cursor);
  assert.equal(texts.size, 100);
});

Deno.test("a repo written over HTTP (1,000 records, every collection, deletes) verifies with @atproto/repo against its DID document", async () => {
  const { t, session, auth } = await appWithAccount("dave.test");
  await using _ = t;
  const did = session.did;
  const collections = [COLLECTION_POST, COLLECTION_LIKE, COLLECTION_REPOST, COLLECTION_FOLLOW];
  const created: { uri: string; cid: string }[] = [];
  const batch = 25;
  for (let i = 0; i < 1000; i += batch) {
    const results = await Promise.all(Array.from({ length: batch }, async (_, j) => {
      const n = i + j;
      const collection = collections[n % 4];
      const record = collection === COLLECTION_POST
        ? { text: `post ${n}`, createdAt: NOW }
        : collection === COLLECTION_FOLLOW
        ? { subject: `did:plc:${String(n).padStart(24, "b")}`, createdAt: NOW }
        : {
          subject: {
            uri: `at://${did}/${COLLECTION_POST}/p${n}`,
            cid: "bafyreie5737gdxlw5i64vzichcalba3z2v5n6icifvx5xytvske7mr3hpm",
          },
          createdAt: NOW,
        };
      const res = await xrpcPost(t.app, "com.atproto.repo.createRecord", {
        repo: did,
        collection,
        record,
      }, auth);
      assert.equal(res.status, 200);
      return await res.json();
    }));
    created.push(...results);
  }
  const profile = await xrpcPost(t.app, "com.atproto.repo.putRecord", {
    repo: did,
    collection: COLLECTION_PROFILE,
    rkey: "self",
    record: { displayName: "Dave" },
  }, auth);
  assert.equal(profile.status, 200);
  await profile.body?.cancel();
  const deleted = created.filter((_, i) => i % 10 === 3);
  for (const d of deleted) {
    const res = await xrpcPost(
      t.app,
      "com.atproto.repo.deleteRecord",
      { repo: did, uri: d.uri },
      auth,
    );
    assert.equal(res.status, 200);
    await res.body?.cancel();
  }

  const doc =
    (await (await xrpcGet(t.app, `com.atproto.identity.resolveDid?did=${did}`)).json()).didDoc;
  const method = doc.verificationMethod.find((m: { id: string }) => m.id === `${did}#atproto`);
  const didKey = `did:key:${method.publicKeyMultibase}`;

  const repoRes = await xrpcGet(t.app, `com.atproto.sync.getRepo?did=${did}`);
  assert.equal(repoRes.status, 200);
  assert.equal(repoRes.headers.get("content-type"), "application/vnd.ipld.car");
  const car = new Uint8Array(await repoRes.arrayBuffer());
  const verified = await verifyRepoCar(car, did, didKey);
  assert.equal(verified.creates.length, 1000 - deleted.length + 1);
  const byUri = new Map(
    verified.creates.map((c) => [`at://${did}/${c.collection}/${c.rkey}`, c.cid.toString()]),
  );
  for (const [i, c] of created.entries()) {
    assert.equal(byUri.get(c.uri), i % 10 === 3 ? undefined : c.cid, c.uri);
  }
  const latest = await (await xrpcGet(t.app, `com.atproto.sync.getLatestCommit?did=${did}`)).json();
  assert.equal(verified.commit.cid.toString(), latest.cid);
  assert.equal(verified.commit.rev, latest.rev);

  // Record proofs: present and absent.
  const proofOf = async (uri: string) => {
    const [, , , collection, rkey] = uri.split("/");
    const res = await xrpcGet(
      t.app,
      `com.atproto.sync.getRecord?did=${did}&collection=${collection}&rkey=${rkey}`,
    );
    assert.equal(res.status, 200);
    return { collection, rkey, proof: new Uint8Array(await res.arrayBuffer()) };
  };
  const present = await proofOf(created[0].uri);
  const presentClaim = {
    collection: present.collection,
    rkey: present.rkey,
    cid: parseCid(created[0].cid),
  };
  const okPresent = await verifyProofs(present.proof, [presentClaim as never], did, didKey);
  assert.equal(okPresent.verified.length, 1);
  const absent = await proofOf(deleted[0].uri);
  const absentClaim = { collection: absent.collection, rkey: absent.rkey, cid: null };
  const okAbsent = await verifyProofs(absent.proof, [absentClaim as never], did, didKey);
  assert.equal(okAbsent.verified.length, 1);
  const refuted = await verifyProofs(
    absent.proof,
    [{ ...absentClaim, cid: parseCid(deleted[0].cid) } as never],
    did,
    didKey,
  );
  assert.equal(refuted.unverified.length, 1);

  // getBlocks returns exactly the named blocks; an unknown one is BlockNotFound.
  const commitCid = latest.cid;
  const blocks = await xrpcGet(
    t.app,
    `com.atproto.sync.getBlocks?did=${did}&cids=${commitCid}&cids=${created[0].cid}`,
  );
  assert.equal(blocks.status, 200);
  const read = readCar(new Uint8Array(await blocks.arrayBuffer()));
  assert.deepEqual(read.roots, []);
  assert.deepEqual([...read.blocks.keys()].sort(), [commitCid, created[0].cid].sort());
  // A CID in another base names the same block (getBlocksCar reads any base).
  const base58 = await xrpcGet(
    t.app,
    `com.atproto.sync.getBlocks?did=${did}&cids=${parseCid(commitCid).toString(base58btc)}`,
  );
  assert.equal(base58.status, 200);
  const read58 = readCar(new Uint8Array(await base58.arrayBuffer()));
  assert.deepEqual([...read58.blocks.keys()], [commitCid]);
  const missing = await xrpcGet(
    t.app,
    `com.atproto.sync.getBlocks?did=${did}&cids=bafyreie5737gdxlw5i64vzichcalba3z2v5n6icifvx5xytvske7mr3hpa`,
  );
  assert.equal(missing.status, 400);
  assert.equal((await missing.json()).error, "BlockNotFound");

  // listRepos pages.
  const repos = await (await xrpcGet(t.app, "com.atproto.sync.listRepos?limit=1")).json();
  assert.deepEqual(repos.repos, [{ did, head: latest.cid, rev: latest.rev, active: true }]);
  assert.equal(repos.cursor, did);
  const rest = await (await xrpcGet(t.app, `com.atproto.sync.listRepos?cursor=${did}`)).json();
  assert.deepEqual(rest.repos, []);
});

Deno.test("a 1 MiB blob round-trips unauthenticated; 1 MiB + 1 byte is 413 and stores nothing (spec 4.1 rule 4)", async () => {
  const wiring = repoHooks();
  await using s = await startTestServer({ hooks: wiring.hooks });
  wiring.bind(s.ctx);
  const session = await signUp(s.url, "erin.test");
  const bytes = crypto.getRandomValues(new Uint8Array(1024 * 1024).subarray(0, 65536));
  const blob = new Uint8Array(1024 * 1024);
  for (let i = 0; i < blob.length; i += bytes.length) blob.set(bytes, i);
  blob[blob.length - 1] = 7;
  const upload = await fetch(`${s.url}/xrpc/com.atproto.repo.uploadBlob`, {
    method: "POST",
    headers: { ...bearer(session.accessJwt), "content-type": "image/png" },
    body: blob,
  });
  assert.equal(upload.status, 200);
  const { blob: ref } = await upload.json();
  assert.equal(ref.$type, "blob");
  assert.equal(ref.mimeType, "image/png");
  assert.equal(ref.size, 1024 * 1024);
  assert.match(ref.ref.$link, /^bafkrei/);

  const blobUrl = `${s.url}/xrpc/com.atproto.sync.getBlob?did=${session.did}&cid=${ref.ref.$link}`;
  // Served once a record references it (an upload alone is not).
  const unreferenced = await fetch(blobUrl);
  assert.equal(unreferenced.status, 400);
  assert.equal((await unreferenced.json()).error, "BlobNotFound");
  const post = await xrpcPost(s.url, "com.atproto.repo.createRecord", {
    repo: session.did,
    collection: COLLECTION_POST,
    record: {
      text: "a picture",
      createdAt: new Date().toISOString(),
      embed: { $type: EMBED_IMAGES, images: [{ alt: "", image: ref }] },
    },
  }, bearer(session.accessJwt));
  assert.equal(post.status, 200);
  const got = await fetch(blobUrl);
  assert.equal(got.status, 200);
  assert.equal(got.headers.get("content-type"), "image/png");
  assert.equal(got.headers.get("x-content-type-options"), "nosniff");
  assert.equal(got.headers.get("content-security-policy"), "default-src 'none'; sandbox");
  assert.deepEqual(new Uint8Array(await got.arrayBuffer()), blob);
  // The same blob named in base58btc.
  const got58 = await fetch(
    `${s.url}/xrpc/com.atproto.sync.getBlob?did=${session.did}&cid=${
      parseCid(ref.ref.$link).toString(base58btc)
    }`,
  );
  assert.equal(got58.status, 200);
  assert.deepEqual(new Uint8Array(await got58.arrayBuffer()), blob);

  // Too large, streamed without a Content-Length.
  const big = new Uint8Array(1024 * 1024 + 1);
  const stream = new ReadableStream<Uint8Array>({
    start(controller) {
      for (let i = 0; i < big.length; i += 100_000) controller.enqueue(big.slice(i, i + 100_000));
      controller.close();
    },
  });
  const rejected = await fetch(`${s.url}/xrpc/com.atproto.repo.uploadBlob`, {
    method: "POST",
    headers: { ...bearer(session.accessJwt), "content-type": "application/octet-stream" },
    body: stream,
  });
  assert.equal(rejected.status, 413);
  assert.equal((await rejected.json()).error, "BlobTooLarge");
  // Too large with a declared length.
  const declared = await fetch(`${s.url}/xrpc/com.atproto.repo.uploadBlob`, {
    method: "POST",
    headers: { ...bearer(session.accessJwt), "content-type": "application/octet-stream" },
    body: big,
  });
  assert.equal(declared.status, 413);
  assert.equal((await declared.json()).error, "BlobTooLarge");
  const stored: string[] = [];
  for await (const e of s.ctx.kv.list({ prefix: ["blob"] })) stored.push(String(e.key[2]));
  for await (const e of s.ctx.kv.list({ prefix: ["blob_chunk"] })) stored.push(String(e.key[2]));
  assert.deepEqual([...new Set(stored)], [ref.ref.$link]);
  void blobChunkPrefix;

  const unknown = await fetch(
    `${s.url}/xrpc/com.atproto.sync.getBlob?did=${session.did}&cid=bafkreie5737gdxlw5i64vzichcalba3z2v5n6icifvx5xytvske7mr3hpm`,
  );
  assert.equal(unknown.status, 400);
  await unknown.body?.cancel();
});
