// The web app served by the index (issue 35): the page on the app's screen paths with its
// security headers, content-named assets cached for good, the not-built state, and the API
// answering as before beside it.

import assert from "node:assert/strict";
import { makeTempDir } from "../../runtime/_test_helpers.ts";
import { createAppviewApp } from "../app.ts";
import { loadAppviewConfig } from "../config.ts";
import { captureLogRecords, FIXED_NOW, openTestContext } from "../_test_helpers.ts";
import { startAppview } from "../server.ts";
import type { WebFiles } from "../web/web_files.ts";
import { contentSecurityPolicy, type WebRoutesOptions } from "./web.ts";

const PDS_URL = "https://pds.example.com:8443/base";
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; " +
  "img-src 'self' blob: data: https://pds.example.com:8443; " +
  "connect-src 'self' https://pds.example.com:8443; font-src 'self'; manifest-src 'self'; " +
  "base-uri 'none'; form-action 'self'; frame-ancestors 'none'";
const PAGE = '<!doctype html><script id="app-config" type="application/json">' +
  '{"pdsUrl":"https://pds.example.com:8443/base"}</script><div id="root"></div>';
const JS = new TextEncoder().encode("console.log('app');\n");
const PNG = new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0xff]);
const FILES: WebFiles = {
  page: PAGE,
  assets: new Map([
    ["app-abc.js", { bytes: JS, type: "text/javascript; charset=utf-8" }],
    ["icon-abc.png", { bytes: PNG, type: "image/png" }],
  ]),
};
const SCREEN_PATHS = [
  "/",
  "/login",
  "/signup",
  "/search",
  "/notifications",
  "/settings/account",
  "/profile/alice.test",
  "/profile/did:plc:abc/post/3k2a",
];

/** The index's app over an in-memory database, with `web` when given. */
function openApp(web?: WebRoutesOptions) {
  const ctx = openTestContext({ now: FIXED_NOW });
  const app = createAppviewApp(ctx, { verifier: null, web });
  return { app, [Symbol.dispose]: () => ctx[Symbol.dispose]() };
}

Deno.test("contentSecurityPolicy allows scripts from this origin only and the account host's origin for images and network", () => {
  const csp = contentSecurityPolicy(PDS_URL);
  assert.equal(csp, CSP);
  assert.equal(csp.includes("unsafe-inline"), false);
  assert.equal(csp.includes("unsafe-eval"), false);
});

Deno.test("the app's screen paths answer the page with its security headers", async () => {
  using index = openApp({ files: FILES, pdsUrl: PDS_URL });
  for (const path of SCREEN_PATHS) {
    const res = await index.app.request(path);
    assert.equal(res.status, 200, path);
    assert.equal(res.headers.get("content-type"), "text/html; charset=utf-8", path);
    assert.equal(res.headers.get("cache-control"), "no-cache", path);
    assert.equal(res.headers.get("content-security-policy"), CSP, path);
    assert.equal(res.headers.get("x-content-type-options"), "nosniff", path);
    assert.equal(res.headers.get("x-frame-options"), "DENY", path);
    assert.equal(res.headers.get("referrer-policy"), "same-origin", path);
    assert.equal(await res.text(), PAGE, path);
  }
});

Deno.test("an asset answers its bytes and type, cached as immutable, every time", async () => {
  using index = openApp({ files: FILES, pdsUrl: PDS_URL });
  for (
    const [name, bytes, type] of [
      ["app-abc.js", JS, "text/javascript; charset=utf-8"],
      ["icon-abc.png", PNG, "image/png"],
      ["app-abc.js", JS, "text/javascript; charset=utf-8"],
    ] as const
  ) {
    const res = await index.app.request(`/assets/${name}`);
    assert.equal(res.status, 200, name);
    assert.equal(res.headers.get("content-type"), type, name);
    assert.equal(res.headers.get("cache-control"), "public, max-age=31536000, immutable", name);
    assert.equal(res.headers.get("x-content-type-options"), "nosniff", name);
    assert.deepEqual(new Uint8Array(await res.arrayBuffer()), bytes, name);
  }
});

Deno.test("an unknown asset answers 404 NotFound as JSON", async () => {
  using index = openApp({ files: FILES, pdsUrl: PDS_URL });
  for (
    const [path, message] of [
      ["/assets/app-old.js", "No asset: app-old.js"],
      ["/assets/..%2Findex.html", "No asset: ../index.html"],
    ]
  ) {
    const res = await index.app.request(path);
    assert.equal(res.status, 404, path);
    assert.equal(res.headers.get("content-type"), "application/json", path);
    assert.deepEqual(await res.json(), { error: "NotFound", message }, path);
  }
});

Deno.test("beside the web app the API, /healthz and unknown paths answer as with the API alone", async () => {
  using web = openApp({ files: FILES, pdsUrl: PDS_URL });
  using api = openApp();
  const search = await web.app.request("/api/search?q=x");
  assert.equal(search.status, 200);
  assert.equal(search.headers.get("content-type"), "application/json");
  assert.deepEqual(await search.json(), { posts: [], q: "x", cursor: null });
  // Paths that only start like a screen's (`/loginx`, `/profiles`) are not the app's.
  for (const path of ["/healthz", "/api/search?q=x", "/nope", "/loginx", "/profiles", "/api/x"]) {
    const [a, b] = [await web.app.request(path), await api.app.request(path)];
    assert.equal(a.status, b.status, path);
    assert.equal(a.headers.get("content-type"), b.headers.get("content-type"), path);
    assert.equal(a.headers.get("content-security-policy"), null, path);
    assert.deepEqual(await a.json(), await b.json(), path);
  }
  const nope = await web.app.request("/nope");
  assert.equal(nope.status, 404);
  assert.deepEqual(await nope.json(), { error: "NotFound", message: "No route: GET /nope" });
});

Deno.test("POST on a screen path answers 405 MethodNotAllowed, allowing GET", async () => {
  // The app's notFound handler answers 405 when some route takes the path with another method:
  // the page routes are GET routes, so `/` and `/profile/...` now exist, for GET only.
  using index = openApp({ files: FILES, pdsUrl: PDS_URL });
  for (const path of ["/", "/profile/alice.test"]) {
    const res = await index.app.request(path, { method: "POST", body: "x" });
    assert.equal(res.status, 405, path);
    assert.equal(res.headers.get("allow"), "GET", path);
    assert.deepEqual(await res.json(), {
      error: "MethodNotAllowed",
      message: `Method POST is not allowed on ${path}; use GET`,
    }, path);
  }
});

Deno.test("when the web app is not built its screen paths answer 503 naming the build task", async () => {
  using index = openApp({ files: null, pdsUrl: PDS_URL });
  for (const path of SCREEN_PATHS) {
    const res = await index.app.request(path);
    assert.equal(res.status, 503, path);
    assert.equal(res.headers.get("content-type"), "text/html; charset=utf-8", path);
    assert.equal(res.headers.get("cache-control"), "no-store", path);
    const text = await res.text();
    assert.ok(text.includes("Run <code>deno task web:build</code>"), path);
  }
  const asset = await index.app.request("/assets/x.js");
  assert.equal(asset.status, 404);
  assert.deepEqual(await asset.json(), { error: "NotFound", message: "No asset: x.js" });
});

Deno.test("without the web option / answers the JSON 404 of the API alone", async () => {
  using index = openApp();
  for (const path of ["/", "/login", "/assets/app-abc.js"]) {
    const res = await index.app.request(path);
    assert.equal(res.status, 404, path);
    assert.deepEqual(
      await res.json(),
      { error: "NotFound", message: `No route: GET ${path}` },
      path,
    );
  }
});

Deno.test("startAppview serves the page from APPVIEW_WEB_DIR with the account host's public URL", async () => {
  await using dir = await makeTempDir();
  const web = `${dir.path}/dist`;
  await Deno.mkdir(`${web}/assets`, { recursive: true });
  await Deno.writeTextFile(
    `${web}/index.html`,
    '<!doctype html><script id="app-config" type="application/json">{{CONFIG}}</script>',
  );
  await Deno.writeTextFile(`${web}/assets/app-abc.js`, "console.log('app');\n");
  const { log, lines } = captureLogRecords();
  await using appview = await startAppview({
    config: loadAppviewConfig({
      DATA_DIR: `${dir.path}/data`,
      APPVIEW_PORT: "0",
      APPVIEW_WEB_DIR: web,
      PDS_PUBLIC_URL: "http://127.0.0.1:9",
    }),
    log,
    components: { localConsumer: false, publicConsumer: false, handleSync: false },
  });
  assert.ok(appview.url !== null);
  const res = await fetch(`${appview.url}/`);
  assert.equal(res.status, 200);
  assert.equal(
    res.headers.get("content-security-policy"),
    CSP.replaceAll("https://pds.example.com:8443", "http://127.0.0.1:9"),
  );
  assert.equal(
    await res.text(),
    '<!doctype html><script id="app-config" type="application/json">' +
      '{"pdsUrl":"http://127.0.0.1:9"}</script>',
  );
  const asset = await fetch(`${appview.url}/assets/app-abc.js`);
  assert.equal(asset.status, 200);
  assert.equal(await asset.text(), "console.log('app');\n");
  assert.deepEqual(lines.filter((l) => l.component === "test.web"), []);
});
