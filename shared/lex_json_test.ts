// Lex JSON <-> data model (docs/protocol.md 9.3, the JSON mapping).
import assert from "node:assert/strict";
import { CID, parseCid } from "./cid.ts";
import { fromLexJson, fromLexJsonObject, LexJsonError, toLexJson } from "./lex_json.ts";

const LINK = "bafyreie5737gdxlw5i64vzichcalba3z2v5n6icifvx5xytvske7mr3hpm";

function assertLexError(value: unknown, pattern: RegExp) {
  assert.throws(() => fromLexJson(value), (err: unknown) => {
    assert.ok(err instanceof LexJsonError, `expected LexJsonError, got ${err}`);
    assert.match(err.message, pattern);
    return true;
  });
}

Deno.test("fromLexJson turns $link into a CID and $bytes into bytes", () => {
  const value = fromLexJson({ a: { $link: LINK }, b: [{ $bytes: "AQID" }] }) as {
    a: CID;
    b: Uint8Array[];
  };
  assert.ok(value.a instanceof CID);
  assert.equal(value.a.toString(), LINK);
  assert.deepEqual(value.b, [new Uint8Array([1, 2, 3])]);
});

Deno.test("fromLexJson accepts $bytes with and without padding", () => {
  assert.deepEqual(fromLexJson({ $bytes: "AQI" }), new Uint8Array([1, 2]));
  assert.deepEqual(fromLexJson({ $bytes: "AQI=" }), new Uint8Array([1, 2]));
  assert.deepEqual(fromLexJson({ $bytes: "AQ==" }), new Uint8Array([1]));
  assert.deepEqual(fromLexJson({ $bytes: "" }), new Uint8Array(0));
  assert.deepEqual(fromLexJson({ $bytes: "+/+/" }), new Uint8Array([0xfb, 0xff, 0xbf]));
});

Deno.test("fromLexJson rejects bad $bytes", () => {
  assertLexError({ x: { $bytes: "-_-_" } }, /^\$bytes at \$\.x is not base64$/);
  assertLexError({ $bytes: "A" }, /not base64/);
  assertLexError({ $bytes: "AQ=" }, /not base64/);
  assertLexError({ $bytes: "AQ I=" }, /not base64/);
  assertLexError({ $bytes: [1, 2] }, /^\$bytes at \$ is not a string$/);
  assertLexError({ $bytes: "AQI", other: 1 }, /^Bytes object at \$ has keys other than \$bytes$/);
});

Deno.test("fromLexJson rejects bad $link", () => {
  assertLexError({ l: { $link: "." } }, /^\$link at \$\.l is not a CID: "\."$/);
  assertLexError({ $link: 1234 }, /^\$link at \$ is not a string$/);
  assertLexError({ $link: LINK, other: "x" }, /^Link object at \$ has keys other than \$link$/);
});

Deno.test("fromLexJson rejects floats and non-safe integers", () => {
  assertLexError({ a: [1, 2.5] }, /^Number at \$\.a\[1\] is not a safe integer: 2\.5$/);
  assertLexError(2 ** 60, /not a safe integer/);
  assert.equal(fromLexJson(JSON.parse("123.0")), 123);
});

Deno.test("fromLexJson rejects $type that is not a non-empty string", () => {
  assertLexError({ r: { $type: null } }, /^\$type at \$\.r is not a non-empty string: null$/);
  assertLexError({ $type: 123 }, /not a non-empty string: 123/);
  assertLexError({ $type: "" }, /not a non-empty string: ""/);
});

Deno.test("fromLexJson checks blob objects", () => {
  const ref = { $link: "bafkreiccldh766hwcnuxnf2wh6jgzepf2nlu2lvcllt63eww5p6chi4ity" };
  const blob = { $type: "blob", ref, mimeType: "image/jpeg", size: 10000 };
  const value = fromLexJson(blob) as { ref: CID };
  assert.ok(value.ref instanceof CID);
  assertLexError({ ...blob, size: "10000" }, /^Blob at \$ has no integer size: "10000"$/);
  assertLexError({ ...blob, ref: undefined }, /^Blob at \$ has no ref link$/);
  assertLexError({ ...blob, mimeType: 1 }, /has no string mimeType/);
});

Deno.test("fromLexJson rejects __proto__ keys, unsupported types and deep nesting", () => {
  assertLexError(JSON.parse('{"__proto__": {"x": 1}}'), /"__proto__" is not allowed/);
  assertLexError({ d: new Date(0) }, /^Unsupported Date at \$\.d$/);
  assertLexError({ f: () => 1 }, /^Unsupported function at \$\.f$/);
  let deep: unknown = 1;
  for (let i = 0; i < 100_000; i++) deep = [deep];
  assertLexError(deep, /^Nesting too deep at \$(\[0\])+$/);
  assert.throws(() => toLexJson(deep), LexJsonError);
});

Deno.test("fromLexJsonObject requires an object at the top", () => {
  assert.throws(() => fromLexJsonObject("blah"), {
    name: "LexJsonError",
    message: "Value is not an object: string",
  });
  assert.throws(() => fromLexJsonObject([]), /not an object: array/);
  assert.deepEqual(fromLexJsonObject({ a: 1 }), { a: 1 });
});

Deno.test("toLexJson writes $link and unpadded standard base64 $bytes", () => {
  const json = toLexJson({
    a: parseCid(LINK),
    b: new Uint8Array([0xfb, 0xff]),
    c: [null, true, "s", 1],
    d: undefined,
  });
  assert.deepEqual(json, { a: { $link: LINK }, b: { $bytes: "+/8" }, c: [null, true, "s", 1] });
  assert.throws(() => toLexJson({ a: 0.5 }), /Number at \$\.a is not a safe integer: 0\.5/);
});

Deno.test("toLexJson and fromLexJson are inverses", () => {
  const value = { link: parseCid(LINK), bytes: new Uint8Array(100).fill(7), n: [-1, { x: "y" }] };
  assert.deepEqual(fromLexJson(JSON.parse(JSON.stringify(toLexJson(value)))), value);
});
