import assert from "node:assert/strict";
import { decodeIdKey, decodeRowId, decodeTextKey, encodeCursor } from "./cursor.ts";

Deno.test("cursors round-trip their sort keys as base64url", () => {
  const text = [
    "2024-06-01T00:00:00.123Z",
    "at://did:plc:x/app.social.feed.post/3k\u00e9",
  ] as const;
  const c = encodeCursor(text);
  assert.match(c, /^[A-Za-z0-9_-]+$/);
  assert.deepEqual(decodeTextKey(c), text);
  assert.deepEqual(decodeIdKey(encodeCursor(["2024-06-01T00:00:00.000Z", 42])), [
    "2024-06-01T00:00:00.000Z",
    42,
  ]);
  assert.equal(decodeRowId(encodeCursor(17)), 17);
});

Deno.test("cursor decoders reject anything that is not their own key", () => {
  const bad = [
    "",
    "!!!",
    "a=b",
    encodeCursor(17),
    encodeCursor(["yesterday", "x"]),
    encodeCursor(["2024-06-01T00:00:00.000Z"] as unknown as number),
    encodeCursor(["2024-06-01T00:00:00.000Z", 1.5]),
    btoa("{not json"),
  ];
  for (const c of bad) {
    assert.equal(decodeIdKey(c), null, c);
    if (c !== encodeCursor(17)) assert.equal(decodeRowId(c), null, c);
  }
  assert.equal(decodeTextKey(encodeCursor(["2024-06-01T00:00:00.000Z", 5])), null);
  assert.equal(decodeRowId(encodeCursor(0)), null);
  assert.equal(decodeRowId(encodeCursor(-3)), null);
});
