// Strict DAG-CBOR codec (docs/protocol.md 9.3; spec part 6 firehose frames).
import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { CID } from "multiformats/cid";
import { CborError, decodeCbor, decodeCborFirst, encodeCbor } from "./cbor.ts";
import * as dagCbor from "@ipld/dag-cbor";
import { cidForCbor, cidForRaw } from "./cid.ts";

function hex(bytes: Uint8Array): string {
  return [...bytes].map((b) => b.toString(16).padStart(2, "0")).join(" ");
}

function fromHex(s: string): Uint8Array {
  const clean = s.replace(/\s+/g, "");
  return new Uint8Array(clean.match(/../g)!.map((x) => parseInt(x, 16)));
}

function assertDecodeError(input: string | Uint8Array, pattern: RegExp) {
  const bytes = typeof input === "string" ? fromHex(input) : input;
  assert.throws(() => decodeCbor(bytes), (err: unknown) => {
    assert.ok(err instanceof CborError, `expected CborError, got ${err}`);
    assert.match(err.message, pattern);
    return true;
  });
}

function assertEncodeError(value: unknown, pattern: RegExp) {
  assert.throws(() => encodeCbor(value), (err: unknown) => {
    assert.ok(err instanceof CborError, `expected CborError, got ${err}`);
    assert.match(err.message, pattern);
    return true;
  });
}

Deno.test("encodeCbor writes the firehose #commit header bytes exactly", () => {
  assert.equal(
    hex(encodeCbor({ t: "#commit", op: 1 })),
    "a2 61 74 67 23 63 6f 6d 6d 69 74 62 6f 70 01",
  );
});

Deno.test("encodeCbor sorts map keys length-first then bytewise", () => {
  const bytes = encodeCbor({ bb: 1, a: 2, c: 3, aa: 4 });
  assert.equal(hex(bytes), "a4 61 61 02 61 63 03 62 61 61 04 62 62 62 01");
});

Deno.test("encodeCbor writes CIDs as tag 42 with a 0x00 prefix", () => {
  const cid = cidForCbor(encodeCbor({}));
  const bytes = encodeCbor(cid);
  assert.equal(hex(bytes.subarray(0, 5)), "d8 2a 58 25 00");
  assert.deepEqual(bytes.subarray(5), cid.bytes);
  const back = decodeCbor(bytes);
  assert.ok(back instanceof CID);
  assert.equal(back.toString(), cid.toString());
});

Deno.test("encodeCbor skips undefined object properties but keeps null", () => {
  assert.equal(hex(encodeCbor({ a: undefined, b: null })), "a1 61 62 f6");
});

Deno.test("encodeCbor refuses floats, NaN, Infinity and non-safe integers", () => {
  assertEncodeError(1.5, /^Cannot encode number 1\.5: only safe integers$/);
  assertEncodeError({ a: [0.1] }, /number 0\.1/);
  assertEncodeError(NaN, /number NaN/);
  assertEncodeError(-Infinity, /number -Infinity/);
  assertEncodeError(2 ** 53, /number 9007199254740992/);
  assertEncodeError(10n, /^Cannot encode bigint 10/);
});

Deno.test("encodeCbor refuses undefined in arrays and as a value", () => {
  assertEncodeError([1, undefined], /^Cannot encode undefined outside an object property$/);
  assertEncodeError(undefined, /undefined/);
});

Deno.test("encodeCbor refuses non-byte typed arrays, non-string Map keys and cycles", () => {
  assertEncodeError(new Uint16Array(2), /Uint16Array/);
  assertEncodeError(new Map([[1, 2]]), /^Cannot encode CBOR: Non-string Map keys/);
  const cyclic: Record<string, unknown> = {};
  cyclic.self = cyclic;
  assertEncodeError(cyclic, /^Cannot encode CBOR: .*circular/i);
});

Deno.test("encodeCbor round-trips the data model through decodeCbor", () => {
  const value = {
    s: "héllo 😀",
    n: -12345678901,
    z: 0,
    big: Number.MAX_SAFE_INTEGER,
    t: true,
    f: false,
    nul: null,
    bytes: new Uint8Array([0, 1, 255]),
    arr: [1, [2, [3]], { x: "y" }],
    link: cidForCbor(new Uint8Array([1])),
  };
  assert.deepEqual(decodeCbor(encodeCbor(value)), value);
});

Deno.test("decodeCbor rejects floats of every width", () => {
  assertDecodeError("f9 3c 00", /^Invalid CBOR: float 1 is not allowed$/);
  assertDecodeError("fa 3f c0 00 00", /float 1\.5 is not allowed/);
  assertDecodeError("fb 3f f0 00 00 00 00 00 00", /float 1 is not allowed/);
  assertDecodeError("a1 61 61 fb 40 09 21 fb 54 44 2d 18", /float 3\.14159/);
});

Deno.test("decodeCbor rejects NaN, Infinity and undefined", () => {
  assertDecodeError("f9 7e 00", /NaN/);
  assertDecodeError("f9 7c 00", /Infinity/);
  assertDecodeError("f7", /undefined values are not supported/);
});

Deno.test("decodeCbor rejects non-minimal integers and lengths", () => {
  assertDecodeError("18 01", /more bytes than necessary/);
  assertDecodeError("19 00 ff", /more bytes than necessary/);
  assertDecodeError("78 01 61", /more bytes than necessary/);
  assertDecodeError("98 01 01", /more bytes than necessary/);
});

Deno.test("decodeCbor rejects indefinite lengths", () => {
  assertDecodeError("9f 01 ff", /indefinite length/);
  assertDecodeError("bf 61 61 01 ff", /indefinite length/);
  assertDecodeError("7f 61 61 ff", /indefinite length/);
});

Deno.test("decodeCbor rejects tags other than 42 and bad tag-42 payloads", () => {
  assertDecodeError("c0 61 61", /^Invalid CBOR: tag 0 is not allowed$/);
  assertDecodeError("d8 2b 01", /tag 43 is not allowed/);
  assertDecodeError("d8 2a 61 61", /tag 42 content is not a byte string/);
  assertDecodeError("d8 2a 42 01 71", /tag 42 CID does not start with 0x00/);
  assertDecodeError("d8 2a 43 00 01 71", /tag 42 holds an invalid CID/);
});

Deno.test("decodeCbor rejects duplicate, unsorted, non-string and __proto__ map keys", () => {
  assertDecodeError("a2 61 61 01 61 61 02", /^Invalid CBOR: duplicate map key "a"$/);
  assertDecodeError("a2 61 62 01 61 61 02", /map key "a" is out of canonical order/);
  assertDecodeError("a2 62 61 61 01 61 62 02", /map key "b" is out of canonical order/);
  assertDecodeError("a1 01 02", /map key is not a text string \(uint\)/);
  assertDecodeError("a1 81 01 02", /map key is not a text string \(array\)/);
  assertDecodeError("a1 69 5f 5f 70 72 6f 74 6f 5f 5f 01", /"__proto__" is not allowed/);
});

Deno.test("decodeCbor rejects invalid UTF-8 in text strings", () => {
  assertDecodeError("62 c3 28", /not valid UTF-8/);
  assertDecodeError("a1 62 c3 28 01", /not valid UTF-8/);
  assert.equal(decodeCbor(fromHex("63 ef bf bd")), "\uFFFD");
});

Deno.test("decodeCbor rejects a depth bomb without overflowing the stack", () => {
  assertDecodeError(new Uint8Array(200_000).fill(0x81), /nesting deeper than 64 levels/);
  assertDecodeError(new Uint8Array(200_000).fill(0xd8).map((_, i) => i % 2 ? 42 : 0xd8), /64/);
  const nested = (n: number): unknown => n === 0 ? 1 : [nested(n - 1)];
  assert.deepEqual(decodeCbor(encodeCbor(nested(64))), nested(64));
  assert.throws(() => decodeCbor(encodeCbor(nested(65))), CborError);
  assert.deepEqual(decodeCbor(encodeCbor(nested(65)), { maxDepth: 65 }), nested(65));
});

Deno.test("decodeCbor enforces maxSize before decoding", () => {
  const bytes = encodeCbor("x".repeat(100));
  assert.throws(() => decodeCbor(bytes, { maxSize: 50 }), {
    name: "CborError",
    message: "CBOR input is 102 bytes, over the 50 byte limit",
  });
  assert.equal(decodeCbor(bytes, { maxSize: 102 }), "x".repeat(100));
});

Deno.test("decodeCbor rejects trailing bytes, empty and truncated input", () => {
  assertDecodeError("01 02", /^Invalid CBOR: 1 trailing byte\(s\) after the item$/);
  assertDecodeError(new Uint8Array(0), /^Invalid CBOR: empty input$/);
  assertDecodeError("a2 61 61 01", /Invalid CBOR/);
  assertDecodeError("5a ff ff ff ff 00", /Invalid CBOR/);
  assertDecodeError("9b 00 00 00 01 00 00 00 00", /Invalid CBOR/);
});

Deno.test("decodeCbor rejects integers outside the safe range", () => {
  assertDecodeError("1b 00 20 00 00 00 00 00 00", /outside of the safe integer range/);
  assert.equal(decodeCbor(fromHex("1b 00 1f ff ff ff ff ff ff")), Number.MAX_SAFE_INTEGER);
});

Deno.test("decodeCborFirst splits two concatenated values", () => {
  const a = encodeCbor({ op: 1, t: "#commit" });
  const b = encodeCbor({ seq: 5 });
  const both = new Uint8Array([...a, ...b]);
  const [first, rest] = decodeCborFirst(both);
  assert.deepEqual(first, { op: 1, t: "#commit" });
  assert.deepEqual(rest, b);
  assert.deepEqual(decodeCbor(rest), { seq: 5 });
});

Deno.test("decodeCbor never throws anything but CborError on random input", () => {
  let seed = 12345;
  const rand = () => (seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff;
  for (let i = 0; i < 5000; i++) {
    const bytes = new Uint8Array(1 + Math.floor(rand() * 40)).map(() => Math.floor(rand() * 256));
    try {
      decodeCbor(bytes);
    } catch (err) {
      assert.ok(err instanceof CborError, `input ${hex(bytes)} threw ${err}`);
    }
  }
});

Deno.test("encodeCbor and decodeCbor return plain Uint8Arrays, never Node Buffers", () => {
  const bytes = encodeCbor({ b: new Uint8Array([1, 2]) });
  assert.equal(bytes.constructor, Uint8Array);
  const back = decodeCbor(bytes) as { b: Uint8Array };
  assert.equal(back.b.constructor, Uint8Array);
});

/** A random data-model value (deterministic for a seed), nesting at most `depth` levels. */
function randomValue(rand: () => number, depth: number): unknown {
  const pick = Math.floor(rand() * (depth > 0 ? 10 : 7));
  const ints = [0, 23, 24, 255, 256, 65535, 65536, 2 ** 32 - 1, 2 ** 32, Number.MAX_SAFE_INTEGER];
  switch (pick) {
    case 0:
      return (ints[Math.floor(rand() * ints.length)] * (rand() < 0.5 ? -1 : 1)) || 0; // not -0
    case 1:
      return (Math.floor(rand() * 2 ** (1 + Math.floor(rand() * 52))) * (rand() < 0.3 ? -1 : 1)) ||
        0;
    case 2: {
      const alphabet = ["a", "Z", "0", " ", "é", "€", "😀", "\uFEFF", "\u0000", "字"];
      let s = "";
      for (let n = Math.floor(rand() * 40); n > 0; n--) {
        s += alphabet[Math.floor(rand() * alphabet.length)];
      }
      return s;
    }
    case 3:
      return new Uint8Array(Math.floor(rand() * 70)).map(() => Math.floor(rand() * 256));
    case 4:
      return [true, false, null][Math.floor(rand() * 3)];
    case 5:
      return cidForCbor(new Uint8Array([Math.floor(rand() * 256)]));
    case 6:
      return cidForRaw(new Uint8Array([Math.floor(rand() * 256)]));
    case 7:
    case 8: {
      const out: Record<string, unknown> = {};
      for (let n = Math.floor(rand() * 6); n > 0; n--) {
        out[["a", "b", "$type", "text", "ab", "é", "createdAt"][Math.floor(rand() * 7)]] =
          randomValue(rand, depth - 1);
      }
      return out;
    }
    default:
      return Array.from({ length: Math.floor(rand() * 5) }, () => randomValue(rand, depth - 1));
  }
}

Deno.test("decodeCbor reads back every random data-model value encodeCbor writes", () => {
  let seed = 777;
  const rand = () => (seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff;
  for (let i = 0; i < 2000; i++) {
    const value = randomValue(rand, 4);
    assert.deepEqual(decodeCbor(encodeCbor(value)), value);
  }
});

Deno.test("decodeCbor accepts only canonical input that @ipld/dag-cbor also accepts", () => {
  // Mutations of valid encodings: whatever the strict decoder accepts must re-encode to the
  // exact input (canonical form) and must be valid DAG-CBOR to the reference library too.
  let seed = 4242;
  const rand = () => (seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff;
  let accepted = 0;
  let rejected = 0;
  for (let i = 0; i < 5000; i++) {
    const bytes = encodeCbor(randomValue(rand, 3)).slice();
    const at = Math.floor(rand() * bytes.length);
    const mode = Math.floor(rand() * 3);
    let input = bytes;
    if (mode === 0) bytes[at] = Math.floor(rand() * 256);
    else if (mode === 1) bytes[at] ^= 1 << Math.floor(rand() * 8);
    else input = bytes.subarray(0, at);
    let decoded: unknown;
    try {
      decoded = decodeCbor(input);
    } catch (err) {
      assert.ok(err instanceof CborError, `input ${hex(input)} threw ${err}`);
      rejected++;
      continue;
    }
    accepted++;
    assert.equal(hex(encodeCbor(decoded)), hex(input), `input ${hex(input)} is not canonical`);
    assert.doesNotThrow(() => dagCbor.decode(input), `dag-cbor refuses ${hex(input)}`);
  }
  // Both outcomes are exercised (a flipped byte inside a string or number stays valid).
  assert.ok(accepted > 500 && rejected > 500, `accepted ${accepted}, rejected ${rejected}`);
});

Deno.test("decodeCbor builds sha-256 CIDv1 links that equal multiformats' own", () => {
  for (const cid of [cidForCbor(new Uint8Array([1])), cidForRaw(new Uint8Array([2]))]) {
    const back = decodeCbor(encodeCbor({ l: cid })) as { l: CID };
    assert.ok(back.l instanceof CID);
    assert.ok(back.l.equals(cid));
    assert.equal(back.l.toString(), cid.toString());
    assert.deepEqual(back.l.multihash.digest, cid.multihash.digest);
    assert.equal(back.l.multihash.code, 0x12);
    assert.equal(back.l.code, cid.code);
  }
  // A CIDv0 inside tag 42 (not the common shape) still decodes through multiformats.
  const v0 = CID.parse("QmdfTbBqBPQ7VNxZEYEj14VmRuZBkqFbiwReogJgS1zR1n");
  const back = decodeCbor(fromHex("d8 2a 58 23 00 " + hex(v0.bytes))) as CID;
  assert.equal(back.toString(), v0.toString());
});

Deno.test("decoded byte strings are copies, also from a Buffer; CIDs are views of the input", () => {
  const cid = cidForCbor(new Uint8Array([7]));
  const encoded = encodeCbor({ b: new Uint8Array([1, 2, 3]), l: cid });
  for (const input of [encoded, Buffer.from(encoded)]) {
    const back = decodeCbor(input) as { b: Uint8Array; l: CID };
    assert.equal(back.b.constructor, Uint8Array);
    assert.notEqual(back.b.buffer, input.buffer);
    assert.equal(back.l.bytes.buffer, input.buffer); // documented: decode a copy to keep CIDs
    input.fill(0);
    assert.deepEqual(back.b, new Uint8Array([1, 2, 3]));
  }
});
