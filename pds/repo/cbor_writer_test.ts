import assert from "node:assert/strict";
import { encodeCbor } from "../../shared/cbor.ts";
import { encodeBlock } from "../../shared/cid.ts";
import { writeCar } from "../../shared/car.ts";
import { encodeCommitEventBody } from "../sequencer/sequencer.ts";
import {
  carLength,
  CborWriter,
  encodeCommit,
  encodeMstNode,
  writeCarOneRoot,
} from "./cbor_writer.ts";

const a = encodeBlock({ text: "a" }).cid;
const b = encodeBlock({ text: "b" }).cid;
const c = encodeBlock({ text: "c" }).cid;
const utf8 = new TextEncoder();

function genericNode(
  left: typeof a | null,
  entries: { key: string; value: typeof a; right: typeof a | null }[],
) {
  let prev = new Uint8Array(0);
  const e = entries.map((entry) => {
    const bytes = utf8.encode(entry.key);
    let p = 0;
    while (p < Math.min(prev.length, bytes.length) && prev[p] === bytes[p]) p++;
    prev = bytes;
    return { k: bytes.subarray(p), p, t: entry.right, v: entry.value };
  });
  return encodeCbor({ e, l: left });
}

Deno.test("encodeMstNode writes the bytes encodeCbor writes for the same node", () => {
  const entries = [
    { key: "app.social.feed.post/3kabc", value: a, right: null },
    { key: "app.social.feed.post/3kabd", value: b, right: c },
    { key: "app.social.graph.follow/3kx" + "y".repeat(300), value: c, right: null },
  ];
  assert.deepEqual(encodeMstNode(null, entries), genericNode(null, entries));
  assert.deepEqual(encodeMstNode(a, entries), genericNode(a, entries));
  assert.deepEqual(encodeMstNode(null, []), encodeCbor({ e: [], l: null }));
  // Keys outside ASCII (not valid repository paths, but the encoder is general) take the UTF-8
  // path, with the shared prefix counted in bytes: "é" is two bytes and "ü" shares its first.
  const unicode = [
    { key: "app.social.feed.post/é1", value: a, right: null },
    { key: "app.social.feed.post/ü2", value: b, right: null },
    { key: "app.social.feed.post/ü3", value: c, right: a },
  ];
  assert.deepEqual(encodeMstNode(b, unicode), genericNode(b, unicode));
  // An ASCII key sharing nothing with the previous one, and a key that is a prefix of the next.
  const edges = [
    { key: "a/b", value: a, right: null },
    { key: "a/bc", value: b, right: null },
    { key: "z/q", value: c, right: null },
  ];
  assert.deepEqual(encodeMstNode(null, edges), genericNode(null, edges));
});

Deno.test("encodeCommit writes the bytes encodeCbor writes, with and without sig", () => {
  const fields = { did: "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", data: a, rev: "3kabcdefghijk" };
  const unsigned = { ...fields, version: 3, prev: null };
  const sig = new Uint8Array(64).fill(9);
  assert.deepEqual(encodeCommit(fields), encodeCbor(unsigned));
  assert.deepEqual(encodeCommit(fields, sig), encodeCbor({ ...unsigned, sig }));
});

Deno.test("writeCarOneRoot writes the bytes writeCar writes", () => {
  const blocks = [encodeBlock({ x: 1 }), encodeBlock({ y: "z".repeat(200) })];
  const w = new CborWriter(4);
  writeCarOneRoot(w, blocks[0].cid, blocks);
  const expected = writeCar([blocks[0].cid], blocks);
  assert.deepEqual(w.finish(), expected);
  assert.equal(carLength(blocks[0].cid, blocks), expected.length);
});

Deno.test("encodeCommitEventBody writes the bytes encodeCbor writes (with and without prevData)", () => {
  const base = {
    seq: 70_000,
    rebase: false as const,
    tooBig: false as const,
    repo: "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa",
    commit: a,
    rev: "3kabcdefghijk",
    since: null,
    blocks: new Uint8Array(300).fill(5),
    ops: [],
    blobs: [],
    time: "2024-05-01T12:00:00.000Z",
  };
  assert.deepEqual(encodeCommitEventBody(base), encodeCbor(base));
  const full = {
    ...base,
    seq: 5_000_000_000,
    since: "3kabcdefghiji",
    prevData: b,
    blobs: [c],
    ops: [
      { action: "create" as const, path: "app.social.feed.post/3kabc", cid: a },
      { action: "update" as const, path: "app.social.actor.profile/self", cid: b, prev: c },
      { action: "delete" as const, path: "app.social.feed.like/3kab\u00e9", cid: null, prev: a },
    ],
  };
  assert.deepEqual(encodeCommitEventBody(full), encodeCbor(full));
});

Deno.test("writers sharing the scratch buffer return their own exact bytes", () => {
  const outer = new CborWriter(16);
  outer.text("outer");
  // A writer created while another holds the shared buffer gets its own.
  const inner = new CborWriter(16);
  inner.text("inner");
  const innerBytes = inner.finish();
  outer.int(1000);
  const outerBytes = outer.finish();
  assert.deepEqual(innerBytes, encodeCbor("inner"));
  assert.deepEqual([...outerBytes], [...encodeCbor("outer"), ...encodeCbor(1000)]);

  // The next writer reuses the shared buffer; earlier results stay as they were.
  const next = new CborWriter(16);
  next.text("zzzzzzzzzzzz");
  assert.deepEqual(next.finish(), encodeCbor("zzzzzzzzzzzz"));
  assert.deepEqual(innerBytes, encodeCbor("inner"));
  assert.deepEqual([...outerBytes], [...encodeCbor("outer"), ...encodeCbor(1000)]);
  assert.equal(outerBytes.buffer.byteLength, outerBytes.length, "an exact-size copy");

  // Growing past the shared buffer, and writing after finish, leave returned bytes alone.
  const big = new CborWriter(16);
  const blob = new Uint8Array(100_000).fill(9);
  big.bytes(blob);
  const bigBytes = big.finish();
  assert.deepEqual(bigBytes, encodeCbor(blob));
  const reused = new CborWriter(16);
  reused.text("x");
  const first = reused.finish();
  reused.text("y");
  assert.deepEqual(first, encodeCbor("x"));
  assert.deepEqual(reused.finish(), new Uint8Array([...encodeCbor("x"), ...encodeCbor("y")]));
});
