import assert from "node:assert/strict";
import { BlockMap, MemoryBlockstore, MST } from "@atproto/repo";
import { type CID, cidForCbor, encodeBlock, formatCid, parseCid } from "../../shared/cid.ts";
import {
  type Block,
  commonPrefixLength,
  decodeNode,
  EMPTY_TREE_CID,
  isNodeCached,
  keyHeight,
  Mst,
  type NodeSource,
} from "./mst.ts";

const INTEROP = new URL("../../../shared/testdata/atproto-interop/", import.meta.url);
const interopExists = (() => {
  try {
    Deno.statSync(INTEROP);
    return true;
  } catch {
    console.warn(`interop vectors not found at ${INTEROP.pathname}: MST conformance skipped`);
    return false;
  }
})();

function readJson<T>(path: string): T {
  return JSON.parse(Deno.readTextFileSync(new URL(path, INTEROP))) as T;
}

class MemorySource implements NodeSource {
  readonly blocks = new Map<string, Uint8Array>();
  getBlock(cid: CID): Promise<Uint8Array | null> {
    return Promise.resolve(this.blocks.get(formatCid(cid)) ?? null);
  }
  add(blocks: Block[]): void {
    for (const b of blocks) this.blocks.set(formatCid(b.cid), b.bytes);
  }
}

const leaf = encodeBlock({ $type: "app.social.feed.post", text: "leaf" }).cid;

function shuffled<T>(items: T[], seed: number): T[] {
  const out = items.slice();
  let s = seed;
  for (let i = out.length - 1; i > 0; i--) {
    s = (s * 1103515245 + 12345) % 2147483648;
    const j = s % (i + 1);
    [out[i], out[j]] = [out[j], out[i]];
  }
  return out;
}

async function rootOf(keys: string[], value: CID = leaf): Promise<string> {
  const tree = Mst.empty(new MemorySource());
  for (const k of keys) await tree.set(k, value);
  return formatCid(tree.finalize().root);
}

Deno.test({
  name: "keyHeight matches the interop key_heights vectors (reference 8.1)",
  ignore: !interopExists,
  fn() {
    const vectors = readJson<{ key: string; height: number }[]>("mst/key_heights.json");
    assert.ok(vectors.length > 0);
    for (const v of vectors) assert.equal(keyHeight(v.key), v.height, `key ${v.key}`);
  },
});

Deno.test({
  name: "commonPrefixLength matches the interop common_prefix vectors",
  ignore: !interopExists,
  fn() {
    const vectors = readJson<{ left: string; right: string; len: number }[]>(
      "mst/common_prefix.json",
    );
    const enc = new TextEncoder();
    for (const v of vectors) {
      assert.equal(commonPrefixLength(enc.encode(v.left), enc.encode(v.right)), v.len);
    }
  },
});

Deno.test("the empty tree hashes to the reference CID", async () => {
  assert.equal(
    formatCid(EMPTY_TREE_CID),
    "bafyreie5737gdxlw5i64vzichcalba3z2v5n6icifvx5xytvske7mr3hpm",
  );
  assert.equal(await rootOf([]), formatCid(EMPTY_TREE_CID));
});

Deno.test("a tree of the same keys has the same root CID whatever the insertion order", async () => {
  const keys = Array.from({ length: 500 }, (_, i) => `app.social.feed.post/k${i * 7919}`);
  const expected = await rootOf(keys);
  for (const seed of [1, 2, 3]) assert.equal(await rootOf(shuffled(keys, seed)), expected);
});

Deno.test("deleting keys gives the root CID of a tree built without them", async () => {
  const keys = Array.from({ length: 400 }, (_, i) => `app.social.graph.follow/r${i}x`);
  const drop = new Set(shuffled(keys, 9).slice(0, 250));
  const source = new MemorySource();
  const tree = Mst.empty(source);
  for (const k of shuffled(keys, 4)) await tree.set(k, leaf);
  const mid = tree.finalize();
  source.add(mid.blocks);
  const reloaded = await Mst.load(source, mid.root);
  for (const k of shuffled([...drop], 5)) assert.equal(await reloaded.delete(k), true);
  assert.equal(await reloaded.delete("app.social.graph.follow/absent"), false);
  const kept = keys.filter((k) => !drop.has(k));
  assert.equal(formatCid(reloaded.finalize().root), await rootOf(kept));
  for (const k of keys) await reloaded.delete(k);
  assert.equal(formatCid(reloaded.finalize().root), formatCid(EMPTY_TREE_CID));
});

Deno.test("get, entries and pathTo read a stored tree", async () => {
  const source = new MemorySource();
  const tree = Mst.empty(source);
  const keys = Array.from({ length: 100 }, (_, i) => `app.social.feed.like/${1000 + i}`);
  for (const k of keys) await tree.set(k, leaf);
  const saved = tree.finalize();
  source.add(saved.blocks);
  const reloaded = await Mst.load(source, saved.root);
  assert.equal(formatCid((await reloaded.get(keys[42]))!), formatCid(leaf));
  assert.equal(await reloaded.get("app.social.feed.like/0"), null);
  const listed: string[] = [];
  for await (const e of reloaded.entries()) listed.push(e.key);
  assert.deepEqual(listed, keys.slice().sort());
  const path = await reloaded.pathTo(keys[7]);
  assert.equal(formatCid(path[0]), formatCid(saved.root));
});

Deno.test("release drops the nodes a change replaced from the cache and keeps the shared ones", async () => {
  const source = new MemorySource();
  const tree = Mst.empty(source);
  const keys = Array.from({ length: 300 }, (_, i) => `app.social.feed.post/${100000 + i}`);
  for (const k of keys) await tree.set(k, leaf);
  const before = tree.finalize();
  source.add(before.blocks);
  assert.ok(before.blocks.every((b) => isNodeCached(b.cid)));

  const next = await Mst.load(source, before.root);
  await next.set("app.social.feed.post/100150x", leaf);
  assert.equal(await next.delete(keys[3]), true);
  assert.equal(await next.delete("app.social.feed.post/absent"), false);
  const after = next.finalize();
  source.add(after.blocks);
  next.release();
  const stillCached = new Set(
    before.blocks.filter((b) => isNodeCached(b.cid)).map((b) => formatCid(b.cid)),
  );
  assert.ok(after.blocks.every((b) => isNodeCached(b.cid)), "the new tree's nodes stay cached");

  // The nodes of the new tree (this reads them, and so caches them again: checked above first).
  const reloaded = await Mst.load(source, after.root);
  const live = new Set<string>();
  for await (const e of reloaded.entries()) {
    for (const cid of await reloaded.pathTo(e.key)) live.add(formatCid(cid));
  }
  const shared = new Set(before.blocks.map((b) => formatCid(b.cid)).filter((c) => live.has(c)));
  assert.deepEqual(stillCached, shared);
  assert.ok(before.blocks.length - shared.size >= 2, "the change replaced at least two nodes");
  assert.ok(shared.size > 0, "most of the tree is shared");
});

interface ProofFixture {
  comment: string;
  leafValue: string;
  keys: string[];
  adds: string[];
  dels: string[];
  rootBeforeCommit: string;
  rootAfterCommit: string;
  blocksInProof: string[];
}

Deno.test({
  name: "commit-proof fixtures: roots before and after each commit match",
  ignore: !interopExists,
  async fn() {
    const fixtures = readJson<ProofFixture[]>("firehose/commit-proof-fixtures.json");
    for (const f of fixtures) {
      const value = parseCid(f.leafValue);
      const source = new MemorySource();
      const tree = Mst.empty(source);
      for (const k of f.keys) await tree.set(k, value);
      const before = tree.finalize();
      source.add(before.blocks);
      assert.equal(formatCid(before.root), f.rootBeforeCommit, f.comment);
      const next = await Mst.load(source, before.root);
      for (const k of f.adds) await next.set(k, value);
      for (const k of f.dels) await next.delete(k);
      const after = next.finalize();
      assert.equal(formatCid(after.root), f.rootAfterCommit, f.comment);
      // Every new node of the commit is part of the reference proof.
      const proof = new Set(f.blocksInProof);
      for (const b of after.blocks) {
        assert.ok(proof.has(formatCid(b.cid)), `${f.comment}: ${formatCid(b.cid)}`);
      }
    }
  },
});

Deno.test({
  name: "coveringProof gives the commit-proof fixtures' blocks, and every order of undoing the " +
    "commit on them alone reproduces the previous root (reference 8.4)",
  ignore: !interopExists,
  async fn() {
    const fixtures = readJson<ProofFixture[]>("firehose/commit-proof-fixtures.json");
    for (const f of fixtures) {
      const value = parseCid(f.leafValue);
      const source = new MemorySource();
      const tree = Mst.empty(source);
      for (const k of f.keys) await tree.set(k, value);
      source.add(tree.finalize().blocks);
      for (const k of f.adds) await tree.set(k, value);
      for (const k of f.dels) await tree.delete(k);
      const after = tree.finalize();
      const proof = await tree.coveringProof([...f.adds, ...f.dels]);
      // Only nodes the commit did not write: those are in its blocks already.
      const written = new Set(after.blocks.map((b) => formatCid(b.cid)));
      assert.deepEqual(proof.filter((b) => written.has(formatCid(b.cid))), [], f.comment);
      const sent = [...after.blocks, ...proof];
      assert.deepEqual(
        sent.map((b) => formatCid(b.cid)).sort(),
        f.blocksInProof.slice().sort(),
        f.comment,
      );
      for (const b of proof) assert.ok(cidForCbor(b.bytes).equals(b.cid), f.comment);
      const undo = [
        ...f.adds.map((k) => (mst: MST) => mst.delete(k)),
        ...f.dels.map((k) => (mst: MST) => mst.add(k, value as never)),
      ];
      for (const order of permutations(undo)) {
        const blocks = new BlockMap(sent.map((b) => [b.cid as never, b.bytes] as const));
        let mst = MST.load(new MemoryBlockstore(blocks), after.root as never);
        for (const step of order) mst = await step(mst);
        assert.equal((await mst.getPointer()).toString(), f.rootBeforeCommit, f.comment);
      }
    }
  },
});

Deno.test("coveringProof of an unchanged tree holds each key's path and its neighbours' nodes", async () => {
  const source = new MemorySource();
  const tree = Mst.empty(source);
  const keys = Array.from({ length: 300 }, (_, i) => `app.social.feed.like/${1000 + i}`);
  for (const k of keys) await tree.set(k, leaf);
  const saved = tree.finalize();
  source.add(saved.blocks);
  const reloaded = await Mst.load(source, saved.root);
  const present = keys[150];
  const absent = "app.social.feed.like/1150x";
  const proof = await reloaded.coveringProof([present, absent]);
  const cids = new Set(proof.map((b) => formatCid(b.cid)));
  // Nothing was written since the load: every node of the proof is returned, once.
  assert.equal(cids.size, proof.length);
  for (const cid of [...await reloaded.pathTo(present), ...await reloaded.pathTo(absent)]) {
    assert.ok(cids.has(formatCid(cid)), formatCid(cid));
  }
  for (const b of proof) assert.deepEqual(b.bytes, source.blocks.get(formatCid(b.cid)));
  // The proof alone answers the reference's lookups of both keys.
  const blocks = new BlockMap(proof.map((b) => [b.cid as never, b.bytes] as const));
  const mst = MST.load(new MemoryBlockstore(blocks), saved.root as never);
  assert.equal(String(await mst.get(present)), formatCid(leaf));
  assert.equal(await mst.get(absent), null);
  assert.deepEqual(await Mst.empty(source).coveringProof([present]), []);
});

function permutations<T>(items: T[]): T[][] {
  if (items.length <= 1) return [items];
  return items.flatMap((item, i) =>
    permutations([...items.slice(0, i), ...items.slice(i + 1)]).map((rest) => [item, ...rest])
  );
}

Deno.test("a decoded node does not share memory with the buffer its block was read from", () => {
  const value = encodeBlock({ text: "x" }).cid;
  const node = encodeBlock({
    e: [{ k: new TextEncoder().encode("app.social.feed.post/3k"), p: 0, t: null, v: value }],
    l: value,
  });
  // As a block read out of a stored commit pack: a view into a larger buffer.
  const pack = new Uint8Array(10_000);
  pack.set(node.bytes, 500);
  const decoded = decodeNode(pack.subarray(500, 500 + node.bytes.length), node.cid);
  assert.equal(decoded.entries[0].key, "app.social.feed.post/3k");
  assert.equal(formatCid(decoded.entries[0].value), formatCid(value));
  assert.notEqual((decoded.left as CID).bytes.buffer, pack.buffer);
  assert.notEqual(decoded.entries[0].value.bytes.buffer, pack.buffer);
});
