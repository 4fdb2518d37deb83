import assert from "node:assert/strict";
import { verifyProofs, verifyRecords, verifyRepoCar } from "@atproto/repo";
import { generateP256KeyPair, type P256KeyPair, verifyCompact } from "../../shared/keys.ts";
import { encodeDidKey } from "../../shared/multikey.ts";
import { silentLogger } from "../../shared/log.ts";
import { CID, formatCid, parseCid } from "../../shared/cid.ts";
import { readCar } from "../../shared/car.ts";
import { decodeCbor, encodeCbor } from "../../shared/cbor.ts";
import {
  COLLECTION_FOLLOW,
  COLLECTION_LIKE,
  COLLECTION_POST,
  COLLECTION_PROFILE,
  COLLECTION_REPOST,
  EMBED_IMAGES,
} from "../../shared/nsid.ts";
import { putBlob } from "../blobs/blob_store.ts";
import { makeTempDir } from "../../runtime/_test_helpers.ts";
import { storeParts } from "../_test_helpers.ts";
import { repoRootKey } from "../store/keys.ts";
import { RepoError } from "./errors.ts";
import { RepoService } from "./repository.ts";
import type { RepoWrite } from "./prepare_writes.ts";
import { decodeCommit } from "./commit.ts";
import { BlockStore } from "./block_store.ts";
import {
  exportRepoCar,
  getBlocksCar,
  getRecord,
  getRecordProofCar,
  listCollections,
  listRecords,
  listRepos,
} from "./reader.ts";

const DID = "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa";
const NOW = "2024-05-01T12:00:00.000Z";

/**
 * A service on a fresh KV file; the account {@link DID} signs with `key`, and with `anyDid`
 * every DID does (many repositories), else other DIDs have no account.
 */
async function withRepo(
  fn: (repo: RepoService, kv: Deno.Kv, key: P256KeyPair) => Promise<void>,
  opts: { anyDid?: boolean } = {},
): Promise<void> {
  await using dir = await makeTempDir();
  const kv = await Deno.openKv(`${dir.path}/pds.kv`);
  try {
    const key = generateP256KeyPair();
    const repo = new RepoService({
      ...storeParts(kv),
      log: silentLogger,
      now: Date.now,
      signingKey: (did) => Promise.resolve(opts.anyDid || did === DID ? key : null),
    });
    await fn(repo, kv, key);
  } finally {
    kv.close();
  }
}

/** {@link withRepo} where every DID signs with the one key. */
function withAnyRepo(fn: (repo: RepoService, kv: Deno.Kv) => Promise<void>): Promise<void> {
  return withRepo(fn, { anyDid: true });
}

function post(text: string): Record<string, unknown> {
  return { text, createdAt: NOW };
}

Deno.test("initRepo writes an empty signed commit with seq 1 and since null (spec 6.1)", async () => {
  await withRepo(async (repo) => {
    const root = await repo.initRepo(DID);
    assert.equal(root.dataCid, "bafyreie5737gdxlw5i64vzichcalba3z2v5n6icifvx5xytvske7mr3hpm");
    const [event] = await repo.sequencer.readEvents(0);
    assert.equal(event.seq, 1);
    assert.equal(event.event.since, null);
    assert.equal(event.event.rev, root.rev);
    assert.deepEqual(event.event.ops, []);
    assert.equal(formatCid(event.event.commit), root.commitCid);
    // A second call is a no-op.
    assert.deepEqual(await repo.initRepo(DID), root);
    assert.equal(await repo.sequencer.headSeq(), 1);
  });
});

Deno.test("applyWrites refuses unknown accounts with RepoNotFound", async () => {
  await withRepo(async (repo) => {
    await assert.rejects(
      repo.applyWrites("did:plc:bbbbbbbbbbbbbbbbbbbbbbbb", [
        { action: "create", collection: COLLECTION_POST, record: post("hi") },
      ]),
      (e: unknown) => e instanceof RepoError && e.code === "RepoNotFound",
    );
  });
});

Deno.test("100 concurrent creates give 100 commits, increasing revs and consecutive seqs (spec 4.1 rule 1)", async () => {
  await withRepo(async (repo, kv) => {
    await repo.initRepo(DID);
    const results = await Promise.all(
      Array.from({ length: 100 }, (_, i) =>
        repo.applyWrites(DID, [
          { action: "create", collection: COLLECTION_POST, record: post(`post ${i}`) },
        ])),
    );
    const commits = new Set(results.map((r) => r.commit!.cid));
    assert.equal(commits.size, 100);
    const events = await repo.sequencer.readEvents(1, 1000);
    assert.deepEqual(events.map((e) => e.seq), Array.from({ length: 100 }, (_, i) => i + 2));
    for (let i = 1; i < events.length; i++) {
      assert.ok(events[i].event.rev > events[i - 1].event.rev);
      assert.equal(events[i].event.since, events[i - 1].event.rev);
      assert.ok(events[i].event.prevData!.equals(decodeCommitData(events[i - 1].event)));
    }
    const listed = await listRecords(kv, DID, COLLECTION_POST, { limit: 100 });
    assert.equal(listed.records.length, 100);
    assert.deepEqual(
      new Set(listed.records.map((r) => (r.value as { text: string }).text)),
      new Set(Array.from({ length: 100 }, (_, i) => `post ${i}`)),
    );
  });
});

function decodeCommitData(event: { blocks: Uint8Array; commit: CID }): CID {
  const car = readCar(event.blocks);
  const commit = decodeCbor(car.blocks.get(formatCid(event.commit))!) as { data: CID };
  return commit.data;
}

Deno.test("a commit event carries the commit, new nodes, records and ops with prev", async () => {
  await withRepo(async (repo) => {
    const created = await repo.applyWrites(DID, [
      { action: "create", collection: COLLECTION_POST, rkey: "3kaaaaaaaaaa2", record: post("a") },
    ]);
    const deleted = await repo.applyWrites(DID, [
      { action: "delete", collection: COLLECTION_POST, rkey: "3kaaaaaaaaaa2" },
    ]);
    const events = await repo.sequencer.readEvents(0);
    assert.deepEqual(events.map((e) => e.seq), [1, 2, 3]);
    const [, create, del] = events.map((e) => e.event);
    assert.equal(create.seq, created.commit!.seq);
    const car = readCar(create.blocks);
    assert.equal(formatCid(car.roots[0]), created.commit!.cid);
    const recordCid = created.results[0].cid!;
    assert.ok(car.blocks.has(recordCid));
    assert.deepEqual(
      create.ops.map((o) => ({ ...o, cid: o.cid && formatCid(o.cid) })),
      [{ action: "create", path: `${COLLECTION_POST}/3kaaaaaaaaaa2`, cid: recordCid }],
    );
    assert.equal(del.rev, deleted.commit!.rev);
    assert.equal(del.ops[0].action, "delete");
    assert.equal(del.ops[0].cid, null);
    assert.equal(formatCid(del.ops[0].prev!), recordCid);
    // Deleting again changes nothing: no commit, no event.
    const again = await repo.applyWrites(DID, [
      { action: "delete", collection: COLLECTION_POST, rkey: "3kaaaaaaaaaa2" },
    ]);
    assert.equal(again.commit, null);
    assert.equal(await repo.sequencer.headSeq(), 3);
  });
});

Deno.test("profile writes overlay the stored record; null removes a field (spec 4.1 rule 3)", async () => {
  await withRepo(async (repo, kv) => {
    const put = (record: Record<string, unknown>) =>
      repo.applyWrites(DID, [{
        action: "update",
        collection: COLLECTION_PROFILE,
        rkey: "self",
        record,
      }]);
    await put({ displayName: "Alice" });
    await put({ description: "Hello" });
    let stored = await getRecord(kv, DID, COLLECTION_PROFILE, "self");
    assert.deepEqual(stored!.value, {
      $type: COLLECTION_PROFILE,
      displayName: "Alice",
      description: "Hello",
    });
    await put({ displayName: null });
    stored = await getRecord(kv, DID, COLLECTION_PROFILE, "self");
    assert.deepEqual(stored!.value, { $type: COLLECTION_PROFILE, description: "Hello" });
    // createRecord on the profile overlays too.
    await repo.applyWrites(DID, [
      { action: "create", collection: COLLECTION_PROFILE, record: { displayName: "Al" } },
    ]);
    stored = await getRecord(kv, DID, COLLECTION_PROFILE, "self");
    assert.deepEqual(stored!.value, {
      $type: COLLECTION_PROFILE,
      description: "Hello",
      displayName: "Al",
    });
  });
});

Deno.test("a 161-grapheme post is InvalidRecord and a 160-grapheme post is accepted (spec 8)", async () => {
  await withRepo(async (repo, kv) => {
    const long = "é".repeat(80) + "👍🏽".repeat(81);
    await assert.rejects(
      repo.applyWrites(DID, [{
        action: "create",
        collection: COLLECTION_POST,
        record: post(long),
      }]),
      (e: unknown) =>
        e instanceof RepoError && e.code === "InvalidRecord" && /text/.test(e.message),
    );
    const ok = "é".repeat(80) + "👍🏽".repeat(80);
    const res = await repo.applyWrites(DID, [
      { action: "create", collection: COLLECTION_POST, record: post(ok) },
    ]);
    assert.equal(res.results[0].action, "create");
    const rkey = res.results[0].uri.split("/").pop()!;
    assert.equal(
      ((await getRecord(kv, DID, COLLECTION_POST, rkey))!.value as { text: string }).text,
      ok,
    );
  });
});

Deno.test("applyWrites checks $type, duplicate paths, existing records and swaps", async () => {
  await withRepo(async (repo) => {
    const reject = (writes: RepoWrite[], code: string, opts = {}) =>
      assert.rejects(
        repo.applyWrites(DID, writes, opts),
        (e: unknown) => e instanceof RepoError && e.code === code,
      );
    await reject([{
      action: "create",
      collection: COLLECTION_POST,
      record: { ...post("x"), $type: COLLECTION_LIKE },
    }], "InvalidRecord");
    await reject([
      { action: "create", collection: COLLECTION_POST, rkey: "a", record: post("x") },
      { action: "delete", collection: COLLECTION_POST, rkey: "a" },
    ], "InvalidRequest");
    await repo.applyWrites(DID, [
      { action: "create", collection: COLLECTION_POST, rkey: "a", record: post("x") },
    ]);
    await reject(
      [{ action: "create", collection: COLLECTION_POST, rkey: "a", record: post("y") }],
      "InvalidRequest",
    );
    await reject(
      [{ action: "delete", collection: COLLECTION_POST, rkey: "a", swapRecord: null }],
      "InvalidSwap",
    );
    await reject(
      [{ action: "create", collection: COLLECTION_POST, record: post("z") }],
      "InvalidSwap",
      { swapCommit: "bafyreie5737gdxlw5i64vzichcalba3z2v5n6icifvx5xytvske7mr3hpm" },
    );
    await reject(
      Array.from({ length: 101 }, () => ({
        action: "create" as const,
        collection: COLLECTION_POST,
        record: post("many"),
      })),
      "InvalidRequest",
    );
  });
});

Deno.test("a repository of every collection with deletes exports and verifies with @atproto/repo", async () => {
  await withRepo(async (repo, kv, key) => {
    const subject = {
      uri: `at://${DID}/${COLLECTION_POST}/3kaaaaaaaaaa2`,
      cid: formatCid(CID.parse("bafyreie5737gdxlw5i64vzichcalba3z2v5n6icifvx5xytvske7mr3hpm")),
    };
    const writes: RepoWrite[] = [];
    for (let i = 0; i < 1000; i++) {
      const kind = i % 4;
      const collection =
        [COLLECTION_POST, COLLECTION_LIKE, COLLECTION_REPOST, COLLECTION_FOLLOW][kind];
      const record = kind === 0
        ? post(`post number ${i}`)
        : kind === 3
        ? { subject: `did:plc:${String(i).padStart(24, "a")}`, createdAt: NOW }
        : { subject, createdAt: NOW };
      writes.push({ action: "create", collection, record });
    }
    const created: { collection: string; rkey: string }[] = [];
    for (let i = 0; i < writes.length; i += 50) {
      const res = await repo.applyWrites(DID, writes.slice(i, i + 50));
      for (const r of res.results) {
        const [, , , collection, rkey] = r.uri.split("/");
        created.push({ collection, rkey });
      }
    }
    await repo.applyWrites(DID, [{
      action: "update",
      collection: COLLECTION_PROFILE,
      rkey: "self",
      record: { displayName: "Everyone" },
    }]);
    const deleted = created.filter((_, i) => i % 7 === 0);
    for (let i = 0; i < deleted.length; i += 50) {
      await repo.applyWrites(
        DID,
        deleted.slice(i, i + 50).map((d) => ({ action: "delete" as const, ...d })),
      );
    }
    const car = await exportRepoCar(repo.blocks, DID);
    const didKey = encodeDidKey(key.publicKey);
    const verified = await verifyRepoCar(car, DID, didKey);
    const expected = 1000 - deleted.length + 1;
    assert.equal(verified.creates.length, expected);
    const byPath = new Map(
      verified.creates.map((c) => [`${c.collection}/${c.rkey}`, c.cid.toString()]),
    );
    for (const d of deleted) assert.equal(byPath.has(`${d.collection}/${d.rkey}`), false);
    for (
      const collection of [COLLECTION_POST, COLLECTION_LIKE, COLLECTION_REPOST, COLLECTION_FOLLOW]
    ) {
      let cursor: string | undefined;
      do {
        const page = await listRecords(kv, DID, collection, { limit: 100, cursor });
        for (const r of page.records) {
          assert.equal(byPath.get(`${collection}/${r.uri.split("/").pop()}`), r.cid);
        }
        cursor = page.cursor;
      } while (cursor);
    }
    assert.deepEqual(
      (await listCollections(kv, DID)).sort(),
      [COLLECTION_FOLLOW, COLLECTION_LIKE, COLLECTION_POST, COLLECTION_REPOST, COLLECTION_PROFILE]
        .sort(),
    );
    // A wrong key fails the signature check.
    await assert.rejects(verifyRepoCar(car, DID, encodeDidKey(generateP256KeyPair().publicKey)));

    // Proofs of presence and absence.
    const present = created[4]; // a post: posts are unique, likes of one subject share a CID
    assert.equal(present.collection, COLLECTION_POST);
    const absent = deleted[3];
    const presentCid = byPath.get(`${present.collection}/${present.rkey}`)!;
    const proof = await getRecordProofCar(repo.blocks, DID, present.collection, present.rkey);
    const records = await verifyRecords(proof, DID, didKey);
    assert.equal(records.length, 1);
    assert.equal(records[0].rkey, present.rkey);
    const presentClaim = { ...present, cid: parseCid(presentCid) } as never;
    const presentResult = await verifyProofs(proof, [presentClaim], DID, didKey);
    assert.equal(presentResult.verified.length, 1);
    const absentProof = await getRecordProofCar(repo.blocks, DID, absent.collection, absent.rkey);
    const absentClaim = { ...absent, cid: null } as never;
    const absentResult = await verifyProofs(absentProof, [absentClaim], DID, didKey);
    assert.equal(absentResult.verified.length, 1);
    assert.equal(absentResult.unverified.length, 0);
    // The proof of a present record refutes a claim that it is absent, and vice versa.
    const wrong = await verifyProofs(proof, [{ ...present, cid: null } as never], DID, didKey);
    assert.equal(wrong.unverified.length, 1);
    const wrong2 = await verifyProofs(
      absentProof,
      [{ ...absent, cid: parseCid(presentCid) } as never],
      DID,
      didKey,
    );
    assert.equal(wrong2.unverified.length, 1);

    // listRepos pages by DID.
    const repos = await listRepos(kv, { limit: 10 });
    assert.deepEqual(repos.repos.map((r) => r.did), [DID]);
  });
});

Deno.test("getRepo with since exports only blocks of later commits", async () => {
  await withRepo(async (repo) => {
    const first = await repo.applyWrites(DID, [
      { action: "create", collection: COLLECTION_POST, rkey: "one", record: post("one") },
    ]);
    const second = await repo.applyWrites(DID, [
      { action: "create", collection: COLLECTION_POST, rkey: "two", record: post("two") },
    ]);
    const car = readCar(await exportRepoCar(repo.blocks, DID, first.commit!.rev));
    assert.equal(formatCid(car.roots[0]), second.commit!.cid);
    assert.ok(car.blocks.has(second.commit!.cid));
    assert.ok(car.blocks.has(second.results[0].cid!));
    assert.equal(car.blocks.has(first.results[0].cid!), false);
    const full = readCar(await exportRepoCar(repo.blocks, DID));
    assert.ok(full.blocks.has(first.results[0].cid!));
  });
});

Deno.test("concurrent commits to many repositories are signed validly and read back from a fresh KV handle", async () => {
  await using dir = await makeTempDir();
  const path = `${dir.path}/pds.kv`;
  const keys = new Map<string, P256KeyPair>();
  const dids = Array.from({ length: 20 }, (_, i) => `did:plc:${"c".repeat(22)}${10 + i}`);
  for (const d of dids) keys.set(d, generateP256KeyPair());
  const written: { did: string; uri: string; cid: string }[] = [];
  const kv = await Deno.openKv(path);
  try {
    const repo = new RepoService({
      ...storeParts(kv),
      log: silentLogger,
      now: Date.now,
      signingKey: (did) => Promise.resolve(keys.get(did) ?? null),
    });
    await Promise.all(dids.map(async (did) => {
      for (let i = 0; i < 10; i++) {
        const res = await repo.applyWrites(did, [
          { action: "create", collection: COLLECTION_POST, record: post(`post ${i}`) },
        ]);
        written.push({ did, uri: res.results[0].uri, cid: res.results[0].cid! });
      }
    }));
    const events = await repo.sequencer.readEvents(0, 1000);
    assert.equal(events.length, 20 * 11);
    assert.deepEqual(events.map((e) => e.seq), events.map((_, i) => i + 1));
    for (const e of events) {
      const blocks = readCar(e.event.blocks).blocks;
      const commit = decodeCommit(blocks.get(formatCid(e.event.commit))!);
      const { sig: _, ...unsigned } = commit;
      assert.ok(verifyCompact(keys.get(e.event.repo)!.publicKey, encodeCbor(unsigned), commit.sig));
    }
  } finally {
    kv.close();
  }
  // A fresh handle has no cached CID index: records, blocks and exports still read back.
  const kv2 = await Deno.openKv(path);
  const blocks2 = new BlockStore(kv2);
  try {
    for (const w of written.slice(0, 20)) {
      const [, , , collection, rkey] = w.uri.split("/");
      const record = await getRecord(kv2, w.did, collection, rkey);
      assert.equal(record?.cid, w.cid);
      const car = readCar(await getBlocksCar(blocks2, w.did, [w.cid]));
      assert.deepEqual([...car.blocks.keys()], [w.cid]);
    }
    for (const did of dids.slice(0, 3)) {
      const repoCar = await exportRepoCar(blocks2, did);
      const root = (await kv2.get<{ commitCid: string }>(repoRootKey(did))).value!;
      await verifyRepoCar(repoCar, did, encodeDidKey(keys.get(did)!.publicKey));
      assert.equal(formatCid(readCar(repoCar).roots[0]), root.commitCid);
    }
  } finally {
    kv2.close();
  }
});

Deno.test("300 repositories committing at once: grouped commits stay within Deno KV's 100 checks", async () => {
  await withAnyRepo(async (repo) => {
    const dids = Array.from({ length: 300 }, (_, i) => `did:plc:${"d".repeat(21)}${100 + i}`);
    await Promise.all(dids.map((did) => repo.initRepo(did)));
    const results = await Promise.allSettled(dids.map((did) =>
      repo.applyWrites(did, [
        { action: "create", collection: COLLECTION_POST, record: post(`hello from ${did}`) },
      ])
    ));
    const failed = results.filter((r) => r.status === "rejected");
    assert.deepEqual(failed.map((r) => String((r as PromiseRejectedResult).reason)), []);
    const events = await repo.sequencer.readEvents(0, 1000);
    assert.equal(events.length, 600);
    assert.deepEqual(events.map((e) => e.seq), events.map((_, i) => i + 1));
  });
});

Deno.test("commits with many image references stay within Deno KV's key bytes: grouped ones commit, an oversized one is InvalidRequest", async () => {
  await withAnyRepo(async (repo, kv) => {
    const dids = Array.from({ length: 6 }, (_, i) => `did:plc:${"e".repeat(23)}${i}`);
    const withImages = async (did: string, n: number) => {
      const images = [];
      for (let i = 0; i < 4; i++) {
        const bytes = new TextEncoder().encode(`${did} image ${i}`);
        images.push({
          alt: "",
          image: await putBlob(kv, did, bytes, { mimeType: "image/png", now: 0 }),
        });
      }
      return { ...post(`post ${n}`), embed: { $type: EMBED_IMAGES, images } };
    };
    const batches = await Promise.all(dids.map(async (did) => {
      const writes: RepoWrite[] = [];
      for (let n = 0; n < 40; n++) {
        writes.push({
          action: "create",
          collection: COLLECTION_POST,
          record: await withImages(did, n),
        });
      }
      return writes;
    }));
    const results = await Promise.allSettled(
      dids.map((did, i) => repo.applyWrites(did, batches[i])),
    );
    assert.deepEqual(
      results.map((r) => r.status === "rejected" ? String(r.reason) : r.status),
      dids.map(() => "fulfilled"),
    );
    // One commit of 100 posts of four images under long record keys: refused, not a 500.
    const writes: RepoWrite[] = [];
    for (let n = 0; n < 100; n++) {
      writes.push({
        action: "create",
        collection: COLLECTION_POST,
        rkey: `${"k".repeat(100)}${String(n).padStart(20, "0")}`,
        record: await withImages(dids[0], n),
      });
    }
    await assert.rejects(repo.applyWrites(dids[0], writes), (err) => {
      assert.ok(err instanceof RepoError);
      assert.equal(err.code, "InvalidRequest");
      assert.match(err.message, /^Commit is too large: .* key bytes; send fewer writes$/);
      return true;
    });
  });
});

Deno.test("first posts of new repositories read no blocks, so they build no block index", async () => {
  await withAnyRepo(async (repo) => {
    const dids = Array.from({ length: 3 }, (_, i) => `did:plc:${"e".repeat(23)}${i}`);
    for (const did of dids) await repo.initRepo(did);
    for (const did of dids) {
      await repo.applyWrites(did, [{
        action: "create",
        collection: COLLECTION_POST,
        record: post("first"),
      }]);
    }
    // A by-CID read would have built the repository's block index (block_store.ts), although
    // the first post's commit replaced (and uncached) the empty node the others still had.
    assert.deepEqual(repo.blocks.indexedRepos(), []);
  });
});
