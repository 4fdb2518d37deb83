// Network text becomes text and http(s) links only (issue 35: "only http:/https: URLs become
// links"); the browser test checks the rendering, these check the splitting rules.

import assert from "node:assert/strict";
import { safeHref, splitLinks } from "./text.ts";

Deno.test("splitLinks makes links of http and https URLs only, without trailing punctuation", () => {
  assert.deepEqual(splitLinks("see https://a.example/x?y=1, and http://b.example."), [
    { text: "see " },
    { text: "https://a.example/x?y=1", href: "https://a.example/x?y=1" },
    { text: ", and " },
    { text: "http://b.example", href: "http://b.example/" },
    { text: "." },
  ]);
});

Deno.test("splitLinks leaves markup and other schemes as plain text", () => {
  const hostile =
    `<a href="javascript:alert(1)">x</a> javascript:alert(1) data:text/html,<b>x</b> ftp://f.example`;
  assert.deepEqual(splitLinks(hostile), [{ text: hostile }]);
  assert.deepEqual(splitLinks(""), []);
});

Deno.test("safeHref accepts http(s) URLs and refuses every other scheme or a malformed value", () => {
  assert.equal(safeHref("https://a.example/p"), "https://a.example/p");
  assert.equal(safeHref("HTTP://A.example"), "http://a.example/");
  for (
    const bad of [
      "javascript:alert(1)",
      " javascript:alert(1)",
      "data:,x",
      "vbscript:x",
      "//a.example",
      "not a url",
      "",
    ]
  ) {
    assert.equal(safeHref(bad), null, bad);
  }
});
