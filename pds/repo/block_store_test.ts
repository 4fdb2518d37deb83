import assert from "node:assert/strict";
import { cidForRaw, formatCid } from "../../shared/cid.ts";
import { makeTempDir } from "../../runtime/_test_helpers.ts";
import { repoBlocksKey } from "../store/keys.ts";
import { BlockStore, encodeBlockPack, putBlocks } from "./block_store.ts";
import type { Block } from "./mst.ts";

const DID = "did:plc:bbbbbbbbbbbbbbbbbbbbbbbb";

function block(size: number, seed: number): Block {
  const bytes = new Uint8Array(size);
  for (let i = 0; i < size; i++) bytes[i] = (seed * 31 + i * 7) & 0xff;
  return { cid: cidForRaw(bytes), bytes };
}

async function storeCommit(kv: Deno.Kv, rev: string, blocks: Block[]): Promise<number> {
  const op = kv.atomic();
  const chunks = putBlocks(op, DID, rev, blocks);
  assert.equal((await op.commit()).ok, true);
  return chunks;
}

/** Rewrites a stored commit as a compaction does: fewer or other blocks, surplus chunks deleted. */
async function rewriteCommit(
  kv: Deno.Kv,
  rev: string,
  oldChunks: number,
  blocks: Block[],
): Promise<void> {
  const op = kv.atomic();
  const chunks = putBlocks(op, DID, rev, blocks);
  for (let c = chunks; c < oldChunks; c++) op.delete(repoBlocksKey(DID, rev, c));
  assert.equal((await op.commit()).ok, true);
}

/**
 * `kv` whose list iterators run `between` (once) when asked for more after their 500th entry:
 * a store read in pages of 500 entries changes between two pages.
 */
function changingAfter500Entries(kv: Deno.Kv, between: () => Promise<void>): Deno.Kv {
  let ran = false;
  return new Proxy(kv, {
    get(target, prop) {
      if (prop === "list") {
        return async function* (...args: Parameters<Deno.Kv["list"]>) {
          let n = 0;
          for await (const entry of target.list(...args)) {
            yield entry;
            if (++n === 500 && !ran) {
              ran = true;
              await between();
            }
          }
        };
      }
      const value = Reflect.get(target, prop, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

for (
  const [name, replacement] of [
    ["to one chunk", (a: Block, _b: Block, _c: Block) => [a]],
    ["to two other chunks", (_a: Block, b: Block, c: Block) => [c, b, block(30_000, 9_999)]],
  ] as const
) {
  Deno.test(`a scan reads a commit rewritten ${name} between two pages whole, old or new (spec 4.1 getRepo)`, async () => {
    await using dir = await makeTempDir();
    const kv = await Deno.openKv(`${dir.path}/pds.kv`);
    try {
      const revs = Array.from({ length: 501 }, (_, i) => `r${String(i).padStart(4, "0")}`);
      const small = revs.map((_, i) => block(40, i));
      // Entries 0-498: one chunk each; the commit r0499 fills entries 499 and 500, across the
      // first page's end; r0500 comes after it.
      for (let i = 0; i < 499; i++) await storeCommit(kv, revs[i], [small[i]]);
      const [a, b, c] = [block(25_000, 1_001), block(25_000, 1_002), block(25_000, 1_003)];
      const oldChunks = await storeCommit(kv, revs[499], [a, b, c]);
      assert.equal(oldChunks, 2);
      await storeCommit(kv, revs[500], [small[500]]);
      const rewritten = replacement(a, b, c);
      assert.equal(encodeBlockPack(rewritten).length > 60_000, rewritten.length > 1);

      const reader = changingAfter500Entries(
        kv,
        () => rewriteCommit(kv, revs[499], oldChunks, rewritten),
      );
      const all = await new BlockStore(reader).source(DID).all();

      const expected = new Map<string, { rev: string; bytes: Uint8Array }>();
      for (let i = 0; i < 499; i++) {
        expected.set(formatCid(small[i].cid), { rev: revs[i], bytes: small[i].bytes });
      }
      for (const blk of rewritten) {
        expected.set(formatCid(blk.cid), { rev: revs[499], bytes: blk.bytes });
      }
      expected.set(formatCid(small[500].cid), { rev: revs[500], bytes: small[500].bytes });
      assert.equal(all.size, expected.size);
      for (const [cid, want] of expected) assert.deepEqual(all.get(cid), want, cid);
    } finally {
      kv.close();
    }
  });
}

Deno.test("packs() reports each stored commit once with its chunk count, across pages", async () => {
  await using dir = await makeTempDir();
  const kv = await Deno.openKv(`${dir.path}/pds.kv`);
  try {
    // 1,200 entries: three pages, with two-chunk commits at both page ends.
    const expected: { rev: string; chunks: number; cids: string[] }[] = [];
    let entries = 0;
    for (let i = 0; entries < 1_200; i++) {
      const rev = `r${String(i).padStart(5, "0")}`;
      const big = entries === 499 || entries === 998;
      const blocks = big ? [block(40_000, i), block(40_000, -i - 1)] : [block(64, i)];
      const chunks = await storeCommit(kv, rev, blocks);
      assert.equal(chunks, big ? 2 : 1);
      expected.push({ rev, chunks, cids: blocks.map((b) => formatCid(b.cid)) });
      entries += chunks;
    }
    const packs = await new BlockStore(kv).source(DID).packs();
    assert.deepEqual(
      packs.map((p) => ({ rev: p.rev, chunks: p.chunks, cids: [...p.blocks.keys()] })),
      expected,
    );
  } finally {
    kv.close();
  }
});

Deno.test("the CID indexes of all repositories stay under their bound; the least recently read go first", async () => {
  await using dir = await makeTempDir("pds-block-index-");
  const kv = await Deno.openKv(`${dir.path}/kv`);
  const store = new BlockStore(kv);
  try {
    store.limitIndexedBlocks(250, 0);
    const [a, b, c] = ["a", "b", "c"].map((x) => `did:plc:${x.repeat(24)}`);
    const firsts = new Map<string, Block>();
    for (const [r, did] of [a, b, c].entries()) {
      // 100 blocks per repository, in 10 commits.
      for (let n = 0; n < 10; n++) {
        const blocks = Array.from({ length: 10 }, (_, i) => block(40, r * 1000 + n * 10 + i));
        if (n === 0) firsts.set(did, blocks[0]);
        const op = kv.atomic();
        putBlocks(op, did, `3kaaaaaaaa${n}aa`, blocks);
        assert.equal((await op.commit()).ok, true);
      }
    }
    const read = async (did: string) => {
      const got = await store.source(did).getBlock(firsts.get(did)!.cid);
      assert.deepEqual(got, firsts.get(did)!.bytes);
    };
    await read(a);
    await read(b);
    assert.deepEqual(store.indexedRepos(), [a, b]);
    assert.equal(store.indexedBlocks(), 200);
    await read(a); // a is now more recently read than b
    await read(c); // 300 entries: b's index goes
    assert.deepEqual(store.indexedRepos(), [a, c]);
    assert.equal(store.indexedBlocks(), 200);
    // Every block is still readable: b is scanned again, and a (the least recently read) goes.
    await read(b);
    assert.deepEqual(store.indexedRepos(), [c, b]);

    // An index used within the active time stays past the bound; then it goes like the others.
    store.limitIndexedBlocks(150, 60_000);
    await read(a);
    assert.deepEqual(store.indexedRepos(), [c, b, a]);
    assert.equal(store.indexedBlocks(), 300);
    store.limitIndexedBlocks(150, 0);
    // A block a's index lacks makes it scan for newer commits, then look at the bound.
    assert.equal(await store.source(a).getBlock(block(40, 99_999).cid), null);
    assert.deepEqual(store.indexedRepos(), [a]);
  } finally {
    kv.close();
  }
});

Deno.test("commits noted into held indexes are held to the bound as well", async () => {
  await using dir = await makeTempDir("pds-block-index-commits-");
  const kv = await Deno.openKv(`${dir.path}/kv`);
  const store = new BlockStore(kv);
  try {
    store.limitIndexedBlocks(5_000, 0);
    const [a, b] = ["a", "b"].map((x) => `did:plc:${x.repeat(24)}`);
    for (const [r, did] of [a, b].entries()) {
      const first = block(40, 50_000 + r);
      const op = kv.atomic();
      putBlocks(op, did, "3kaaaaaaaa0aa", [first]);
      assert.equal((await op.commit()).ok, true);
      assert.deepEqual(await store.source(did).getBlock(first.cid), first.bytes);
    }
    assert.deepEqual(store.indexedRepos(), [a, b]);
    // Commits of b, as this process notes them: 10,000 blocks in all.
    let since = "3kaaaaaaaa0aa";
    for (let n = 1; n <= 100; n++) {
      const rev = `3kaaaaab${String(n).padStart(3, "0")}aa`;
      const blocks = Array.from({ length: 100 }, (_, i) => {
        const bytes = new TextEncoder().encode(`block ${n} ${i}`);
        return { cid: cidForRaw(bytes), bytes };
      });
      store.noteCommitBlocks(b, since, rev, blocks);
      since = rev;
    }
    // a (idle, least recently used) was dropped at the check; b, being written, stays.
    assert.deepEqual(store.indexedRepos(), [b]);
    assert.equal(store.indexedBlocks(), 10_001);
  } finally {
    kv.close();
  }
});
