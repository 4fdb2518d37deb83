// CIDs: CIDv1 sha-256, dag-cbor / raw codecs, base32 strings (docs/protocol.md 9.1, 16 item 2).
import assert from "node:assert/strict";
import {
  asCid,
  CID,
  CidError,
  cidForCbor,
  cidForRaw,
  CODEC_DAG_CBOR,
  CODEC_RAW,
  encodeBlock,
  formatCid,
  nativeSha256InUse,
  parseCid,
  sha256Digest,
  useNativeSha256,
  verifyCid,
} from "./cid.ts";
import { encodeCbor } from "./cbor.ts";
import { sha256 } from "@noble/hashes/sha2.js";
import { create as createDigest } from "multiformats/hashes/digest";

const EMPTY_MST = "bafyreie5737gdxlw5i64vzichcalba3z2v5n6icifvx5xytvske7mr3hpm";

Deno.test("encodeBlock of the empty MST node gives the well-known CID", () => {
  const block = encodeBlock({ e: [], l: null });
  assert.equal(formatCid(block.cid), EMPTY_MST);
  assert.deepEqual(block.bytes, new Uint8Array([0xa2, 0x61, 0x65, 0x80, 0x61, 0x6c, 0xf6]));
  assert.equal(block.cid.code, CODEC_DAG_CBOR);
  assert.equal(block.cid.version, 1);
  assert.equal(block.cid.bytes.length, 36);
});

Deno.test("cidForCbor and cidForRaw differ only in codec", () => {
  const bytes = new TextEncoder().encode("hello");
  const a = cidForCbor(bytes);
  const b = cidForRaw(bytes);
  assert.equal(a.code, 0x71);
  assert.equal(b.code, CODEC_RAW);
  assert.deepEqual(a.multihash.bytes, b.multihash.bytes);
  assert.ok(formatCid(a).startsWith("bafyrei"));
  assert.ok(formatCid(b).startsWith("bafkrei"));
  assert.equal(formatCid(a).length, 59);
});

Deno.test("parseCid round-trips formatCid", () => {
  const cid = parseCid(EMPTY_MST);
  assert.ok(cid instanceof CID);
  assert.equal(formatCid(cid), EMPTY_MST);
  assert.ok(cid.equals(encodeBlock({ e: [], l: null }).cid));
});

Deno.test("formatCid equals CID#toString for sha-256 CIDs and for other digest lengths", () => {
  for (let i = 0; i < 500; i++) {
    const bytes = new Uint8Array(i % 97);
    for (let j = 0; j < bytes.length; j++) bytes[j] = (i * 31 + j * 7) & 0xff;
    for (const cid of [cidForCbor(bytes), cidForRaw(bytes)]) {
      assert.equal(formatCid(cid), cid.toString());
    }
  }
  // A CID of every byte value at every position: the encoder's bit buffer never loses a bit.
  for (let v = 0; v < 256; v++) {
    const cid = CID.decode(new Uint8Array([1, 0x71, 0x12, 32, ...new Array(32).fill(v)]));
    assert.equal(formatCid(cid), cid.toString());
  }
  // Another digest length takes multiformats' encoder.
  const identity = CID.decode(new Uint8Array([1, 0x55, 0x00, 5, 104, 101, 108, 108, 111]));
  assert.equal(formatCid(identity), "bafkqablimvwgy3y");
});

Deno.test("parseCid throws CidError naming the bad value", () => {
  assert.throws(() => parseCid("."), { name: "CidError", message: 'Invalid CID: "."' });
  assert.throws(() => parseCid(""), { name: "CidError", message: "Invalid CID: empty string" });
  assert.throws(() => parseCid("bafyrei!"), CidError);
  assert.throws(() => parseCid("x".repeat(1000)), /^CidError: Invalid CID: "x{80}\.\.\."$/);
  assert.throws(() => parseCid(42 as unknown as string), {
    name: "CidError",
    message: "Invalid CID: not a string (number)",
  });
});

Deno.test("asCid accepts CID instances and CID strings only", () => {
  const cid = parseCid(EMPTY_MST);
  assert.equal(asCid(cid), cid);
  assert.ok(asCid(EMPTY_MST)?.equals(cid));
  assert.equal(asCid("not a cid"), null);
  assert.equal(asCid(null), null);
  assert.equal(asCid(123), null);
  assert.equal(asCid({ $link: EMPTY_MST }), null);
});

Deno.test("verifyCid checks the sha-256 digest", () => {
  const bytes = encodeCbor({ a: 1 });
  const cid = cidForCbor(bytes);
  assert.equal(verifyCid(cid, bytes), true);
  assert.equal(verifyCid(cid, encodeCbor({ a: 2 })), false);
  assert.equal(verifyCid(cidForRaw(bytes), bytes), true);
});

Deno.test("verifyCid returns false for a non-sha-256 CID", () => {
  // identity multihash (0x00) of the bytes themselves
  const bytes = new Uint8Array([1, 2, 3]);
  const identity = CID.decode(new Uint8Array([0x01, 0x55, 0x00, 0x03, 1, 2, 3]));
  assert.equal(verifyCid(identity, bytes), false);
});

Deno.test("cidForCbor and cidForRaw equal the library's CIDs, byte for byte and in every part", () => {
  for (let n = 0; n < 300; n++) {
    const bytes = new Uint8Array(n * 7).map((_, i) => (i * 31 + n) & 0xff);
    for (const [ours, codec] of [[cidForCbor, 0x71], [cidForRaw, 0x55]] as const) {
      const expected = CID.createV1(codec, createDigest(0x12, sha256(bytes)));
      const actual = ours(bytes);
      assert.ok(actual.equals(expected));
      assert.deepEqual(actual.bytes, expected.bytes);
      assert.equal(actual.toString(), expected.toString());
      assert.equal(formatCid(actual), expected.toString());
      assert.equal(actual.code, codec);
      assert.equal(actual.version, 1);
      assert.equal(actual.multihash.code, 0x12);
      assert.equal(actual.multihash.size, 32);
      assert.deepEqual(actual.multihash.digest, sha256(bytes));
      assert.deepEqual(actual.multihash.bytes, expected.multihash.bytes);
      assert.deepEqual(actual["/"], expected.bytes);
      assert.equal(actual.bytes.byteOffset, 0);
      assert.equal(actual.bytes.buffer.byteLength, 36);
    }
  }
});

Deno.test("useNativeSha256: a correct digest is used for CIDs, a wrong one is refused, false falls back", () => {
  const block = encodeCbor({ text: "hashed natively", n: 7 });
  const expected = formatCid(cidForCbor(block));
  const before = nativeSha256InUse();
  useNativeSha256(null);
  let calls = 0;
  const correct = (data: Uint8Array, out: Uint8Array) => {
    calls++;
    out.set(sha256(data));
    return true;
  };
  try {
    assert.equal(useNativeSha256(correct), true);
    calls = 0;
    assert.equal(formatCid(cidForCbor(block)), expected);
    assert.equal(formatCid(encodeBlock({ e: [], l: null }).cid), EMPTY_MST);
    assert.deepEqual(sha256Digest(block), sha256(block));
    assert.equal(calls, 3);

    // Wrong digests (here: one byte off for inputs of 64 bytes) are refused and change nothing.
    const wrong = (data: Uint8Array, out: Uint8Array) => {
      out.set(sha256(data));
      if (data.length === 64) out[0] ^= 1;
      return true;
    };
    assert.equal(useNativeSha256(wrong), false);
    calls = 0;
    assert.equal(formatCid(cidForCbor(block)), expected);
    assert.equal(calls, 1, "the correct implementation stays in use");

    // One that ignores the output view's offset (writes at the buffer's start) is refused: CIDs
    // take the digest in a view after their 4 header bytes.
    const offsetBlind = (data: Uint8Array, out: Uint8Array) => {
      new Uint8Array(out.buffer).set(sha256(data));
      return true;
    };
    assert.equal(useNativeSha256(offsetBlind), false);
    // And one that hashes the whole buffer under the input view.
    const inputBlind = (data: Uint8Array, out: Uint8Array) => {
      out.set(sha256(new Uint8Array(data.buffer)));
      return true;
    };
    assert.equal(useNativeSha256(inputBlind), false);

    // An implementation that throws during the check is refused too.
    assert.equal(
      useNativeSha256(() => {
        throw new Error("no library");
      }),
      false,
    );

    // One that answers false (say, once closed) leaves the digest to @noble/hashes.
    let refusals = 0;
    const closed = (data: Uint8Array, out: Uint8Array) => {
      if (refusals === -1) {
        out.set(sha256(data));
        return true;
      }
      refusals++;
      return false;
    };
    refusals = -1;
    assert.equal(useNativeSha256(closed), true);
    refusals = 0;
    assert.equal(formatCid(cidForCbor(block)), expected);
    assert.equal(
      formatCid(cidForRaw(block)),
      formatCid(CID.createV1(CODEC_RAW, createDigest(0x12, sha256(block)))),
    );
    assert.equal(refusals, 2);
  } finally {
    assert.equal(useNativeSha256(correct), true);
    useNativeSha256(null);
  }
  calls = 0;
  assert.equal(formatCid(cidForCbor(block)), expected);
  assert.equal(calls, 0, "null goes back to @noble/hashes");
  assert.equal(nativeSha256InUse(), null);
  useNativeSha256(before);
});
