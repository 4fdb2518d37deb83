// The built web app read once at startup (issue 35): the page with its configuration filled in,
// the content-named assets, and the not-built and broken-build states.

import assert from "node:assert/strict";
import { makeTempDir } from "../../runtime/_test_helpers.ts";
import { captureLogRecords } from "../_test_helpers.ts";
import { loadWebFiles, scriptJson } from "./web_files.ts";

const PAGE = `<!doctype html><link rel="stylesheet" href="/assets/app-abc.css">
<script type="module" src="/assets/app-abc.js"></script>
<script id="app-config" type="application/json">{{CONFIG}}</script>
<div id="root"></div>
`;
const JS = "console.log('app');\n";
const CSS = "body { margin: 0; }\n";
const JS_TYPE = "text/javascript; charset=utf-8";
const CSS_TYPE = "text/css; charset=utf-8";
const encoder = new TextEncoder();

/** Writes a built-like web app into `dir`: the page, two assets and files the loader skips. */
async function writeBuild(dir: string, page = PAGE): Promise<void> {
  await Deno.mkdir(`${dir}/assets/chunks`, { recursive: true });
  await Deno.writeTextFile(`${dir}/index.html`, page);
  await Deno.writeTextFile(`${dir}/assets/app-abc.js`, JS);
  await Deno.writeTextFile(`${dir}/assets/app-abc.css`, CSS);
  await Deno.writeTextFile(`${dir}/assets/notes.txt`, "not an asset type");
  await Deno.writeTextFile(`${dir}/assets/chunks/inner.js`, "in a subfolder");
}

Deno.test("loadWebFiles fills the page's {{CONFIG}} with the configuration as script-safe JSON", async () => {
  await using dir = await makeTempDir();
  await writeBuild(dir.path);
  const { log, lines } = captureLogRecords();
  const files = await loadWebFiles(dir.path, { pdsUrl: "https://pds.example.com" }, log);
  assert.ok(files !== null);
  assert.equal(
    files.page,
    PAGE.replace("{{CONFIG}}", '{"pdsUrl":"https://pds.example.com"}'),
  );
  assert.deepEqual(lines, []);
});

Deno.test("loadWebFiles keeps the assets of known types only, not other files or subfolders", async () => {
  await using dir = await makeTempDir();
  await writeBuild(dir.path);
  const files = await loadWebFiles(
    `${dir.path}/`,
    { pdsUrl: "http://localhost:2583" },
    captureLogRecords().log,
  );
  assert.ok(files !== null);
  assert.deepEqual([...files.assets.keys()].sort(), ["app-abc.css", "app-abc.js"]);
  assert.deepEqual(files.assets.get("app-abc.js"), {
    bytes: encoder.encode(JS),
    type: JS_TYPE,
  });
  assert.deepEqual(files.assets.get("app-abc.css"), {
    bytes: encoder.encode(CSS),
    type: CSS_TYPE,
  });
});

Deno.test("loadWebFiles skips names whose end only looks like a type: no dot, or an Object member", async () => {
  await using dir = await makeTempDir();
  await writeBuild(dir.path);
  for (const name of ["js", "css", "app.constructor", "app.__proto__", "app.toString"]) {
    await Deno.writeTextFile(`${dir.path}/assets/${name}`, "x");
  }
  const files = await loadWebFiles(
    dir.path,
    { pdsUrl: "http://localhost:2583" },
    captureLogRecords().log,
  );
  assert.ok(files !== null);
  assert.deepEqual([...files.assets.keys()].sort(), ["app-abc.css", "app-abc.js"]);
});

Deno.test("loadWebFiles inserts the configuration verbatim, $ replacement patterns included", async () => {
  await using dir = await makeTempDir();
  await writeBuild(dir.path);
  // String.prototype.replace would read `$&`, `$'` and `` $` `` in a replacement string.
  const pdsUrl = "https://pds.example.com/$&$'$`$$";
  const files = await loadWebFiles(dir.path, { pdsUrl }, captureLogRecords().log);
  assert.ok(files !== null);
  assert.equal(files.page, PAGE.replace("{{CONFIG}}", () => JSON.stringify({ pdsUrl })));
});

Deno.test("loadWebFiles without index.html answers null with one warning naming the build task", async () => {
  await using dir = await makeTempDir();
  const { log, lines } = captureLogRecords();
  assert.equal(await loadWebFiles(dir.path, { pdsUrl: "http://localhost:2583" }, log), null);
  assert.equal(lines.length, 1);
  const { time: _time, ...line } = lines[0];
  assert.deepEqual(line, {
    level: "warn",
    component: "test",
    msg: "The web app is not built: / answers 503 until `deno task web:build` has run",
    dir: dir.path,
  });
});

Deno.test("loadWebFiles refuses an index.html without the {{CONFIG}} placeholder, naming the file", async () => {
  await using dir = await makeTempDir();
  await writeBuild(dir.path, PAGE.replace("{{CONFIG}}", "{}"));
  await assert.rejects(
    loadWebFiles(dir.path, { pdsUrl: "http://localhost:2583" }, captureLogRecords().log),
    {
      name: "Error",
      message: `${dir.path}/index.html has no {{CONFIG}} placeholder: rebuild the web app`,
    },
  );
});

Deno.test("scriptJson leaves no < and no line separator in the text, and parses back to the value", () => {
  const value = { pdsUrl: "https://pds.example/</script><script>alert(1)</script>\u2028\u2029" };
  const text = scriptJson(value);
  assert.equal(text.includes("<"), false);
  assert.equal(text.includes("\u2028"), false);
  assert.equal(text.includes("\u2029"), false);
  assert.equal(
    text,
    '{"pdsUrl":"https://pds.example/\\u003c/script>\\u003cscript>alert(1)\\u003c/script>\\u2028\\u2029"}',
  );
  assert.deepEqual(JSON.parse(text), value);
});
