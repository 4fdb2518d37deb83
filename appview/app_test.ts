// Headers every response of the index's HTTP application carries (issue 36 item 8).

import assert from "node:assert/strict";
import { createAppviewApp } from "./app.ts";
import { FIXED_NOW, openTestContext } from "./_test_helpers.ts";
import type { WebFiles } from "./web/web_files.ts";

const FILES: WebFiles = {
  page: "<!doctype html><div id=root></div>",
  assets: new Map([["app-abc.js", { bytes: new Uint8Array([1]), type: "text/javascript" }]]),
};

Deno.test("every response of the index carries X-Content-Type-Options: nosniff exactly once (issue 36)", async () => {
  using ctx = openTestContext({
    now: FIXED_NOW,
    env: { APPVIEW_INGEST_SECRET: "ingest-secret-0123456789" },
  });
  const app = createAppviewApp(ctx, {
    verifier: null,
    web: { files: FILES, pdsUrl: "http://localhost:2583" },
  });
  const cases: [string, RequestInit, number][] = [
    ["/healthz", {}, 200],
    ["/api/search?q=hello", {}, 200],
    ["/api/profile/alice.test", {}, 200],
    ["/api/thread", {}, 400],
    ["/api/timeline/home?did=did:plc:abc", {}, 503],
    ["/api/notifications/seen", { method: "POST", body: "x".repeat(20_000) }, 413],
    ["/internal/ingest-commit", { method: "POST", body: "{}" }, 401],
    ["/healthz", { method: "POST" }, 405],
    ["/no/such/route", {}, 404],
    [
      "/api/search",
      {
        method: "OPTIONS",
        headers: { origin: "https://a.example", "access-control-request-method": "GET" },
      },
      204,
    ],
    ["/", {}, 200],
    ["/assets/app-abc.js", {}, 200],
    ["/assets/missing.js", {}, 404],
  ];
  for (const [path, init, status] of cases) {
    const res = await app.request(path, init);
    const what = `${init.method ?? "GET"} ${path}`;
    assert.equal(res.status, status, what);
    assert.equal(res.headers.get("x-content-type-options"), "nosniff", what);
    await res.body?.cancel();
  }
});
