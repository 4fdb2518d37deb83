// Syntax validators (docs/protocol.md 11). The full interop lists run in
// tests/conformance_syntax_test.ts; these tables pin the rules without the vector folder.
import assert from "node:assert/strict";
import {
  isValidAtUri,
  isValidDatetime,
  isValidDid,
  isValidHandle,
  isValidNsid,
  isValidRecordKey,
  normalizeHandle,
} from "./syntax.ts";

function check(fn: (s: string) => boolean, valid: string[], invalid: string[]): void {
  for (const s of valid) assert.equal(fn(s), true, `expected valid: ${JSON.stringify(s)}`);
  for (const s of invalid) assert.equal(fn(s), false, `expected invalid: ${JSON.stringify(s)}`);
}

Deno.test("isValidDid accepts method-specific ids and rejects bad methods and endings", () => {
  check(
    isValidDid,
    [
      "did:plc:7iza6de2dwap2sbkpav7c6c6",
      "did:web:localhost%3A1234",
      "did:method:-:_:.:%ab",
      "did:m:v",
      "did:method:" + "v".repeat(2048 - 11),
    ],
    [
      "did:METHOD:val",
      "did:m123:val",
      "DID:method:val",
      "did:method:",
      "did:method:val:",
      "did:method:val%",
      "did:method:val/two",
      "did:method:val#two",
      "did:method:" + "v".repeat(2048 - 10),
      "",
    ],
  );
});

Deno.test("isValidHandle accepts DNS names with a letter-led TLD, up to 253 chars", () => {
  check(
    isValidHandle,
    [
      "alice.test",
      "XX.LCS.MIT.EDU",
      "4chan.o-g",
      "xn--ls8h.test",
      "short." + "o".repeat(63) + ".test",
      "laptop.local",
    ],
    [
      "alice",
      "alice.test.",
      ".alice.test",
      "alice..test",
      "-alice.test",
      "alice-.test",
      "john.0",
      "thing.0aa",
      "127.0.0.1",
      "jo_hn.test",
      "john.test ",
      "short." + "o".repeat(64) + ".test",
      ("a".repeat(63) + ".").repeat(4) + "test",
    ],
  );
});

Deno.test("normalizeHandle lower-cases", () => {
  assert.equal(normalizeHandle("Alice.Example.TEST"), "alice.example.test");
});

Deno.test("isValidNsid needs three segments and a hyphen-free letter-led name", () => {
  check(
    isValidNsid,
    ["app.social.feed.post", "com.example.fooBar", "a.b.c", "cn.8.lex.stuff", "a-0.b-1.c"],
    [
      "com.example",
      "com.example.foo-bar",
      "com.example.2foo",
      "1.0.0.127.record",
      "com.example.foo.*",
      "com.example..foo",
      "com.example-.foo",
      "com.example." + "o".repeat(64),
      "com." + "middle.".repeat(52) + "foo",
    ],
  );
});

Deno.test("isValidRecordKey allows 1-512 safe chars except . and ..", () => {
  check(
    isValidRecordKey,
    ["self", "3jzfcijpj2z2a", "literal:self", "~1.2-3_", ":", "...", "o".repeat(512)],
    ["", ".", "..", "a/b", "a b", "a#b", "%23", "o".repeat(513)],
  );
});

Deno.test("isValidAtUri checks authority, collection and record key, with no extras", () => {
  check(
    isValidAtUri,
    [
      "at://did:plc:asdf123",
      "at://user.bsky.social",
      "at://did:plc:asdf123/app.social.feed.post",
      "at://did:plc:asdf123/app.social.feed.post/3jzfcijpj2z2a",
      "at://did:abc:123/io.nsid.someFunc/lang:",
    ],
    [
      "at://did:plc:asdf123/",
      "at://did:plc:asdf123/app.social.feed.post/",
      "at://did:plc:asdf123/app.social.feed.post/a/b",
      "at://did:plc:asdf123/app.social.feed.post/%23",
      "at://did:plc:asdf123/app.social.feed.post/..",
      "at://did:plc:asdf123#frag",
      "at://did:plc:asdf123?q=1",
      "at://did:plc:asdf123/short/stuff",
      "at://name",
      "AT://did:plc:asdf123",
      "at://did:plc:asdf123/app.social.feed.post/" + "o".repeat(8200),
      " at://did:plc:asdf123",
    ],
  );
});

Deno.test("isValidDatetime accepts RFC 3339 / ISO 8601 with a zone and real calendar values", () => {
  check(
    isValidDatetime,
    [
      "1985-04-12T23:20:50.123Z",
      "1985-04-12T23:20:50Z",
      "1985-04-12T23:20:50.123456789012Z",
      "1985-04-12T23:20:50.123+01:45",
      "1985-04-12T23:20:50.123-07:00",
      "0000-01-01T00:00:00.000Z",
      "0000-01-01T01:00:00+01:00",
      "0001-01-01T00:00:00+23:59",
      "0000-12-31T23:59:59-23:59",
      "2024-02-29T12:00:00Z",
    ],
    [
      "1985-04-12T23:20:50.123z",
      "1985-04-12t23:20:50.123Z",
      "1985-04-12T23:20:50.123",
      "1985-04-12T23:20:50.123-00:00",
      "1985-04-12T23:20:50.123+0000",
      "1985-04-12 23:20:50.123Z",
      "1985-04-12T23:20:50.Z",
      "1985-13-12T23:20:50.123Z",
      "1985-04-31T23:20:50.123Z",
      "2023-02-29T12:00:00Z",
      "1985-04-12T24:20:50.123Z",
      "1985-04-12T23:20:61.123Z",
      "0000-01-01T00:00:00+01:00",
      "0000-01-01T00:59:59.999+01:00",
      "+001985-04-12T23:20:50.123Z",
    ],
  );
});

Deno.test("validators return false for non-string input instead of throwing", () => {
  const fns = [isValidDid, isValidHandle, isValidNsid, isValidRecordKey, isValidAtUri];
  for (const fn of [...fns, isValidDatetime]) {
    for (const value of [undefined, null, 42, {}, ["a.b.c"]]) {
      assert.equal(fn(value as unknown as string), false, `${fn.name}(${String(value)})`);
    }
  }
});
