// CORS origin lists (APPVIEW_CORS_ORIGINS, PDS_CORS_ORIGINS): web origins only, in the form
// browsers send them.

import assert from "node:assert/strict";
import { parseOrigins } from "./origins.ts";

Deno.test("parseOrigins keeps each origin in the form browsers send and skips empty entries", () => {
  const origins = parseOrigins(
    "X_ORIGINS",
    "https://app.example/, http://localhost:5173,, HTTPS://Caps.Example:443, https://bücher.example,",
  );
  assert.deepEqual(origins, [
    "https://app.example",
    "http://localhost:5173",
    "https://caps.example",
    "https://xn--bcher-kva.example",
  ]);
  assert.ok(Object.isFrozen(origins));
  assert.deepEqual(parseOrigins("X_ORIGINS", " , "), []);
});

Deno.test("parseOrigins refuses an entry that is not an origin, naming the variable and the entry", () => {
  const bad = [
    "notanorigin",
    "app.example",
    "app.example/path",
    "https://app.example/path",
    "https://app.example?x=1",
    "https://app.example/#top",
    "https://user@app.example",
    "ftp://x.example",
    "*",
  ];
  for (const entry of bad) {
    assert.throws(
      () => parseOrigins("X_ORIGINS", `https://ok.example,${entry}`),
      (e: unknown) =>
        e instanceof SyntaxError &&
        e.message ===
          `X_ORIGINS entries must be origins such as https://app.example, got ${
            JSON.stringify(entry)
          }`,
      entry,
    );
  }
});
