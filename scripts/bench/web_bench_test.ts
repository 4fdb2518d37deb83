/**
 * The plumbing of `web_bench.ts` that needs no browser or index: which files of the built page
 * count as its first screen, and the gzip the size budget is measured with. No timings.
 */

import assert from "node:assert/strict";
import { firstScreenAssets, gzip } from "./web_bench.ts";

async function gunzip(bytes: Uint8Array): Promise<Uint8Array> {
  const stream = new Blob([bytes as Uint8Array<ArrayBuffer>]).stream()
    .pipeThrough(new DecompressionStream("gzip"));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

Deno.test("firstScreenAssets finds the script and style sheet web:build writes into the page", async () => {
  // The page as `scripts/web_build.ts` writes it: the template with the content-named assets.
  const template = await Deno.readTextFile(new URL("../../web/index.html", import.meta.url));
  const html = template.replace("{{JS}}", "app-0123456789ab.js")
    .replace("{{CSS}}", "app-ba9876543210.css");
  assert.deepEqual(firstScreenAssets(html), {
    scripts: ["assets/app-0123456789ab.js"],
    styles: ["assets/app-ba9876543210.css"],
  });
});

Deno.test("firstScreenAssets counts every script the page loads, and refuses a page with none", () => {
  const html = '<link rel="stylesheet" href="/assets/a.css">' +
    '<script type="module" src="/assets/a.js"></script><script src="/assets/b.js"></script>';
  assert.deepEqual(firstScreenAssets(html), {
    scripts: ["assets/a.js", "assets/b.js"],
    styles: ["assets/a.css"],
  });
  assert.throws(() => firstScreenAssets("<p>no scripts</p>"), {
    name: "Error",
    message: "index.html loads no /assets/ script",
  });
});

Deno.test("gzip writes a gzip stream that inflates back to its input", async () => {
  const input = new TextEncoder().encode("const x = 1;\n".repeat(10_000));
  const packed = await gzip(input);
  assert.deepEqual([...packed.subarray(0, 3)], [0x1f, 0x8b, 0x08]); // gzip magic, deflate
  assert.ok(packed.length < 1_000, `130,000 repetitive bytes gzipped to ${packed.length}`);
  assert.deepEqual(await gunzip(packed), input);
});
