// The XRPC error mapping (docs/protocol.md 1.2-1.3; docs/architecture.md 6.11).

import assert from "node:assert/strict";
import { Hono } from "hono";
import {
  captureLogger,
  createTestApp,
  startTestServer,
  xrpcGet,
  xrpcPost,
} from "../_test_helpers.ts";
import { handleXrpcError, XrpcError } from "./errors.ts";

Deno.test("an unknown XRPC method answers 501 MethodNotImplemented", async () => {
  await using t = await createTestApp();
  const res = await xrpcGet(t.app, "com.example.nothing");
  assert.equal(res.status, 501);
  assert.deepEqual(await res.json(), {
    error: "MethodNotImplemented",
    message: "Method not implemented: com.example.nothing",
  });
});

Deno.test("a known XRPC method called with the wrong verb answers 400 InvalidRequest", async () => {
  await using t = await createTestApp();
  const get = await xrpcGet(t.app, "com.atproto.server.createSession");
  assert.equal(get.status, 400);
  assert.deepEqual(await get.json(), {
    error: "InvalidRequest",
    message: "Incorrect HTTP method (GET) expected POST",
  });
  const post = await xrpcPost(t.app, "com.atproto.server.describeServer", {});
  assert.equal(post.status, 400);
  assert.deepEqual(await post.json(), {
    error: "InvalidRequest",
    message: "Incorrect HTTP method (POST) expected GET",
  });
});

Deno.test("a path outside /xrpc answers 404 NotFound as JSON", async () => {
  await using t = await createTestApp();
  const res = await t.app.request("/nothing/here");
  assert.equal(res.status, 404);
  assert.deepEqual(await res.json(), { error: "NotFound", message: "Not found: /nothing/here" });
});

Deno.test("a JSON body over 1 MB answers 413 PayloadTooLarge, also when streamed without a length", async () => {
  await using s = await startTestServer();
  const big = JSON.stringify({ identifier: "x".repeat(1_000_001), password: "p" });
  const res = await fetch(`${s.url}/xrpc/com.atproto.server.createSession`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: big,
  });
  assert.equal(res.status, 413);
  assert.deepEqual(await res.json(), {
    error: "PayloadTooLarge",
    message: "Request body is larger than 1000000 bytes",
  });
  const bytes = new TextEncoder().encode(big);
  const stream = new ReadableStream<Uint8Array>({
    start(controller) {
      for (let i = 0; i < bytes.length; i += 65536) controller.enqueue(bytes.slice(i, i + 65536));
      controller.close();
    },
  });
  const chunked = await fetch(`${s.url}/xrpc/com.atproto.server.createSession`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: stream,
  });
  assert.equal(chunked.status, 413);
  assert.equal((await chunked.json()).error, "PayloadTooLarge");
});

Deno.test("a body that is not a JSON object answers 400 InvalidRequest", async () => {
  await using t = await createTestApp();
  for (
    const [body, message] of [
      ["{not json", "Request body is not valid JSON"],
      ["[1,2]", "Request body must be a JSON object"],
    ]
  ) {
    const res = await t.app.request("/xrpc/com.atproto.server.createSession", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body,
    });
    assert.equal(res.status, 400);
    assert.deepEqual(await res.json(), { error: "InvalidRequest", message });
  }
});

Deno.test("an unexpected error is logged and answered with a generic 500 that leaks nothing", async () => {
  const { log, lines } = captureLogger();
  const app = new Hono();
  app.onError(handleXrpcError(log));
  app.get("/boom", () => {
    throw new Error("secret internal detail");
  });
  app.get("/xrpc-error", () => {
    throw new XrpcError(429, "RateLimitExceeded", "Slow down", { "Retry-After": "5" });
  });
  const res = await app.request("/boom");
  assert.equal(res.status, 500);
  assert.deepEqual(await res.json(), {
    error: "InternalServerError",
    message: "Internal server error",
  });
  const logged = lines.map((l) => JSON.parse(l));
  assert.equal(logged.length, 1);
  assert.equal(logged[0].level, "error");
  assert.deepEqual(logged[0].err, { name: "Error", message: "secret internal detail" });

  const limited = await app.request("/xrpc-error");
  assert.equal(limited.status, 429);
  assert.equal(limited.headers.get("retry-after"), "5");
  assert.deepEqual(await limited.json(), { error: "RateLimitExceeded", message: "Slow down" });
});
