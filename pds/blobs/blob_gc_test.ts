// Blobs no record needs are deleted: when the last referencing record goes, and uploads never
// referenced after a day (spec 2.3, 4.1 rule 4; the reference host deletes dereferenced blobs).

import assert from "node:assert/strict";
import { cidForRaw } from "../../shared/cid.ts";
import { encodeCbor } from "../../shared/cbor.ts";
import { makeTempDir } from "../../runtime/_test_helpers.ts";
import { COLLECTION_POST, COLLECTION_PROFILE, EMBED_IMAGES } from "../../shared/nsid.ts";
import { createTestApp, signUp, type TestApp, xrpcPost } from "../_test_helpers.ts";
import {
  blobChunkKey,
  blobChunkPrefix,
  blobRefIndexKey,
  blobRefPrefix,
  blobUploadKey,
  repoRecordKey,
} from "../store/keys.ts";
import {
  blobRefIndexBuilt,
  buildBlobRefIndex,
  deleteBlobIfUnreferenced,
  sweepInterruptedUploads,
  sweepUnreferencedBlobs,
  UPLOAD_GRACE_MS,
} from "./blob_gc.ts";
import { getBlob, putBlob } from "./blob_store.ts";

const NOW = "2024-05-01T12:00:00.000Z";
/** A blob of three chunks (chunks are 60,000 bytes). */
const BIG = 150_000;

interface Blob {
  $type: "blob";
  ref: { $link: string };
  mimeType: string;
  size: number;
}

interface Account {
  t: TestApp;
  did: string;
  auth: Record<string, string>;
}

async function setUp(opts: { indexed?: boolean } = {}): Promise<Account> {
  const t = await createTestApp();
  if (opts.indexed ?? true) await buildBlobRefIndex(t.ctx.kv, Date.now());
  const session = await signUp(t.app, "alice.test");
  return { t, did: session.did, auth: { authorization: `Bearer ${session.accessJwt}` } };
}

async function upload({ t, auth }: Account, seed: number, size = 9): Promise<Blob> {
  const bytes = new Uint8Array(size).fill(seed);
  const res = await t.app.request("/xrpc/com.atproto.repo.uploadBlob", {
    method: "POST",
    headers: { ...auth, "content-type": "image/png" },
    body: bytes,
  });
  assert.equal(res.status, 200);
  return (await res.json()).blob;
}

async function postWith(a: Account, ...images: Blob[]): Promise<string> {
  const res = await xrpcPost(a.t.app, "com.atproto.repo.createRecord", {
    repo: a.did,
    collection: COLLECTION_POST,
    record: {
      text: "pictures",
      createdAt: NOW,
      embed: { $type: EMBED_IMAGES, images: images.map((image) => ({ alt: "", image })) },
    },
  }, a.auth);
  assert.equal(res.status, 200);
  return (await res.json()).uri.split("/").pop();
}

async function deletePost(a: Account, rkey: string): Promise<void> {
  const res = await xrpcPost(a.t.app, "com.atproto.repo.deleteRecord", {
    repo: a.did,
    collection: COLLECTION_POST,
    rkey,
  }, a.auth);
  assert.equal(res.status, 200);
}

/**
 * The status of getBlob (400 for a blob no record references, spec 4.1) and how many chunk and
 * reference keys the blob has in KV.
 */
async function blobState(a: Account, blob: Blob): Promise<[number, number, number]> {
  const cid = blob.ref.$link;
  const res = await a.t.app.request(`/xrpc/com.atproto.sync.getBlob?did=${a.did}&cid=${cid}`);
  await res.body?.cancel();
  const count = async (prefix: Deno.KvKey) =>
    (await Array.fromAsync(a.t.ctx.kv.list({ prefix })))
      .length;
  return [
    res.status,
    await count(blobChunkPrefix(a.did, cid)),
    await count(blobRefPrefix(a.did, cid)),
  ];
}

/** Bytes the store holds for the blob (its metadata and chunks), 0 when none. */
async function storedBytes(a: Account, blob: Blob): Promise<number> {
  return (await getBlob(a.t.ctx.kv, a.did, blob.ref.$link))?.bytes.length ?? 0;
}

/** The store holds exactly `bytes` (1 MiB) for `cid`, in all 18 chunks. */
async function assertWhole1MiB(a: Account, cid: string, bytes: Uint8Array): Promise<void> {
  assert.deepEqual((await getBlob(a.t.ctx.kv, a.did, cid))?.bytes, bytes);
  const chunks = await Array.fromAsync(a.t.ctx.kv.list({ prefix: blobChunkPrefix(a.did, cid) }));
  assert.equal(chunks.length, 18);
}

Deno.test("getBlob serves an upload once a record references it, not before (spec 4.1)", async () => {
  const a = await setUp();
  await using _ = a.t;
  const blob = await upload(a, 3, BIG);
  const cid = blob.ref.$link;
  const path = `/xrpc/com.atproto.sync.getBlob?did=${a.did}&cid=${cid}`;
  const before = await a.t.app.request(path);
  assert.equal(before.status, 400);
  assert.deepEqual(await before.json(), {
    error: "BlobNotFound",
    message: `Blob not found: "${cid}"`,
  });
  assert.deepEqual(await blobState(a, blob), [400, 3, 0]);
  const rkey = await postWith(a, blob);
  const after = await a.t.app.request(path);
  assert.equal(after.status, 200);
  assert.equal(after.headers.get("content-type"), "image/png");
  assert.deepEqual(new Uint8Array(await after.arrayBuffer()), new Uint8Array(BIG).fill(3));
  await deletePost(a, rkey);
  assert.deepEqual(await blobState(a, blob), [400, 0, 0]);
});

Deno.test("a blob is deleted with the last record referencing it, not before", async () => {
  const a = await setUp();
  await using _ = a.t;
  const shared = await upload(a, 1, BIG);
  const own = await upload(a, 2);
  const first = await postWith(a, shared, own);
  const second = await postWith(a, shared);
  assert.deepEqual(await blobState(a, shared), [200, 3, 2]);
  await deletePost(a, first);
  assert.deepEqual(await blobState(a, shared), [200, 3, 1]);
  assert.deepEqual(await blobState(a, own), [400, 0, 0]);
  await deletePost(a, second);
  assert.deepEqual(await blobState(a, shared), [400, 0, 0]);
  assert.ok(a.t.lines.some((l) => l.includes("deleted a blob no record references")));
});

Deno.test("replacing a profile avatar deletes the old one; a profile update keeping it does not", async () => {
  const a = await setUp();
  await using _ = a.t;
  const put = async (record: object) => {
    const res = await xrpcPost(a.t.app, "com.atproto.repo.putRecord", {
      repo: a.did,
      collection: COLLECTION_PROFILE,
      rkey: "self",
      record,
    }, a.auth);
    assert.equal(res.status, 200);
  };
  const old = await upload(a, 3);
  const next = await upload(a, 4);
  await put({ displayName: "Alice", avatar: old });
  await put({ description: "still the same picture" });
  assert.deepEqual(await blobState(a, old), [200, 1, 1]);
  await put({ avatar: next });
  assert.deepEqual(await blobState(a, old), [400, 0, 0]);
  assert.deepEqual(await blobState(a, next), [200, 1, 1]);
  await put({ avatar: null });
  assert.deepEqual(await blobState(a, next), [400, 0, 0]);
});

Deno.test("the sweep deletes uploads nobody referenced once a day old, and keeps referenced ones", async () => {
  const a = await setUp();
  await using _ = a.t;
  const stray = await upload(a, 5, BIG);
  const used = await upload(a, 6);
  await postWith(a, used);
  const kv = a.t.ctx.kv;
  assert.equal(await sweepUnreferencedBlobs(kv, { now: Date.now() + UPLOAD_GRACE_MS - 60_000 }), 0);
  assert.deepEqual(await blobState(a, stray), [400, 3, 0]);
  assert.equal(await sweepUnreferencedBlobs(kv, { now: Date.now() + UPLOAD_GRACE_MS + 60_000 }), 1);
  assert.deepEqual(await blobState(a, stray), [400, 0, 0]);
  assert.deepEqual(await blobState(a, used), [200, 1, 1]);
});

Deno.test("records written before the index: nothing is deleted until the backfill indexed them", async () => {
  const a = await setUp({ indexed: false });
  await using _ = a.t;
  const kv = a.t.ctx.kv;
  const blob = await upload(a, 7);
  const rkey = await postWith(a, blob);
  const kept = await upload(a, 8);
  await postWith(a, kept);
  // As a store written before references were indexed: no reference keys.
  for await (const e of kv.list({ prefix: ["blob_ref"] })) await kv.delete(e.key);
  const later = Date.now() + 2 * UPLOAD_GRACE_MS;
  assert.equal(await blobRefIndexBuilt(kv), false);
  assert.equal(await sweepUnreferencedBlobs(kv, { now: later }), 0);
  await deletePost(a, rkey);
  // Until the backfill, references are unknown: a stored blob is still served.
  assert.deepEqual(await blobState(a, blob), [200, 1, 0]);
  assert.equal(await buildBlobRefIndex(kv, Date.now()), 1);
  assert.equal((await kv.get<{ version: number }>(blobRefIndexKey())).value?.version, 1);
  assert.deepEqual(await blobState(a, kept), [200, 1, 1]);
  // Built: a bare upload is no longer served.
  const bare = await upload(a, 12);
  assert.deepEqual(await blobState(a, bare), [400, 1, 0]);
  // The blob of the record deleted before the backfill is unreferenced: the sweep takes it (and
  // the bare upload).
  assert.equal(await sweepUnreferencedBlobs(kv, { now: later }), 2);
  assert.deepEqual(await blobState(a, blob), [400, 0, 0]);
  assert.deepEqual(await blobState(a, bare), [400, 0, 0]);
  assert.deepEqual(await blobState(a, kept), [200, 1, 1]);
  assert.equal(await buildBlobRefIndex(kv, Date.now()), 0, "built once");
});

Deno.test("a sweep racing records that reference old uploads never leaves a record without its blob", async () => {
  const a = await setUp();
  await using _ = a.t;
  const kv = a.t.ctx.kv;
  const later = Date.now() + 2 * UPLOAD_GRACE_MS;
  let kept = 0;
  let refused = 0;
  for (let round = 0; round < 60; round++) {
    const blobs = await Promise.all([0, 1, 2].map((i) => upload(a, 10 + 3 * round + i)));
    const [, ...writes] = await Promise.all([
      sweepUnreferencedBlobs(kv, { now: later }),
      ...blobs.map((image) =>
        xrpcPost(a.t.app, "com.atproto.repo.createRecord", {
          repo: a.did,
          collection: COLLECTION_POST,
          record: {
            text: "race",
            createdAt: NOW,
            embed: { $type: EMBED_IMAGES, images: [{ alt: "", image }] },
          },
        }, a.auth)
      ),
    ]);
    for (const [i, res] of writes.entries()) {
      const body = await res.json();
      const [status] = await blobState(a, blobs[i]);
      if (res.status === 200) {
        kept++;
        assert.equal(status, 200, `round ${round}: a record references a deleted blob`);
      } else {
        refused++;
        assert.deepEqual([res.status, body.error, status], [400, "BlobNotFound", 400]);
      }
    }
  }
  assert.equal(kept + refused, 180);
});

Deno.test("an upload referenced without $type is indexed and survives the sweep", async () => {
  const a = await setUp();
  await using _ = a.t;
  const blob = await upload(a, 9);
  const { $type: _type, ...bare } = blob;
  const res = await xrpcPost(a.t.app, "com.atproto.repo.putRecord", {
    repo: a.did,
    collection: COLLECTION_PROFILE,
    rkey: "self",
    record: { avatar: bare },
  }, a.auth);
  assert.equal(res.status, 200);
  const later = Date.now() + 2 * UPLOAD_GRACE_MS;
  assert.equal(await sweepUnreferencedBlobs(a.t.ctx.kv, { now: later }), 0);
  assert.deepEqual(await blobState(a, blob), [200, 1, 1]);
});

Deno.test("uploading an old unreferenced blob again restarts its day", async () => {
  const a = await setUp();
  await using _ = a.t;
  const first = await upload(a, 11);
  const kv = a.t.ctx.kv;
  const meta = await kv.get<{ createdAt: string }>(["blob", a.did, first.ref.$link]);
  await kv.set(meta.key, {
    ...meta.value,
    createdAt: new Date(Date.now() - 2 * UPLOAD_GRACE_MS).toISOString(),
  });
  const again = await upload(a, 11);
  assert.deepEqual(again, first);
  assert.equal(await sweepUnreferencedBlobs(kv, { now: Date.now() + 60_000 }), 0);
  assert.deepEqual(await blobState(a, first), [400, 1, 0]);
  assert.equal(await storedBytes(a, first), 9);
});

Deno.test("the backfill indexes records of many references and long keys in bounded operations", async () => {
  await using dir = await makeTempDir();
  const kv = await Deno.openKv(`${dir.path}/pds.kv`);
  try {
    const did = "did:plc:ffffffffffffffffffffffff";
    const blob = (n: number) => ({
      $type: "blob",
      ref: cidForRaw(new TextEncoder().encode(`blob ${n}`)),
      mimeType: "image/png",
      size: 6,
    });
    const store = (rkey: string, blobs: number[]) =>
      kv.set(repoRecordKey(did, COLLECTION_POST, rkey), {
        bytes: encodeCbor({ $type: COLLECTION_POST, pictures: blobs.map(blob) }),
      });
    // As written before references were indexed: 50 records of three blobs under 500-character
    // record keys (one operation of them all would pass Deno KV's 81,920 key bytes), and one
    // record of 600 blobs (more than one operation's mutations).
    for (let i = 0; i < 50; i++) {
      await store(`${"r".repeat(497)}${String(i).padStart(3, "0")}`, [3 * i, 3 * i + 1, 3 * i + 2]);
    }
    await store("many", Array.from({ length: 600 }, (_, i) => 1000 + i));
    assert.equal(await buildBlobRefIndex(kv, Date.now()), 51);
    assert.equal(await blobRefIndexBuilt(kv), true);
    assert.equal((await Array.fromAsync(kv.list({ prefix: ["blob_ref", did] }))).length, 750);
  } finally {
    kv.close();
  }
});

Deno.test("the chunks of an upload interrupted between its two operations are swept after a day", async () => {
  const a = await setUp();
  await using _ = a.t;
  const kv = a.t.ctx.kv;
  const markers = async () => (await Array.fromAsync(kv.list({ prefix: ["blob_upload"] }))).length;
  // Uploads of one operation (10 chunks) and of two (the largest blob, 18 chunks) leave no marker.
  const ten = await upload(a, 21, 600_000);
  const largest = await upload(a, 22, 1024 * 1024);
  assert.equal(await markers(), 0);
  assert.deepEqual(await blobState(a, ten), [400, 10, 0]);
  assert.deepEqual(await blobState(a, largest), [400, 18, 0]);

  // What an upload of the largest blob leaves when the process dies after its first operation:
  // the first ten chunks and the marker, no metadata.
  const bytes = new Uint8Array(1024 * 1024).fill(23);
  const cid = cidForRaw(bytes).toString();
  const startedAt = Date.now();
  const first = kv.atomic().set(blobUploadKey(a.did, cid), {
    createdAt: new Date(startedAt).toISOString(),
  });
  for (let i = 0; i < 10; i++) {
    first.set(blobChunkKey(a.did, cid, i), bytes.slice(i * 60_000, (i + 1) * 60_000));
  }
  assert.equal((await first.commit()).ok, true);
  const orphan: Blob = { $type: "blob", ref: { $link: cid }, mimeType: "image/png", size: 0 };
  assert.deepEqual(await blobState(a, orphan), [400, 10, 0]);

  assert.equal(await sweepInterruptedUploads(kv, { now: startedAt + UPLOAD_GRACE_MS - 1 }), 0);
  assert.deepEqual(await blobState(a, orphan), [400, 10, 0]);
  assert.equal(await sweepInterruptedUploads(kv, { now: startedAt + UPLOAD_GRACE_MS + 1 }), 1);
  assert.deepEqual(await blobState(a, orphan), [400, 0, 0]);
  assert.equal(await markers(), 0);
  // Complete uploads are untouched.
  assert.deepEqual(await blobState(a, ten), [400, 10, 0]);
  assert.deepEqual(await blobState(a, largest), [400, 18, 0]);
  assert.deepEqual([await storedBytes(a, ten), await storedBytes(a, largest)], [
    600_000,
    1024 * 1024,
  ]);
});

Deno.test("an upload started again after an interruption is neither swept nor left marked", async () => {
  const a = await setUp();
  await using _ = a.t;
  const kv = a.t.ctx.kv;
  const bytes = new Uint8Array(1024 * 1024).fill(24);
  const cid = cidForRaw(bytes).toString();
  const old = new Date(Date.now() - 2 * UPLOAD_GRACE_MS).toISOString();
  const first = kv.atomic().set(blobUploadKey(a.did, cid), { createdAt: old });
  for (let i = 0; i < 10; i++) first.set(blobChunkKey(a.did, cid, i), new Uint8Array(60_000));
  assert.equal((await first.commit()).ok, true);
  // The sweep read the old marker; the same blob is uploaded again before it deletes anything.
  const stale = await kv.get(blobUploadKey(a.did, cid));
  const again = await upload(a, 24, 1024 * 1024);
  assert.equal(again.ref.$link, cid);
  assert.equal(await kv.atomic().check(stale).commit().then((r) => r.ok), false);
  assert.equal(await sweepInterruptedUploads(kv, { now: Date.now() + 60_000 }), 0);
  assert.deepEqual((await getBlob(kv, a.did, cid))?.bytes, bytes);
  assert.equal((await Array.fromAsync(kv.list({ prefix: ["blob_upload"] }))).length, 0);
});

Deno.test("a deletion racing a second upload of the same large blob leaves it whole", async () => {
  // Uploads U and W of one 1 MiB blob: W refreshed the stored metadata, so U's refresh failed
  // and U stores the blob again, in two operations. A deletion that read W's metadata commits
  // between U's two operations: it must not take the chunks U's first operation wrote.
  const a = await setUp();
  await using _ = a.t;
  const kv = a.t.ctx.kv;
  const bytes = new Uint8Array(1024 * 1024).map((_, i) => (i * 7) & 0xff);
  const res = await a.t.app.request("/xrpc/com.atproto.repo.uploadBlob", {
    method: "POST",
    headers: { ...a.auth, "content-type": "image/png" },
    body: bytes,
  });
  assert.equal(res.status, 200);
  const cid = (await res.json()).blob.ref.$link as string;
  // U's first operation: the marker and the first ten chunks (the same bytes again).
  const first = kv.atomic().set(blobUploadKey(a.did, cid), { createdAt: new Date().toISOString() });
  for (let i = 0; i < 10; i++) {
    first.set(blobChunkKey(a.did, cid, i), bytes.slice(i * 60_000, (i + 1) * 60_000));
  }
  assert.equal((await first.commit()).ok, true);

  assert.equal(await deleteBlobIfUnreferenced(kv, a.did, cid), false);

  // The blob stays whole, as U's second operation will publish it.
  await assertWhole1MiB(a, cid, bytes);
  // Once no upload is under way, the unreferenced blob is deleted as before.
  await kv.delete(blobUploadKey(a.did, cid));
  assert.equal(await deleteBlobIfUnreferenced(kv, a.did, cid), true);
  assert.equal((await Array.fromAsync(kv.list({ prefix: blobChunkPrefix(a.did, cid) }))).length, 0);
});

Deno.test("an upload whose first chunks another upload and a deletion replaced meanwhile stores the blob again, whole", async () => {
  // Uploads U and V of one 1 MiB blob share its upload marker. V runs whole between U's two
  // operations, then a deletion (no record references the blob, no marker is left) removes it.
  // U's second operation must not publish metadata over the chunks the deletion took.
  const a = await setUp();
  await using _ = a.t;
  const kv = a.t.ctx.kv;
  const bytes = new Uint8Array(1024 * 1024).map((_, i) => (i * 13) & 0xff);
  let deleted: boolean | null = null;
  const ref = await putBlob(kv, a.did, bytes, {
    mimeType: "image/png",
    now: Date.now(),
    betweenOps: async () => {
      if (deleted !== null) return;
      await putBlob(kv, a.did, bytes, { mimeType: "image/png", now: Date.now() });
      deleted = await deleteBlobIfUnreferenced(kv, a.did, cidForRaw(bytes).toString());
    },
  });
  assert.equal(deleted, true);
  const cid = ref.ref.$link;
  await assertWhole1MiB(a, cid, bytes);
  assert.equal((await kv.get(blobUploadKey(a.did, cid))).value, null);
});

Deno.test("a stopped sweep deletes nothing more", async () => {
  const a = await setUp();
  await using _ = a.t;
  const strays = [await upload(a, 1, BIG), await upload(a, 2), await upload(a, 3)];
  const kv = a.t.ctx.kv;
  const later = Date.now() + UPLOAD_GRACE_MS + 60_000;
  const stopped = AbortSignal.abort();
  assert.equal(await sweepUnreferencedBlobs(kv, { now: later, signal: stopped }), 0);
  assert.deepEqual(await Promise.all(strays.map((b) => blobState(a, b))), [
    [400, 3, 0],
    [400, 1, 0],
    [400, 1, 0],
  ]);
  assert.deepEqual(await Promise.all(strays.map((b) => storedBytes(a, b))), [BIG, 9, 9]);
  // An interrupted upload is left alike.
  const marker = kv.atomic().set(blobUploadKey(a.did, "bafkqaaa"), { createdAt: NOW });
  marker.set(blobChunkKey(a.did, "bafkqaaa", 0), new Uint8Array(1));
  assert.equal((await marker.commit()).ok, true);
  assert.equal(await sweepInterruptedUploads(kv, { now: later, signal: stopped }), 0);
  // Not stopped: everything goes.
  assert.equal(await sweepUnreferencedBlobs(kv, { now: later }), 3);
  assert.equal(await sweepInterruptedUploads(kv, { now: later }), 1);
  for (const b of strays) assert.deepEqual(await blobState(a, b), [400, 0, 0]);
});
