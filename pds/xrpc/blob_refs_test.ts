// Records may reference only blobs their account uploaded, as uploaded (spec 2.3, 4.1 rule 4;
// the reference account host's BlobNotFound and InvalidMimeType).

import assert from "node:assert/strict";
import { formatCid } from "../../shared/cid.ts";
import { COLLECTION_POST, COLLECTION_PROFILE, EMBED_IMAGES } from "../../shared/nsid.ts";
import { createTestApp, signUp, type TestApp, xrpcPost } from "../_test_helpers.ts";

const NOW = "2024-05-01T12:00:00.000Z";
/** A blob reference that was never uploaded (the raw CID of bytes nobody sent). */
const NEVER_UPLOADED = "bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku";

interface Blob {
  $type: "blob";
  ref: { $link: string };
  mimeType: string;
  size: number;
}

async function setUp(): Promise<{ t: TestApp; did: string; auth: Record<string, string> }> {
  const t = await createTestApp();
  const session = await signUp(t.app, "alice.test");
  return { t, did: session.did, auth: { authorization: `Bearer ${session.accessJwt}` } };
}

async function upload(
  t: TestApp,
  auth: Record<string, string>,
  bytes: Uint8Array<ArrayBuffer>,
  mimeType: string,
): Promise<Blob> {
  const res = await t.app.request("/xrpc/com.atproto.repo.uploadBlob", {
    method: "POST",
    headers: { ...auth, "content-type": mimeType },
    body: bytes,
  });
  assert.equal(res.status, 200);
  return (await res.json()).blob;
}

function putProfile(t: TestApp, did: string, auth: Record<string, string>, record: object) {
  return xrpcPost(t.app, "com.atproto.repo.putRecord", {
    repo: did,
    collection: COLLECTION_PROFILE,
    rkey: "self",
    record,
  }, auth);
}

async function expectError(res: Response, error: string, message: string): Promise<void> {
  const body = await res.json();
  assert.deepEqual({ status: res.status, error: body.error, message: body.message }, {
    status: 400,
    error,
    message,
  });
}

Deno.test("a record referencing a blob nobody uploaded is 400 BlobNotFound and commits nothing", async () => {
  const { t, did, auth } = await setUp();
  await using _ = t;
  const headBefore = await t.ctx.sequencer.headSeq();
  const avatar = { $type: "blob", ref: { $link: NEVER_UPLOADED }, mimeType: "image/png", size: 7 };
  await expectError(
    await putProfile(t, did, auth, { displayName: "Alice", avatar }),
    "BlobNotFound",
    `Could not find blob ${NEVER_UPLOADED} (at avatar)`,
  );
  assert.equal(await t.ctx.sequencer.headSeq(), headBefore);
});

Deno.test("another account's upload is BlobNotFound for this one", async () => {
  const { t, did, auth } = await setUp();
  await using _ = t;
  const bob = await signUp(t.app, "bob.test");
  const bobs = await upload(t, { authorization: `Bearer ${bob.accessJwt}` }, png(1), "image/png");
  await expectError(
    await putProfile(t, did, auth, { avatar: bobs }),
    "BlobNotFound",
    `Could not find blob ${bobs.ref.$link} (at avatar)`,
  );
});

Deno.test("a reference with another MIME type or size than the upload is refused; image fields need images", async () => {
  const { t, did, auth } = await setUp();
  await using _ = t;
  const image = await upload(t, auth, png(2), "image/png");
  const cid = image.ref.$link;
  await expectError(
    await putProfile(t, did, auth, { avatar: { ...image, mimeType: "image/jpeg" } }),
    "InvalidMimeType",
    `Blob ${cid} at avatar was uploaded as image/png, not image/jpeg`,
  );
  await expectError(
    await putProfile(t, did, auth, { banner: { ...image, size: image.size + 1 } }),
    "InvalidRecord",
    `Blob ${cid} at banner is ${image.size} bytes, not ${image.size + 1}`,
  );
  const text = await upload(t, auth, new TextEncoder().encode("not a picture"), "text/plain");
  await expectError(
    await xrpcPost(t.app, "com.atproto.repo.createRecord", {
      repo: did,
      collection: COLLECTION_POST,
      record: {
        text: "look",
        createdAt: NOW,
        embed: { $type: EMBED_IMAGES, images: [{ alt: "", image }, { alt: "", image: text }] },
      },
    }, auth),
    "InvalidMimeType",
    `Blob ${text.ref.$link} at embed.images[1].image must be an image, not text/plain`,
  );
});

Deno.test("uploaded images are accepted, listed in the commit event's blobs, and a kept avatar is not checked again", async () => {
  const { t, did, auth } = await setUp();
  await using _ = t;
  const avatar = await upload(t, auth, png(3), "image/png");
  const photo = await upload(t, auth, png(4), "image/jpeg");
  const profile = await putProfile(t, did, auth, { displayName: "Alice", avatar });
  assert.equal(profile.status, 200);
  const post = await xrpcPost(t.app, "com.atproto.repo.createRecord", {
    repo: did,
    collection: COLLECTION_POST,
    record: {
      text: "two of the same",
      createdAt: NOW,
      embed: {
        $type: EMBED_IMAGES,
        images: [{ alt: "a", image: photo }, { alt: "b", image: photo }],
      },
    },
  }, auth);
  assert.equal(post.status, 200);
  // Only the description is sent: the stored avatar is kept and not refused.
  const again = await putProfile(t, did, auth, { description: "hi" });
  assert.equal(again.status, 200);
  const events = await t.ctx.sequencer.readEvents(0);
  const blobsBySeq = events.slice(-3).map((e) => e.event.blobs.map(formatCid));
  assert.deepEqual(blobsBySeq, [[avatar.ref.$link], [photo.ref.$link], [avatar.ref.$link]]);
  const stored = await t.app.request(
    `/xrpc/com.atproto.repo.getRecord?repo=${did}&collection=${COLLECTION_PROFILE}&rkey=self`,
  );
  const { value } = await stored.json();
  assert.deepEqual(value.avatar, avatar);
  assert.equal(value.description, "hi");
});

/** Distinct small bytes per `n` (blob contents do not matter to the host). */
function png(n: number): Uint8Array<ArrayBuffer> {
  return new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, n]);
}

Deno.test("a blob reference without $type is checked like a typed one", async () => {
  const { t, did, auth } = await setUp();
  await using _ = t;
  const untyped = { ref: { $link: NEVER_UPLOADED }, mimeType: "text/plain", size: 7 };
  await expectError(
    await putProfile(t, did, auth, { banner: untyped }),
    "BlobNotFound",
    `Could not find blob ${NEVER_UPLOADED} (at banner)`,
  );
  const text = await upload(t, auth, new TextEncoder().encode("words"), "text/plain");
  const { $type: _type, ...bare } = text;
  await expectError(
    await putProfile(t, did, auth, { avatar: bare }),
    "InvalidMimeType",
    `Blob ${text.ref.$link} at avatar must be an image, not text/plain`,
  );
  await expectError(
    await putProfile(t, did, auth, { avatar: { ref: text.ref } }),
    "InvalidRecord",
    `Blob ${text.ref.$link} at avatar needs the mimeType and size of its upload`,
  );
});
