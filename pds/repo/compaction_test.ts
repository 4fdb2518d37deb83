import assert from "node:assert/strict";
import { verifyProofs, verifyRepoCar } from "@atproto/repo";
import { readCar } from "../../shared/car.ts";
import { decodeCbor } from "../../shared/cbor.ts";
import { CID, formatCid } from "../../shared/cid.ts";
import { generateP256KeyPair, type P256KeyPair } from "../../shared/keys.ts";
import { type Logger, silentLogger } from "../../shared/log.ts";
import { encodeDidKey } from "../../shared/multikey.ts";
import { COLLECTION_LIKE, COLLECTION_POST, COLLECTION_PROFILE } from "../../shared/nsid.ts";
import { makeTempDir } from "../../runtime/_test_helpers.ts";
import { repoRootKey } from "../store/keys.ts";
import { BlockStore } from "./block_store.ts";
import { compactRepoBlocks } from "./compaction.ts";
import { exportRepoCar, getRecord, getRecordProofCar } from "./reader.ts";
import { storeParts } from "../_test_helpers.ts";
import { RepoService } from "./repository.ts";
import type { RepoWrite } from "./prepare_writes.ts";
import type { RepoRoot } from "./repo_root.ts";

const DID = "did:plc:cccccccccccccccccccccccc";
const NOW = "2024-05-01T12:00:00.000Z";

/** The parts of one KV handle its services share (`storeParts`). */
type StoreParts = ReturnType<typeof storeParts>;

function service(
  parts: StoreParts,
  key: P256KeyPair,
  opts: { compactAfterGarbageBlocks?: number; log?: Logger } = {},
): RepoService {
  return new RepoService({
    ...parts,
    log: opts.log ?? silentLogger,
    now: Date.now,
    signingKey: (did) => Promise.resolve(did === DID ? key : null),
    compactAfterGarbageBlocks: opts.compactAfterGarbageBlocks,
  });
}

async function withKv(
  fn: (kv: Deno.Kv, key: P256KeyPair, parts: StoreParts) => Promise<void>,
): Promise<void> {
  await using dir = await makeTempDir();
  const kv = await Deno.openKv(`${dir.path}/pds.kv`);
  try {
    await fn(kv, generateP256KeyPair(), storeParts(kv));
  } finally {
    kv.close();
  }
}

/** Every stored copy of every block: CID string -> number of stored commits holding it. */
async function storedCopies(kv: Deno.Kv): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for (const pack of await new BlockStore(kv).source(DID).packs()) {
    for (const id of pack.blocks.keys()) out.set(id, (out.get(id) ?? 0) + 1);
  }
  return out;
}

async function currentRoot(kv: Deno.Kv): Promise<RepoRoot & { versionstamp: string }> {
  const entry = await kv.get<RepoRoot>(repoRootKey(DID));
  return { ...entry.value!, versionstamp: entry.versionstamp! };
}

/** Posts, likes sharing one CID, profile updates and deletes: a repository with garbage. */
async function writeHistory(repo: RepoService): Promise<{ deleted: string[]; kept: string[] }> {
  const subject = {
    uri: `at://${DID}/${COLLECTION_POST}/3kaaaaaaaaaa2`,
    cid: formatCid(CID.parse("bafyreie5737gdxlw5i64vzichcalba3z2v5n6icifvx5xytvske7mr3hpm")),
  };
  const rkeys: string[] = [];
  for (let i = 0; i < 60; i++) {
    const write: RepoWrite = i % 3 === 2
      // Identical likes: one record block (one CID) that several records share.
      ? { action: "create", collection: COLLECTION_LIKE, record: { subject, createdAt: NOW } }
      : {
        action: "create",
        collection: COLLECTION_POST,
        record: { text: `post ${i}`, createdAt: NOW },
      };
    const res = await repo.applyWrites(DID, [write]);
    rkeys.push(res.results[0].uri.split("/").slice(3).join("/"));
  }
  for (let i = 0; i < 5; i++) {
    await repo.applyWrites(DID, [{
      action: "update",
      collection: COLLECTION_PROFILE,
      rkey: "self",
      record: { displayName: `name ${i}` },
    }]);
  }
  const deleted = rkeys.filter((_, i) => i % 4 === 0); // includes likes that share their CID
  for (const path of deleted) {
    const [collection, rkey] = path.split("/");
    await repo.applyWrites(DID, [{ action: "delete", collection, rkey }]);
  }
  return { deleted, kept: rkeys.filter((_, i) => i % 4 !== 0) };
}

Deno.test("compaction keeps exactly the blocks the current commit reaches, once each (spec 1 rule 2)", async () => {
  await withKv(async (kv, key, parts) => {
    const repo = service(parts, key);
    const { deleted, kept } = await writeHistory(repo);
    const exported = await exportRepoCar(repo.blocks, DID);
    const reachable = new Set(readCar(exported).blocks.keys());
    const before = await storedCopies(kv);
    const copiesBefore = [...before.values()].reduce((a, b) => a + b, 0);
    assert.ok(before.size > reachable.size, "the history left unreachable blocks");

    const result = await repo.compact(DID);
    assert.ok(result !== null);
    assert.equal(result.complete, true);
    assert.equal(result.blocksKept, reachable.size);
    assert.equal(result.blocksRemoved, copiesBefore - reachable.size);
    const after = await storedCopies(kv);
    assert.deepEqual([...after.keys()].sort(), [...reachable].sort());
    assert.ok([...after.values()].every((n) => n === 1), "each block stored once");

    // Nothing a reader sees changed: the same export, verified; every record still readable.
    assert.deepEqual(await exportRepoCar(repo.blocks, DID), exported);
    const verified = await verifyRepoCar(exported, DID, encodeDidKey(key.publicKey));
    assert.equal(verified.creates.length, kept.length + 1); // + the profile
    for (const path of kept) {
      const [collection, rkey] = path.split("/");
      assert.notEqual(await getRecord(kv, DID, collection, rkey), null, path);
    }
    for (const path of deleted) {
      const [collection, rkey] = path.split("/");
      assert.equal(await getRecord(kv, DID, collection, rkey), null, path);
    }

    // A second compaction finds nothing; writes go on from the compacted store.
    const again = await repo.compact(DID);
    assert.deepEqual(
      { removed: again!.blocksRemoved, rewritten: again!.rewritten, deleted: again!.deleted },
      { removed: 0, rewritten: 0, deleted: 0 },
    );
    await repo.applyWrites(DID, [{
      action: "create",
      collection: COLLECTION_POST,
      record: { text: "after", createdAt: NOW },
    }]);
    const next = await verifyRepoCar(
      await exportRepoCar(repo.blocks, DID),
      DID,
      encodeDidKey(key.publicKey),
    );
    assert.equal(next.creates.length, kept.length + 2);
  });
});

Deno.test("a compaction whose root is no longer current removes nothing", async () => {
  await withKv(async (kv, key, parts) => {
    const repo = service(parts, key);
    await writeHistory(repo);
    const stale = await currentRoot(kv);
    await repo.applyWrites(DID, [{
      action: "create",
      collection: COLLECTION_POST,
      record: { text: "moves the root", createdAt: NOW },
    }]);
    const before = await storedCopies(kv);
    const result = await compactRepoBlocks(repo.blocks, DID, stale);
    assert.equal(result.complete, false);
    assert.equal(result.blocksRemoved, 0);
    assert.deepEqual(await storedCopies(kv), before);
    await verifyRepoCar(await exportRepoCar(repo.blocks, DID), DID, encodeDidKey(key.publicKey));
  });
});

Deno.test("writes queue a compaction once their garbage reaches the threshold", async () => {
  await withKv(async (kv, key, parts) => {
    const lines: string[] = [];
    const log = { ...silentLogger, info: (msg: string) => void lines.push(msg) } as Logger;
    // Below the threshold: every block ever written is still stored.
    const lazy = service(parts, key, { compactAfterGarbageBlocks: 1_000_000, log });
    const paths: string[] = [];
    for (let i = 0; i < 10; i++) {
      const res = await lazy.applyWrites(DID, [{
        action: "create",
        collection: COLLECTION_POST,
        record: { text: `lazy ${i}`, createdAt: NOW },
      }]);
      paths.push(res.results[0].uri);
    }
    const reachableCount = () =>
      exportRepoCar(parts.blocks, DID).then((car) => readCar(car).blocks.size);
    assert.ok((await storedCopies(kv)).size > await reachableCount());
    assert.equal(lines.filter((l) => l === "repository compacted").length, 0);

    const eager = service(parts, key, { compactAfterGarbageBlocks: 20, log });
    for (let i = 0; i < 10; i++) {
      await eager.applyWrites(DID, [{
        action: "create",
        collection: COLLECTION_POST,
        record: { text: `eager ${i}`, createdAt: NOW },
      }]);
    }
    // The compaction runs in the repository's queue: a read through the queue waits for it.
    await eager.compact(DID);
    assert.ok(lines.filter((l) => l === "repository compacted").length >= 2);
    const stored = await storedCopies(kv);
    assert.equal(stored.size, await reachableCount());
    await verifyRepoCar(await exportRepoCar(parts.blocks, DID), DID, encodeDidKey(key.publicKey));
  });
});

Deno.test("each commit counts its garbage in the root; a compaction resets the count", async () => {
  await withKv(async (kv, key, parts) => {
    const repo = service(parts, key, { compactAfterGarbageBlocks: 1_000_000 });
    // A history without shared blocks (no identical records), so that every stored copy beyond
    // the reachable ones is garbage some commit counted.
    const rkeys: string[] = [];
    for (let i = 0; i < 40; i++) {
      const res = await repo.applyWrites(DID, [{
        action: "create",
        collection: COLLECTION_POST,
        record: { text: `counted ${i}`, createdAt: NOW },
      }]);
      rkeys.push(res.results[0].uri.split("/").pop()!);
    }
    for (let i = 0; i < 3; i++) {
      await repo.applyWrites(DID, [{
        action: "update",
        collection: COLLECTION_PROFILE,
        rkey: "self",
        record: { displayName: `counted ${i}` },
      }]);
    }
    for (const rkey of rkeys.slice(0, 10)) {
      await repo.applyWrites(DID, [{ action: "delete", collection: COLLECTION_POST, rkey }]);
    }
    const reachable = readCar(await exportRepoCar(repo.blocks, DID)).blocks.size;
    const copies = [...(await storedCopies(kv)).values()].reduce((a, b) => a + b, 0);
    const root = await currentRoot(kv);
    assert.equal(root.garbage, copies - reachable);
    assert.equal(root.kept, undefined);

    const result = await repo.compact(DID);
    assert.equal(result!.blocksRemoved, copies - reachable);
    const compacted = await currentRoot(kv);
    assert.deepEqual(
      { ...compacted, versionstamp: "" },
      { ...root, versionstamp: "", garbage: 0, kept: reachable },
    );
    // The next commit counts from zero and carries the kept count on.
    await repo.applyWrites(DID, [{
      action: "delete",
      collection: COLLECTION_POST,
      rkey: rkeys[10],
    }]);
    const next = await currentRoot(kv);
    const garbage = [...(await storedCopies(kv)).values()].reduce((a, b) => a + b, 0) -
      readCar(await exportRepoCar(repo.blocks, DID)).blocks.size;
    assert.equal(next.garbage, garbage);
    assert.ok(garbage > 0);
    assert.equal(next.kept, reachable);
  });
});

Deno.test("a restarted account host compacts on the garbage the previous run counted", async () => {
  await withKv(async (kv, key, parts) => {
    const before = service(parts, key, { compactAfterGarbageBlocks: 1_000_000 });
    for (let i = 0; i < 20; i++) {
      await before.applyWrites(DID, [{
        action: "create",
        collection: COLLECTION_POST,
        record: { text: `before restart ${i}`, createdAt: NOW },
      }]);
    }
    const counted = (await currentRoot(kv)).garbage!;
    assert.ok(counted > 20);

    // A new service on the same KV (a restart): one more commit puts the count over a threshold
    // that this commit's own garbage is far below.
    const lines: string[] = [];
    const log = { ...silentLogger, info: (msg: string) => void lines.push(msg) } as Logger;
    const after = service(parts, key, { compactAfterGarbageBlocks: counted + 1, log });
    await after.applyWrites(DID, [{
      action: "create",
      collection: COLLECTION_POST,
      record: { text: "after restart", createdAt: NOW },
    }]);
    await after.initRepo(DID); // a no-op through the repository's queue: the compaction ran
    assert.deepEqual(lines, ["repository compacted"]);
    const root = await currentRoot(kv);
    assert.equal(root.garbage, 0);
    const stored = await storedCopies(kv);
    assert.equal(stored.size, readCar(await exportRepoCar(parts.blocks, DID)).blocks.size);
    assert.equal(root.kept, stored.size);
  });
});

Deno.test("a writer holding a root compacted away by another process retries from the new root", async () => {
  await withKv(async (kv, key, parts) => {
    const a = service(parts, key);
    const b = service(parts, key); // a second process sharing the KV file
    await b.applyWrites(DID, [{
      action: "create",
      collection: COLLECTION_POST,
      record: { text: "b caches this root", createdAt: NOW },
    }]);
    for (let i = 0; i < 20; i++) {
      await a.applyWrites(DID, [{
        action: "create",
        collection: COLLECTION_POST,
        record: { text: `a ${i}`, createdAt: NOW },
      }]);
    }
    const result = await a.compact(DID);
    assert.ok(result!.blocksRemoved > 0);
    const res = await b.applyWrites(DID, [{
      action: "create",
      collection: COLLECTION_POST,
      record: { text: "b again", createdAt: NOW },
    }]);
    assert.equal(res.commit!.cid, (await currentRoot(kv)).commitCid);
    const verified = await verifyRepoCar(
      await exportRepoCar(parts.blocks, DID),
      DID,
      encodeDidKey(key.publicKey),
    );
    assert.equal(verified.creates.length, 22);
  });
});

/**
 * `kv` as readers use it, except that `between` runs (once, to its end) right after the first
 * read: a reader that read the root then meets the store as `between` left it.
 */
function pausedAfterFirstRead(kv: Deno.Kv, between: () => Promise<void>): Deno.Kv {
  let reads = 0;
  let ran: Promise<void> | null = null;
  const gate = () => reads++ === 0 ? Promise.resolve() : (ran ??= between());
  return new Proxy(kv, {
    get(target, prop) {
      if (prop === "get") {
        return async (...args: Parameters<Deno.Kv["get"]>) => {
          await gate();
          return target.get(...args);
        };
      }
      if (prop === "list") {
        return async function* (...args: Parameters<Deno.Kv["list"]>) {
          await gate();
          yield* target.list(...args);
        };
      }
      const value = Reflect.get(target, prop, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

Deno.test("getRepo and sync.getRecord readers whose root was compacted away read again from the new root", async () => {
  await withKv(async (kv, key, parts) => {
    const repo = service(parts, key, { compactAfterGarbageBlocks: 1_000_000 });
    const { kept } = await writeHistory(repo);
    const didKey = encodeDidKey(key.publicKey);
    let n = 0;
    // Between the reader's root read and its block reads: a commit, then a compaction that
    // removes the blocks of the root the reader holds (its commit block at least).
    const commitAndCompact = async () => {
      await repo.applyWrites(DID, [{
        action: "create",
        collection: COLLECTION_POST,
        record: { text: `meanwhile ${n++}`, createdAt: NOW },
      }]);
      const result = await repo.compact(DID);
      assert.ok(result!.blocksRemoved > 0);
    };

    const held = await currentRoot(kv);
    const car = await exportRepoCar(
      new BlockStore(pausedAfterFirstRead(kv, commitAndCompact)),
      DID,
    );
    const now = await currentRoot(kv);
    assert.notEqual(now.commitCid, held.commitCid);
    assert.deepEqual(readCar(car).roots.map(formatCid), [now.commitCid]);
    assert.deepEqual(car, await exportRepoCar(repo.blocks, DID));
    const verified = await verifyRepoCar(car, DID, didKey);
    assert.equal(verified.creates.length, kept.length + 2); // + the profile, + "meanwhile 0"

    const [collection, rkey] = kept[0].split("/");
    const proof = await getRecordProofCar(
      new BlockStore(pausedAfterFirstRead(kv, commitAndCompact)),
      DID,
      collection,
      rkey,
    );
    const latest = await currentRoot(kv);
    assert.notEqual(latest.commitCid, now.commitCid);
    assert.deepEqual(readCar(proof).roots.map(formatCid), [latest.commitCid]);
    const cid = (await getRecord(kv, DID, collection, rkey))!.cid;
    const checked = await verifyProofs(
      proof,
      [{ collection, rkey, cid: CID.parse(cid) } as never],
      DID,
      didKey,
    );
    assert.equal(checked.verified.length, 1);
  });
});

Deno.test("a CID index naming a commit that another process compacted finds the block in its later copy", async () => {
  await using dir = await makeTempDir();
  const path = `${dir.path}/pds.kv`;
  const key = generateP256KeyPair();
  const kvA = await Deno.openKv(path);
  const kvB = await Deno.openKv(path); // another process: its own handle, its own caches
  try {
    const a = service(storeParts(kvA), key, { compactAfterGarbageBlocks: 1_000_000 });
    const subject = {
      uri: `at://${DID}/${COLLECTION_POST}/3kaaaaaaaaaa2`,
      cid: "bafyreie5737gdxlw5i64vzichcalba3z2v5n6icifvx5xytvske7mr3hpm",
    };
    const like = {
      action: "create",
      collection: COLLECTION_LIKE,
      record: { subject, createdAt: NOW },
    };
    const first = await a.applyWrites(DID, [like as RepoWrite]);
    const shared = first.results[0].cid!; // the record block the second like stores again
    const post = await a.applyWrites(DID, [{
      action: "create",
      collection: COLLECTION_POST,
      record: { text: "indexed by a", createdAt: NOW },
    }]);
    // a's index now exists (built by this read) and names the first like's commit for `shared`.
    const sourceA = a.blocks.source(DID);
    assert.equal((await sourceA.getStored([post.results[0].cid!])).size, 1);

    // b stores the same record block in a later commit, then compacts: the block stays only there.
    const b = service(storeParts(kvB), key, { compactAfterGarbageBlocks: 1_000_000 });
    const second = await b.applyWrites(DID, [like as RepoWrite]);
    assert.equal(second.results[0].cid, shared);
    assert.ok((await b.compact(DID))!.blocksRemoved > 0);

    const found = await sourceA.getStored([shared]);
    assert.equal(found.get(shared)?.rev, second.commit!.rev);
    // Writes and proofs through a's handle read it too.
    const [collection, rkey] = first.results[0].uri.split("/").slice(3);
    const proof = await getRecordProofCar(a.blocks, DID, collection, rkey);
    assert.ok(readCar(proof).blocks.has(shared));
  } finally {
    kvA.close();
    kvB.close();
  }
});

Deno.test("a delete that empties the top of the tree counts the dropped nodes as garbage", async () => {
  await withKv(async (kv, key, parts) => {
    const repo = service(parts, key, { compactAfterGarbageBlocks: 1_000_000 });
    // Key heights 0 and 2: the second key puts an empty node at layer 1 under the new root, and
    // deleting it drops both the root and that node.
    for (const rkey of ["3kaaaaaa00000", "3kaaaaaa00045"]) {
      await repo.applyWrites(DID, [{
        action: "create",
        collection: COLLECTION_POST,
        rkey,
        record: { text: rkey, createdAt: NOW },
      }]);
    }
    await repo.applyWrites(DID, [{
      action: "delete",
      collection: COLLECTION_POST,
      rkey: "3kaaaaaa00045",
    }]);
    const copies = [...(await storedCopies(kv)).values()].reduce((a, b) => a + b, 0);
    const reachable = readCar(await exportRepoCar(repo.blocks, DID)).blocks.size;
    assert.equal((await currentRoot(kv)).garbage, copies - reachable);
  });
});

Deno.test("automatic compactions run one at a time, in the background, and leave every repository whole", async () => {
  await withKv(async (_kv, key, parts) => {
    const dids = ["a", "b", "c", "d"].map((c) => `did:plc:${c.repeat(24)}`);
    /** Each logged compaction: its DID, start and end (performance.now()), background flag. */
    const runs: { did: string; start: number; end: number; background: boolean }[] = [];
    const log = {
      ...silentLogger,
      info: (msg: string, fields?: Record<string, unknown>) => {
        if (msg !== "repository compacted") return;
        const end = performance.now();
        runs.push({
          did: fields!.did as string,
          start: end - (fields!.ms as number),
          end,
          background: fields!.background as boolean,
        });
      },
    } as Logger;
    const repo = new RepoService({
      ...parts,
      log,
      now: Date.now,
      signingKey: (did) => Promise.resolve(dids.includes(did) ? key : null),
      compactAfterGarbageBlocks: 15,
    });
    // Four repositories written at the same rate reach the threshold together.
    await Promise.all(dids.map(async (did) => {
      for (let i = 0; i < 24; i++) {
        await repo.applyWrites(did, [{
          action: "create",
          collection: COLLECTION_POST,
          record: { text: `${did} ${i}`, createdAt: NOW },
        }]);
      }
    }));
    await repo.compactionsSettled();
    assert.ok(runs.length >= dids.length, `${runs.length} compactions`);
    assert.deepEqual(new Set(runs.map((r) => r.did)), new Set(dids));
    assert.ok(runs.every((r) => r.background));
    runs.sort((x, y) => x.start - y.start);
    for (let i = 1; i < runs.length; i++) {
      // `ms` is rounded: allow 1 ms.
      assert.ok(
        runs[i].start >= runs[i - 1].end - 1,
        `compaction of ${runs[i].did} started ${
          (runs[i - 1].end - runs[i].start).toFixed(1)
        } ms before ${runs[i - 1].did}'s ended`,
      );
    }
    for (const did of dids) {
      const car = await exportRepoCar(repo.blocks, did);
      await verifyRepoCar(car, did, encodeDidKey(key.publicKey));
      const posts = [...readCar(car).blocks.values()]
        .filter((b) => (decodeCbor(b) as Record<string, unknown>)?.$type === COLLECTION_POST);
      assert.equal(posts.length, 24);
    }
    // Stopped: nothing new is queued.
    await repo.compactionsSettled({ stop: true });
    const before = runs.length;
    for (let i = 0; i < 20; i++) {
      await repo.applyWrites(dids[0], [{
        action: "create",
        collection: COLLECTION_POST,
        record: { text: `after ${i}`, createdAt: NOW },
      }]);
    }
    await repo.compactionsSettled();
    assert.equal(runs.length, before);
  });
});

Deno.test("an aborted background compaction stops at its next rest and leaves the repository whole", async () => {
  await withKv(async (kv, key, parts) => {
    const repo = service(parts, key, { compactAfterGarbageBlocks: 1_000_000 });
    for (let i = 0; i < 300; i++) {
      await repo.applyWrites(DID, [{
        action: "create",
        collection: COLLECTION_POST,
        record: { text: `abortable ${i}`, createdAt: NOW },
      }]);
    }
    const garbage = (await currentRoot(kv)).garbage!;
    assert.ok(garbage > 1_000, `${garbage} garbage blocks`);

    // Aborted before it starts: nothing is read or removed.
    const none = await repo.compact(DID, { background: true, signal: AbortSignal.abort() });
    assert.deepEqual(none, {
      packs: 0,
      rewritten: 0,
      deleted: 0,
      blocksKept: 0,
      blocksRemoved: 0,
      bytesRemoved: 0,
      complete: false,
    });

    // Aborted while it runs (300 stored commits take many 4 ms slices at the background pace).
    const abort = new AbortController();
    setTimeout(() => abort.abort(new Error("stop")), 1);
    const stopped = await repo.compact(DID, { background: true, signal: abort.signal });
    assert.equal(stopped!.complete, false);
    assert.equal((await currentRoot(kv)).garbage, garbage, "the root keeps its garbage count");
    await verifyRepoCar(await exportRepoCar(repo.blocks, DID), DID, encodeDidKey(key.publicKey));

    // A later compaction finishes the work.
    const done = await repo.compact(DID);
    assert.equal(done!.complete, true);
    assert.equal((await currentRoot(kv)).garbage, 0);
    assert.equal(
      (await storedCopies(kv)).size,
      readCar(await exportRepoCar(repo.blocks, DID)).blocks.size,
    );
  });
});
