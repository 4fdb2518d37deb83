import assert from "node:assert/strict";
import { type CID, encodeBlock, formatCid } from "./cid.ts";
import { lookupMstKey, MstProofError, walkMst } from "./mst_lookup.ts";

const enc = new TextEncoder();
const value = (seed: string) => encodeBlock({ seed }).cid;

/** A node of full keys (no prefix compression beyond what `p` says). */
function node(left: CID | null, entries: [string, CID, CID | null][]) {
  let prev = "";
  return encodeBlock({
    l: left,
    e: entries.map(([key, v, t]) => {
      let p = 0;
      while (p < key.length && p < prev.length && key[p] === prev[p]) p++;
      prev = key;
      return { p, k: enc.encode(key.slice(p)), v, t };
    }),
  });
}

// Root [c/3, c/6] with subtrees: l -> [c/1], between -> [c/4, c/5], right -> [c/8].
const leafLeft = node(null, [["c/1", value("1"), null]]);
const leafMid = node(null, [["c/4", value("4"), null], ["c/5", value("5"), null]]);
const leafRight = node(null, [["c/8", value("8"), null]]);
const root = node(leafLeft.cid, [["c/3", value("3"), leafMid.cid], [
  "c/6",
  value("6"),
  leafRight.cid,
]]);
const all = new Map(
  [root, leafLeft, leafMid, leafRight].map((b) => [formatCid(b.cid), b.bytes] as const),
);

Deno.test("lookupMstKey finds keys in the root and in every subtree", () => {
  for (const k of ["1", "3", "4", "5", "6", "8"]) {
    assert.equal(formatCid(lookupMstKey(all, root.cid, `c/${k}`)!), formatCid(value(k)), k);
  }
});

Deno.test("lookupMstKey answers null for a key whose path is complete and holds no such key", () => {
  for (const k of ["0", "2", "45", "7", "9"]) {
    assert.equal(lookupMstKey(all, root.cid, `c/${k}`), null);
  }
});

Deno.test("lookupMstKey refuses to answer when a node on the key's path is missing", () => {
  const partial = new Map(all);
  partial.delete(formatCid(leafMid.cid));
  assert.throws(
    () => lookupMstKey(partial, root.cid, "c/45"),
    new MstProofError(`Blocks lack the tree node ${formatCid(leafMid.cid)}`),
  );
  // Keys whose path avoids the missing node still resolve.
  assert.equal(formatCid(lookupMstKey(partial, root.cid, "c/8")!), formatCid(value("8")));
});

Deno.test("lookupMstKey refuses unsorted and malformed nodes", () => {
  const unsorted = node(null, [["c/5", value("5"), null], ["c/4", value("4"), null]]);
  const bad = encodeBlock({ l: null, e: [{ p: 9, k: enc.encode("x"), v: value("x"), t: null }] });
  for (const b of [unsorted, bad]) {
    const blocks = new Map([[formatCid(b.cid), b.bytes]]);
    assert.throws(() => lookupMstKey(blocks, b.cid, "c/4"), MstProofError);
  }
});

Deno.test("walkMst gives every key of the tree in order, with its value", () => {
  const keys = [...walkMst(all, root.cid)].map((e) => [e.key, formatCid(e.value)]);
  assert.deepEqual(
    keys,
    ["1", "3", "4", "5", "6", "8"].map((k) => [`c/${k}`, formatCid(value(k))]),
  );
});

Deno.test("walkMst refuses a missing node, keys out of order across nodes, and too many keys", () => {
  const partial = new Map(all);
  partial.delete(formatCid(leafMid.cid));
  assert.throws(() => [...walkMst(partial, root.cid)], {
    name: "MstProofError",
    message: `Blocks lack the tree node ${formatCid(leafMid.cid)}`,
  });
  // A right subtree holding keys that sort before its entry.
  const early = node(null, [["c/0", value("0"), null]]);
  const bad = node(null, [["c/3", value("3"), early.cid]]);
  const blocks = new Map([bad, early].map((b) => [formatCid(b.cid), b.bytes] as const));
  assert.throws(() => [...walkMst(blocks, bad.cid)], {
    name: "MstProofError",
    message: "Tree keys are out of order: c/0 after c/3",
  });
  assert.throws(() => [...walkMst(all, root.cid, { maxEntries: 5 })], {
    name: "MstProofError",
    message: "Tree has more than 5 keys",
  });
});
