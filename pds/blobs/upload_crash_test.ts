// Crash claim of blob storage (spec 4.1 rule 4: never a partial blob visible; nothing lost or
// leaked on a crash): an account host killed with SIGKILL while storing 1 MiB uploads leaves no
// visible partial blob, and every chunk it left without metadata is found by the sweep.
import assert from "node:assert/strict";
import { makeTempDir } from "../../runtime/_test_helpers.ts";
import { signUp, spawnPds, TEST_JWT_SECRET, xrpcPost } from "../_test_helpers.ts";
import { getBlob } from "./blob_store.ts";
import { sweepInterruptedUploads, UPLOAD_GRACE_MS } from "./blob_gc.ts";

/** Blobs with chunks in KV, by `did cid`, and whether each has metadata and an upload marker. */
async function storedUploads(kv: Deno.Kv) {
  const out = new Map<string, { did: string; cid: string; meta: boolean; marker: boolean }>();
  for await (const e of kv.list({ prefix: ["blob_chunk"] })) {
    const [, did, cid] = e.key as string[];
    if (out.has(`${did} ${cid}`)) continue;
    const meta = (await kv.get(["blob", did, cid])).value !== null;
    const marker = (await kv.get(["blob_upload", did, cid])).value !== null;
    out.set(`${did} ${cid}`, { did, cid, meta, marker });
  }
  return [...out.values()];
}

async function logIn(url: string, handle: string): Promise<{ accessJwt: string }> {
  const res = await xrpcPost(url, "com.atproto.server.createSession", {
    identifier: handle,
    password: "correct horse battery",
  });
  assert.equal(res.status, 200);
  return await res.json();
}

/** Kills the host at a random moment; a round that hit no upload between its two operations
 * leaves no orphan, so the test kills again (same data) until one did. */
const MAX_ROUNDS = 6;

Deno.test("after SIGKILL during 1 MiB uploads, no partial blob is visible and the sweep finds every orphaned chunk", async () => {
  await using dir = await makeTempDir("pds-upload-crash-");
  const env = { DATA_DIR: dir.path, PDS_JWT_SECRET: TEST_JWT_SECRET };
  let uploaders: { accessJwt: string }[];
  let rounds = 0;
  let orphaned = 0;
  let seed = 0;
  while (orphaned === 0 && rounds < MAX_ROUNDS) {
    rounds++;
    const pds = await spawnPds(env);
    // Each start listens on a new port, so it has a new service identity: a token of the last
    // one would be refused. Sign up in the first round, log in again in the later ones.
    uploaders = await Promise.all(
      [0, 1, 2, 3].map((i) =>
        rounds === 1 ? signUp(pds.url, `uploader${i}.test`) : logIn(pds.url, `uploader${i}.test`)
      ),
    );
    let stop = false;
    let stored = 0;
    const refused = new Set<number>();
    const loops = uploaders.map(async (u, ui) => {
      while (!stop) {
        const n = seed++;
        const bytes = new Uint8Array(1024 * 1024).fill(n & 0xff);
        bytes[0] = ui;
        bytes[1] = n >> 8;
        bytes[2] = n & 0xff;
        try {
          const res = await fetch(`${pds.url}/xrpc/com.atproto.repo.uploadBlob`, {
            method: "POST",
            headers: { authorization: `Bearer ${u.accessJwt}`, "content-type": "image/png" },
            body: bytes,
          });
          await res.body?.cancel();
          if (res.status === 200) stored++;
          else refused.add(res.status);
        } catch {
          return; // The process is gone.
        }
      }
    });
    const deadline = Date.now() + 10_000;
    while (stored < 40 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    const status = await pds.kill("SIGKILL");
    stop = true;
    await Promise.all(loops);
    assert.equal(status.signal, "SIGKILL");
    assert.ok(
      stored >= 40,
      `round ${rounds}: only ${stored} uploads were stored before the deadline (refused: ${[
        ...refused,
      ]})`,
    );
    const kv = await Deno.openKv(`${dir.path}/pds.kv`);
    try {
      orphaned = (await storedUploads(kv)).filter((u) => !u.meta).length;
    } finally {
      kv.close();
    }
  }
  assert.ok(orphaned > 0, `no kill in ${rounds} rounds fell between an upload's two operations`);

  const kv = await Deno.openKv(`${dir.path}/pds.kv`);
  try {
    const uploads = await storedUploads(kv);
    for (const u of uploads) {
      if (u.meta) {
        // A blob with metadata is whole.
        assert.equal((await getBlob(kv, u.did, u.cid))?.bytes.length, 1024 * 1024);
        assert.equal(u.marker, false, `finished upload ${u.cid} kept its marker`);
      } else {
        assert.equal(u.marker, true, `chunks of ${u.cid} have neither metadata nor a marker`);
      }
    }
    const orphans = uploads.filter((u) => !u.meta).length;
    assert.equal(orphans, orphaned);
    const later = Date.now() + UPLOAD_GRACE_MS + 60_000;
    assert.equal(await sweepInterruptedUploads(kv, { now: later }), orphans);
    const after = await storedUploads(kv);
    assert.deepEqual(after.filter((u) => !u.meta || u.marker), []);
    assert.equal(after.length, uploads.length - orphans);
  } finally {
    kv.close();
  }
});
