// `GET /xrpc/_health` (issue 36 item 13): the reference account host's health route, which a
// container health check or load balancer polls.

import assert from "node:assert/strict";
import { SERVICE_VERSION } from "../../shared/version.ts";
import { createPdsApp } from "../app.ts";
import { createTestApp, xrpcGet } from "../_test_helpers.ts";

Deno.test("GET /xrpc/_health answers 200 with the version, uncached (issue 36)", async () => {
  await using t = await createTestApp();
  const res = await xrpcGet(t.app, "_health");
  assert.equal(res.status, 200);
  assert.equal(res.headers.get("cache-control"), "no-store");
  assert.deepEqual(await res.json(), { version: SERVICE_VERSION });
  assert.match(SERVICE_VERSION, /^\d+\.\d+\.\d+$/);
});

Deno.test("GET /xrpc/_health answers 503 with the version when the store cannot be read, and logs why (issue 36)", async () => {
  await using t = await createTestApp();
  const kv = {
    get: () => Promise.reject(new Error("database is locked")),
  } as unknown as Deno.Kv;
  const app = createPdsApp({ ...t.ctx, kv });
  const res = await xrpcGet(app, "_health");
  assert.equal(res.status, 503);
  assert.deepEqual(await res.json(), { version: SERVICE_VERSION, error: "Service Unavailable" });
  const logged = t.lines.map((l) => JSON.parse(l)).filter((l) => l.msg === "health check failed");
  assert.equal(logged.length, 1);
  assert.equal(logged[0].level, "error");
  assert.match(JSON.stringify(logged[0]), /database is locked/);
});
