// CAR v1 reader and writer (docs/protocol.md 10; spec part 6 `blocks`).
import assert from "node:assert/strict";
import { CarError, readCar, writeCar } from "./car.ts";
import { encodeCbor } from "./cbor.ts";
import { CID, encodeBlock, formatCid } from "./cid.ts";

const empty = encodeBlock({ e: [], l: null });
const record = encodeBlock({ $type: "app.social.feed.post", text: "hello" });

function assertCarError(bytes: Uint8Array, pattern: RegExp, opts?: Parameters<typeof readCar>[1]) {
  assert.throws(() => readCar(bytes, opts), (err: unknown) => {
    assert.ok(err instanceof CarError, `expected CarError, got ${err}`);
    assert.match(err.message, pattern);
    return true;
  });
}

Deno.test("writeCar then readCar round-trips roots and blocks", () => {
  const car = writeCar([empty.cid], [empty, record]);
  const { roots, blocks } = readCar(car);
  assert.deepEqual(roots.map(formatCid), [formatCid(empty.cid)]);
  assert.deepEqual([...blocks.keys()], [formatCid(empty.cid), formatCid(record.cid)]);
  assert.deepEqual(blocks.get(formatCid(record.cid)), record.bytes);
});

Deno.test("writeCar emits a 58-byte header for one dag-cbor root", () => {
  const car = writeCar([empty.cid], []);
  assert.equal(car[0], 0x3a);
  assert.deepEqual([...car.subarray(1, 8)], [0xa2, 0x65, 0x72, 0x6f, 0x6f, 0x74, 0x73]);
  assert.equal(car.length, 59);
  assert.equal(writeCar([], [])[0], 17);
  assert.deepEqual(readCar(writeCar([], [])).roots, []);
});

Deno.test("readCar accepts duplicate blocks and blocks from a generator", () => {
  function* gen() {
    yield record;
    yield record;
  }
  const { blocks } = readCar(writeCar([record.cid], gen()));
  assert.equal(blocks.size, 1);
});

Deno.test("readCar rejects a block whose bytes do not hash to its CID", () => {
  const car = writeCar([record.cid], [record]);
  car[car.length - 1] ^= 0xff;
  assertCarError(car, new RegExp(`^CAR block ${formatCid(record.cid)} does not match its CID$`));
});

Deno.test("readCar with verify lazy checks a block against its CID when it is read", () => {
  const car = writeCar([empty.cid], [empty, record]);
  car[car.length - 1] ^= 0xff; // corrupt the record block only
  const { blocks } = readCar(car, { verify: "lazy" });
  assert.deepEqual(blocks.get(formatCid(empty.cid)), empty.bytes); // an intact block reads fine
  assert.equal(blocks.get(formatCid(record.cid).replace(/.$/, "a")), undefined);
  const bad = new RegExp(`^CAR block ${formatCid(record.cid)} does not match its CID$`);
  const isBad = (err: unknown) => err instanceof CarError && bad.test(err.message);
  for (let i = 0; i < 2; i++) assert.throws(() => blocks.get(formatCid(record.cid)), isBad);
  assert.throws(() => [...blocks.values()], isBad);
  assert.throws(() => [...blocks], isBad);
  assert.throws(() => blocks.forEach(() => {}), isBad);
});

Deno.test("readCar with verify lazy returns the same blocks as a full check", () => {
  const car = writeCar([empty.cid], [empty, record, record]);
  const lazy = readCar(car, { verify: "lazy" });
  const full = readCar(car);
  assert.deepEqual([...lazy.blocks.entries()], [...full.blocks.entries()]);
  assert.deepEqual(lazy.roots, full.roots);
  assertCarError(car.subarray(0, car.length - 1), /^CAR is truncated/, { verify: "lazy" });
});

Deno.test("readCar rejects every truncation of a valid CAR", () => {
  const car = writeCar([empty.cid], [empty, record]);
  for (let len = 0; len < car.length; len++) {
    // Cutting exactly at a section boundary leaves a valid, shorter CAR.
    try {
      const { blocks } = readCar(car.subarray(0, len));
      assert.ok(blocks.size < 2, `truncation at ${len} was accepted`);
    } catch (err) {
      assert.ok(err instanceof CarError, `truncation at ${len} threw ${err}`);
    }
  }
  assertCarError(car.subarray(0, car.length - 3), /^CAR is truncated: CAR section at byte \d+/);
  assertCarError(car.subarray(0, 20), /^CAR is truncated: CAR header at byte 0 declares 58/);
});

Deno.test("readCar rejects a huge declared length without allocating", () => {
  const header = writeCar([], []);
  const huge = new Uint8Array([...header, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x01]);
  assertCarError(huge, /^CAR is truncated: CAR section at byte 18 declares 4294967295 bytes/);
  const overflow = new Uint8Array([...header, ...new Array(10).fill(0xff), 0x01]);
  assertCarError(overflow, /oversized CAR section length at byte 18/);
  assertCarError(new Uint8Array([0xff, 0xff, 0xff, 0xff, 0x7f]), /^CAR is truncated: CAR header/);
});

Deno.test("readCar rejects non-minimal varints and empty sections", () => {
  const header = writeCar([], []);
  assertCarError(new Uint8Array([...header, 0x81, 0x00]), /non-minimal CAR section length/);
  assertCarError(new Uint8Array([...header, 0x00]), /^CAR section at byte 18 is empty$/);
});

Deno.test("readCar rejects CIDs with another hash function or version", () => {
  const header = writeCar([], []);
  const block = new Uint8Array([1, 2, 3]);
  // CIDv1 raw with identity multihash (0x00) of the block
  const identity = [0x01, 0x55, 0x00, 0x03, 1, 2, 3];
  const car = new Uint8Array([...header, identity.length + 3, ...identity, ...block]);
  assertCarError(car, /^CAR section at byte 18 uses hash function 0x0, not sha-256$/);
  const v0 = new Uint8Array([...header, 35, 0x12, 0x20, ...new Array(33).fill(0)]);
  assertCarError(v0, /CID of version 18, not 1/);
});

Deno.test("readCar rejects bad headers", () => {
  const withHeader = (value: unknown) => {
    const h = encodeCbor(value);
    return new Uint8Array([h.length, ...h]);
  };
  assertCarError(withHeader({ roots: [], version: 2 }), /^CAR version is 2, not 1$/);
  assertCarError(withHeader({ roots: ["x"], version: 1 }), /roots is not an array of CIDs/);
  assertCarError(withHeader([1]), /^CAR header is not a map$/);
  assertCarError(withHeader({ roots: [], version: 1, x: 1 }), /unexpected key "x"/);
  assertCarError(new Uint8Array([2, 0xf9, 0x00]), /^CAR header is not valid DAG-CBOR: /);
  assertCarError(new Uint8Array(0), /^CAR is empty$/);
});

Deno.test("readCar enforces maxSize and maxBlocks", () => {
  const car = writeCar([empty.cid], [empty, record]);
  assertCarError(car, new RegExp(`^CAR is ${car.length} bytes, over the 100 byte limit$`), {
    maxSize: 100,
  });
  assertCarError(car, /^CAR has more than 1 blocks$/, { maxBlocks: 1 });
  assert.equal(readCar(car, { maxBlocks: 2 }).blocks.size, 2);
});

Deno.test("readCar never throws anything but CarError on random or mutated input", () => {
  let seed = 987654;
  const rand = () => (seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff;
  const valid = writeCar([empty.cid], [empty, record]);
  for (let i = 0; i < 3000; i++) {
    let bytes: Uint8Array;
    if (i % 2 === 0) {
      bytes = new Uint8Array(1 + Math.floor(rand() * 80)).map(() => Math.floor(rand() * 256));
    } else {
      bytes = valid.slice();
      bytes[Math.floor(rand() * bytes.length)] = Math.floor(rand() * 256);
    }
    try {
      readCar(bytes);
    } catch (err) {
      assert.ok(err instanceof CarError, `input threw ${err}`);
    }
  }
});

Deno.test("readCar roots are CID instances", () => {
  const { roots } = readCar(writeCar([record.cid], [record]));
  assert.ok(roots[0] instanceof CID);
  assert.ok(roots[0].equals(record.cid));
});
