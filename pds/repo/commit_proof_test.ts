// Every `#commit` event carries the covering proof of each of its ops (issue 36 item 10;
// docs/protocol.md 6.2 `blocks` and 8.4): a consumer verifying the inductive firehose
// (sync 1.1) with only the frame's blocks can prove each op against the new tree and invert the
// ops back to `prevData`. Checked with the reference implementation (`@atproto/repo`) as the
// foreign verifier, over commits made through the real write path on a temp KV file.

import assert from "node:assert/strict";
import { MemoryBlockstore, MST, readCarWithRoot, verifyProofs } from "@atproto/repo";
import { generateP256KeyPair } from "../../shared/keys.ts";
import { encodeDidKey } from "../../shared/multikey.ts";
import { silentLogger } from "../../shared/log.ts";
import { type CID, formatCid } from "../../shared/cid.ts";
import { decodeCbor } from "../../shared/cbor.ts";
import { COLLECTION_LIKE, COLLECTION_POST } from "../../shared/nsid.ts";
import { makeTempDir } from "../../runtime/_test_helpers.ts";
import type { CommitEvent } from "../sequencer/sequencer.ts";
import { storeParts } from "../_test_helpers.ts";
import { RepoService } from "./repository.ts";
import type { RepoWrite } from "./prepare_writes.ts";
import { keyHeight } from "./mst.ts";

const NOW = "2024-05-01T12:00:00.000Z";
const LIKED = {
  uri: "at://did:plc:aaaaaaaaaaaaaaaaaaaaaaaa/app.social.feed.post/3kaaaaaaaaaa2",
  cid: "bafyreie5737gdxlw5i64vzichcalba3z2v5n6icifvx5xytvske7mr3hpm",
};

// deno-lint-ignore no-explicit-any
type RefCid = any;

/** A service on a fresh KV file where every DID signs with one key. */
async function withRepos(
  fn: (repo: RepoService, kv: Deno.Kv, didKey: string) => Promise<void>,
): Promise<void> {
  await using dir = await makeTempDir();
  const kv = await Deno.openKv(`${dir.path}/pds.kv`);
  try {
    const key = generateP256KeyPair();
    const repo = new RepoService({
      ...storeParts(kv),
      log: silentLogger,
      now: Date.now,
      signingKey: () => Promise.resolve(key),
    });
    await fn(repo, kv, encodeDidKey(key.publicKey));
  } finally {
    kv.close();
  }
}

function recordFor(collection: string, text: string): Record<string, unknown> {
  return collection === COLLECTION_POST
    ? { text, createdAt: NOW }
    : { subject: LIKED, createdAt: NOW };
}

/** `<collection>/<rkey>` split at its slash. */
function splitPath(path: string): { collection: string; rkey: string } {
  const slash = path.indexOf("/");
  return { collection: path.slice(0, slash), rkey: path.slice(slash + 1) };
}

/** Runs `fn` on an MST built from `blocks` only; a missing block is reported, not thrown. */
async function describeFailure<T>(fn: () => Promise<T>): Promise<T | string> {
  try {
    return await fn();
  } catch (err) {
    return `${(err as Error).name}: ${(err as Error).message}`;
  }
}

/** The reference MST after undoing `ops` in `order` on the tree rooted at `data`. */
async function invert(
  blocks: MemoryBlockstore,
  data: CID,
  ops: CommitEvent["ops"],
): Promise<string> {
  let mst = MST.load(blocks, data as RefCid);
  for (const op of ops) {
    if (op.action === "create") mst = await mst.delete(op.path);
    else if (op.action === "update") mst = await mst.update(op.path, op.prev as RefCid);
    else mst = await mst.add(op.path, op.prev as RefCid);
  }
  return (await mst.getPointer()).toString();
}

/** What a sync 1.1 consumer sees when it checks one frame with only the frame's blocks. */
async function checkFrame(event: CommitEvent, did: string, didKey: string) {
  const car = await readCarWithRoot(event.blocks);
  const commit = decodeCbor(car.blocks.get(car.root)!) as { data: CID };
  const claims = event.ops.map((op) => ({ ...splitPath(op.path), cid: op.cid as RefCid }));
  const proofs = await describeFailure(async () => {
    const { verified, unverified } = await verifyProofs(event.blocks, claims, did, didKey);
    return { verified: verified.length, unverified: unverified.map((c) => c.rkey) };
  });
  const store = () => new MemoryBlockstore(car.blocks);
  const reversed = event.ops.slice().reverse();
  return {
    root: car.root.toString(),
    proofs,
    invertedReverse: await describeFailure(() => invert(store(), commit.data, reversed)),
    invertedForward: await describeFailure(() => invert(store(), commit.data, event.ops)),
  };
}

function expectedCheck(event: CommitEvent) {
  const prev = formatCid(event.prevData!);
  return {
    root: formatCid(event.commit),
    proofs: { verified: event.ops.length, unverified: [] },
    invertedReverse: prev,
    invertedForward: prev,
  };
}

/**
 * Checks the block set of a frame against the reference's own: it holds every node the new tree
 * has that the previous one had not and the reference's covering proof of every op (computed on
 * the whole new tree, in `all`: every block of every frame so far), and besides the commit only
 * nodes of the new tree and the records the ops wrote (no unchanged record is sent again).
 */
async function checkBlockSet(event: CommitEvent, all: MemoryBlockstore): Promise<void> {
  const car = await readCarWithRoot(event.blocks);
  await all.putMany(car.blocks);
  const commit = decodeCbor(car.blocks.get(car.root)!) as { data: CID };
  const after = MST.load(all, commit.data as RefCid);
  const before = MST.load(all, event.prevData! as RefCid);
  const afterNodes = new Set((await after.allCids()).toList().map(String));
  const beforeNodes = new Set((await before.allCids()).toList().map(String));
  const sent = new Set([...car.blocks.entries()].map((b) => b.cid.toString()));
  const missing: string[] = [];
  for (const cid of afterNodes) if (!beforeNodes.has(cid) && !sent.has(cid)) missing.push(cid);
  for (const op of event.ops) {
    const proof = await after.getCoveringProof(op.path);
    for (const cid of proof.cids()) {
      if (!sent.has(cid.toString())) missing.push(`${op.path} ${cid}`);
    }
  }
  assert.deepEqual(missing, [], `seq ${event.seq}: blocks missing from the frame`);
  const records = new Set(event.ops.flatMap((op) => op.cid ? [formatCid(op.cid)] : []));
  const extra = [...sent].filter((cid) =>
    cid !== car.root.toString() && !afterNodes.has(cid) && !records.has(cid)
  );
  assert.deepEqual(extra, [], `seq ${event.seq}: blocks that belong in no proof`);
  for (const cid of records) assert.ok(sent.has(cid), `seq ${event.seq}: record ${cid} missing`);
}

/** Mulberry32: a small seeded generator, so a failing sequence can be replayed. */
function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Record keys of `collection` whose paths sit at MST layers 0-3, `counts[h]` of layer `h`. */
function keysByLayer(collection: string, counts: number[], salt: string): string[][] {
  const out: string[][] = counts.map(() => []);
  for (let i = 0; out.some((keys, h) => keys.length < counts[h]); i++) {
    const rkey = `${salt}${i.toString(36).padStart(5, "0")}`;
    const h = keyHeight(`${collection}/${rkey}`);
    if (h < counts.length && out[h].length < counts[h]) out[h].push(rkey);
  }
  return out;
}

/** Commits `writes`, then checks the frame it produced; returns that frame. */
async function commitAndCheck(
  repo: RepoService,
  _kv: Deno.Kv,
  ctx: { did: string; didKey: string; all: MemoryBlockstore },
  writes: RepoWrite[],
): Promise<CommitEvent> {
  const result = await repo.applyWrites(ctx.did, writes);
  assert.ok(result.commit, "the writes change the repository");
  const [stored] = await repo.sequencer.readEvents(result.commit.seq - 1, 1);
  const event = stored.event;
  assert.equal(event.seq, result.commit.seq);
  assert.deepEqual(await checkFrame(event, ctx.did, ctx.didKey), expectedCheck(event));
  await checkBlockSet(event, ctx.all);
  return event;
}

/** A new repository's context, with its first (empty) commit's blocks in `all`. */
async function newRepo(repo: RepoService, _kv: Deno.Kv, did: string, didKey: string) {
  await repo.initRepo(did);
  const all = new MemoryBlockstore();
  const events = await repo.sequencer.readEvents(0, 10_000);
  const first = events.find((e) => e.event.repo === did)!;
  await all.putMany((await readCarWithRoot(first.event.blocks)).blocks);
  return { did, didKey, all };
}

const create = (collection: string, rkey: string, text = rkey): RepoWrite => ({
  action: "create",
  collection,
  rkey,
  record: recordFor(collection, text),
});
const del = (collection: string, rkey: string): RepoWrite => ({
  action: "delete",
  collection,
  rkey,
});

Deno.test("deleting the only top-layer key sends the lower node that becomes the root", async () => {
  await withRepos(async (repo, kv, didKey) => {
    const ctx = await newRepo(repo, kv, "did:plc:toplayeraaaaaaaaaaaaaaaa", didKey);
    const [low, [top]] = keysByLayer(COLLECTION_POST, [40, 1], "t");
    // Layer-0 keys below the one layer-1 key: the root holds it with only a left subtree.
    const below = low.filter((k) => k < top).slice(0, 6);
    assert.equal(below.length, 6);
    await commitAndCheck(repo, kv, ctx, below.map((k) => create(COLLECTION_POST, k)));
    await commitAndCheck(repo, kv, ctx, [create(COLLECTION_POST, top)]);
    const event = await commitAndCheck(repo, kv, ctx, [del(COLLECTION_POST, top)]);
    const car = await readCarWithRoot(event.blocks);
    const commit = decodeCbor(car.blocks.get(car.root)!) as { data: CID };
    // The commit and the (unchanged) layer-0 node, now the root: nothing else.
    assert.deepEqual(
      [...car.blocks.cids()].map(String).sort(),
      [formatCid(event.commit), formatCid(commit.data)].sort(),
    );
  });
});

Deno.test("a delete whose path in the new tree runs through unchanged nodes sends them", async () => {
  await withRepos(async (repo, kv, didKey) => {
    const ctx = await newRepo(repo, kv, "did:plc:untouchedaaaaaaaaaaaaaaa", didKey);
    const [low, mid, [top]] = keysByLayer(COLLECTION_POST, [60, 6, 1], "u");
    await commitAndCheck(repo, kv, ctx, [
      ...low.slice(0, 30).map((k) => create(COLLECTION_POST, k)),
      ...mid.map((k) => create(COLLECTION_POST, k)),
      create(COLLECTION_POST, top),
    ]);
    // Deleting each layer-1 key in turn: its left and right subtrees are merged or one of them
    // kept as it is, and the key's path of absence runs through those.
    for (const k of mid) await commitAndCheck(repo, kv, ctx, [del(COLLECTION_POST, k)]);
    // Layer-0 keys whose neighbours sit in untouched nodes.
    for (const k of low.slice(0, 30).filter((_, i) => i % 3 === 0)) {
      await commitAndCheck(repo, kv, ctx, [del(COLLECTION_POST, k)]);
    }
    await commitAndCheck(repo, kv, ctx, [del(COLLECTION_POST, top)]);
  });
});

Deno.test("creates and updates at layers 0-3 carry the proofs of their keys and neighbours", async () => {
  await withRepos(async (repo, kv, didKey) => {
    const ctx = await newRepo(repo, kv, "did:plc:layersaaaaaaaaaaaaaaaaaa", didKey);
    const layers = keysByLayer(COLLECTION_LIKE, [20, 6, 3, 2], "c");
    const byLayer = [...layers].reverse(); // highest layer first: each grows the tree upward
    for (const keys of byLayer) {
      for (const k of keys) await commitAndCheck(repo, kv, ctx, [create(COLLECTION_LIKE, k)]);
    }
    // Posts sort before likes: a second collection at the left edge of the tree.
    const [posts] = keysByLayer(COLLECTION_POST, [4], "p");
    for (const k of posts) await commitAndCheck(repo, kv, ctx, [create(COLLECTION_POST, k)]);
    for (const k of posts) {
      await commitAndCheck(repo, kv, ctx, [{
        action: "update",
        collection: COLLECTION_POST,
        rkey: k,
        record: recordFor(COLLECTION_POST, `${k} updated`),
      }]);
    }
    for (const k of layers.flat().filter((_, i) => i % 2 === 0)) {
      await commitAndCheck(repo, kv, ctx, [{
        action: "update",
        collection: COLLECTION_LIKE,
        rkey: k,
        record: { subject: { ...LIKED, uri: `${LIKED.uri}x` }, createdAt: NOW },
      }]);
    }
  });
});

Deno.test("30 random sequences of 40 commits: every frame proves its ops and inverts to prevData", async () => {
  await withRepos(async (repo, kv, didKey) => {
    const collections = [COLLECTION_POST, COLLECTION_LIKE];
    for (let s = 0; s < 30; s++) {
      const random = seededRandom(0x5eed + s);
      const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)];
      const did = `did:plc:random${String(s).padStart(18, "a")}`;
      const ctx = await newRepo(repo, kv, did, didKey);
      const pool = collections.flatMap((collection) =>
        keysByLayer(collection, [30, 8, 3, 1], `s${s}`).flat().map((rkey) =>
          `${collection}/${rkey}`
        )
      );
      const present = new Map<string, number>(); // path -> version of its record
      const initial = s % 3 === 0 ? 0 : 10 + (s * 7) % 30;
      if (initial > 0) {
        const writes = pool.filter(() => random() < 0.5).slice(0, initial).map((path) => {
          present.set(path, 0);
          const { collection, rkey } = splitPath(path);
          return create(collection, rkey);
        });
        await commitAndCheck(repo, kv, ctx, writes);
      }
      for (let step = 0; step < 40; step++) {
        const n = random() < 0.25 ? 2 + Math.floor(random() * 3) : 1;
        const writes: RepoWrite[] = [];
        const touched = new Set<string>();
        for (let w = 0; w < n; w++) {
          const r = random();
          const existing = [...present.keys()].filter((p) => !touched.has(p));
          const absent = pool.filter((p) => !present.has(p) && !touched.has(p));
          const action = existing.length === 0 || (r < 0.45 && absent.length > 0)
            ? "create"
            : r < 0.65
            ? "update"
            : "delete";
          const path = pick(action === "create" ? absent : existing);
          touched.add(path);
          const { collection, rkey } = splitPath(path);
          if (action === "delete") {
            present.delete(path);
            writes.push(del(collection, rkey));
            continue;
          }
          const version = action === "create" ? 0 : present.get(path)! + 1;
          present.set(path, version);
          const record = collection === COLLECTION_POST
            ? recordFor(collection, `${rkey} v${version}`)
            : { subject: { ...LIKED, uri: `${LIKED.uri}${version}` }, createdAt: NOW };
          writes.push({
            action: action === "create" ? "create" : "update",
            collection,
            rkey,
            record,
          });
        }
        await commitAndCheck(repo, kv, ctx, writes);
      }
    }
  });
});
