import assert from "node:assert/strict";
import { encodeCbor } from "./cbor.ts";
import { encodeBlock } from "./cid.ts";
import { decodeFrame, encodeFrame, FrameError } from "./frame.ts";

const HEX_COMMIT_HEADER = "a261746723636f6d6d6974626f7001";

function hex(bytes: Uint8Array): string {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

function assertFrameError(bytes: Uint8Array, message: string | RegExp, maxSize?: number) {
  assert.throws(() => decodeFrame(bytes, { maxSize }), (e: unknown) => {
    assert.ok(e instanceof FrameError, `not a FrameError: ${e}`);
    assert.equal(e.name, "FrameError");
    if (typeof message === "string") assert.equal(e.message, message);
    else assert.match(e.message, message);
    return true;
  });
}

Deno.test("encodeFrame writes the canonical #commit header then the body (spec 6.1 rule 6)", () => {
  const link = encodeBlock({ text: "hi" }).cid;
  const body = { seq: 7, repo: "did:plc:abc", commit: link, blocks: new Uint8Array([1, 2]) };
  const frame = encodeFrame({ op: 1, t: "#commit" }, body);
  assert.equal(hex(frame.subarray(0, 15)), HEX_COMMIT_HEADER);
  assert.deepEqual(frame.subarray(15), encodeCbor(body));
  const decoded = decodeFrame(frame);
  assert.deepEqual(decoded.header, { op: 1, t: "#commit" });
  assert.equal(decoded.body.seq, 7);
  assert.ok(link.equals(decoded.body.commit));
  assert.deepEqual(decoded.body.blocks, new Uint8Array([1, 2]));
});

Deno.test("encodeFrame and decodeFrame round-trip an error frame", () => {
  const frame = encodeFrame({ op: -1 }, { error: "FutureCursor", message: "Cursor in the future" });
  assert.equal(hex(frame.subarray(0, 5)), "a1626f7020");
  assert.deepEqual(decodeFrame(frame), {
    header: { op: -1 },
    body: { error: "FutureCursor", message: "Cursor in the future" },
  });
  assert.throws(() => encodeFrame({ op: -1 }, { message: "x" }), FrameError);
});

Deno.test("encodeFrame refuses a body that is not a map or cannot be encoded", () => {
  assert.throws(() => encodeFrame({ op: 1, t: "#commit" }, [1]), {
    name: "FrameError",
    message: "Frame body is not a map: an array of 1 items",
  });
  assert.throws(() => encodeFrame({ op: 1, t: "#commit" }, { n: 1.5 }), {
    name: "FrameError",
    message: "Frame body cannot be encoded: Cannot encode number 1.5: only safe integers",
  });
  assert.throws(() => encodeFrame({ op: 1, t: "commit" }, {}), FrameError);
});

Deno.test("decodeFrame rejects trailing data after the body", () => {
  const frame = encodeFrame({ op: 1, t: "#info" }, { name: "OutdatedCursor" });
  assertFrameError(concat(frame, encodeCbor({})), "Frame has 1 trailing bytes after the body");
  assertFrameError(concat(frame, new Uint8Array([0])), "Frame has 1 trailing bytes after the body");
});

Deno.test("decodeFrame validates the header shape", () => {
  const body = encodeCbor({ seq: 1 });
  const cases: [unknown, string][] = [
    [{ op: 2, t: "#commit" }, "Frame header op is not 1 or -1: 2"],
    [{ op: 1 }, "Frame header t is not a #type name: undefined"],
    [{ op: 1, t: "commit" }, 'Frame header t is not a #type name: "commit"'],
    [{ op: 1, t: "#commit", x: 1 }, `Frame header has unexpected members: "t, x, op"`],
    [{ op: -1, t: "#commit" }, `Error frame header has unexpected members: "t, op"`],
    [[1, "#commit"], "Frame header is not a map: an array of 2 items"],
    ["#commit", 'Frame header is not a map: "#commit"'],
  ];
  for (const [header, message] of cases) {
    assertFrameError(concat(encodeCbor(header), body), message);
  }
});

Deno.test("decodeFrame rejects a missing or non-map body and a bad error body", () => {
  const header = encodeCbor({ op: 1, t: "#commit" });
  assertFrameError(header, "Frame has no body");
  assertFrameError(
    concat(header, encodeCbor([1, 2])),
    "Frame body is not a map: an array of 2 items",
  );
  assertFrameError(concat(header, encodeCbor(null)), "Frame body is not a map: null");
  const errorHeader = encodeCbor({ op: -1 });
  assertFrameError(
    concat(errorHeader, encodeCbor({ message: "x" })),
    "Error frame body has no error name: undefined",
  );
  assertFrameError(
    concat(errorHeader, encodeCbor({ error: "X", message: 5 })),
    "Error frame message is not a string: 5",
  );
});

Deno.test("decodeFrame bounds the frame size (default 5 MiB) and rejects invalid CBOR", () => {
  const frame = encodeFrame({ op: 1, t: "#commit" }, { blocks: new Uint8Array(100) });
  assertFrameError(frame, `Frame is ${frame.length} bytes, over the 64 byte limit`, 64);
  const big = encodeFrame({ op: 1, t: "#commit" }, { blocks: new Uint8Array(5 * 1024 * 1024) });
  assertFrameError(big, `Frame is ${big.length} bytes, over the 5242880 byte limit`);
  assertFrameError(new Uint8Array(0), "Frame is empty");
  assertFrameError(new Uint8Array([0xff, 0x00]), /^Frame header is not valid DAG-CBOR: /);
  const header = encodeCbor({ op: 1, t: "#commit" });
  assertFrameError(
    concat(header, new Uint8Array([0xa1, 0x61])),
    /^Frame body is not valid DAG-CBOR: /,
  );
  assertFrameError("x" as unknown as Uint8Array, "Frame is not binary");
});

Deno.test("decodeFrame never throws anything but FrameError on random bytes", () => {
  let seed = 42;
  const next = () => (seed = (seed * 1103515245 + 12345) & 0x7fffffff) & 0xff;
  const valid = encodeFrame({ op: 1, t: "#commit" }, { seq: 1, ops: [{ a: "x" }] });
  for (let i = 0; i < 2000; i++) {
    const bytes = i % 2 === 0 ? Uint8Array.from({ length: 1 + (i % 40) }, next) : valid.slice();
    if (i % 2 === 1) bytes[next() % bytes.length] = next();
    try {
      decodeFrame(bytes);
    } catch (e) {
      assert.ok(e instanceof FrameError, `input ${hex(bytes)} threw ${e}`);
    }
  }
});
