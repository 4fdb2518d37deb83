import assert from "node:assert/strict";
import { COLLECTION_POST } from "../../shared/nsid.ts";
import { didOf, postOp, uriOf } from "../_fixtures.ts";
import {
  captureLogRecords,
  endBackendTests,
  forEachBackend,
  makeCommit,
  openBackendContext,
  openTestContext,
} from "../_test_helpers.ts";
import { INGEST_COMMIT_PATH, ingestRoutes, MAX_PUSH_BODY_BYTES } from "./ingest.ts";

const ALICE = didOf("alice");
const SECRET = "s3cret-shared-with-the-account-host";
const commit = makeCommit(1, [postOp(ALICE, "3kaaaaaaaaaa2", "pushed")], {
  handle: "Alice.Test",
});

function post(
  app: { request: (p: string, i: RequestInit) => Response | Promise<Response> },
  body: BodyInit,
  auth?: string,
) {
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (auth !== undefined) headers.authorization = auth;
  return app.request(INGEST_COMMIT_PATH, { method: "POST", headers, body });
}

forEachBackend(
  "push with the right secret applies the commit and answers {ok, applied} (spec 6.4)",
  async (backend) => {
    await using ctx = await openBackendContext(backend, { env: { APPVIEW_INGEST_SECRET: SECRET } });
    const res = await post(ingestRoutes(ctx), JSON.stringify(commit.push()), `Bearer ${SECRET}`);
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), { ok: true, applied: 2 });
    const [row] = await ctx.rows(
      "SELECT handle, text FROM posts WHERE uri = ?",
      uriOf(ALICE, COLLECTION_POST, "3kaaaaaaaaaa2"),
    );
    assert.deepEqual({ ...row }, { handle: "alice.test", text: "pushed" });
  },
);

forEachBackend("push accepts the bearer scheme in any case", async (backend) => {
  await using ctx = await openBackendContext(backend, { env: { APPVIEW_INGEST_SECRET: SECRET } });
  const res = await post(ingestRoutes(ctx), JSON.stringify(commit.push()), `bEaReR ${SECRET}`);
  assert.equal(res.status, 200);
});

forEachBackend(
  "push without or with a wrong secret is 401 and applies nothing",
  async (backend) => {
    await using ctx = await openBackendContext(backend, { env: { APPVIEW_INGEST_SECRET: SECRET } });
    const app = ingestRoutes(ctx);
    const cases: [string | undefined, string][] = [
      [undefined, "AuthMissing"],
      ["", "AuthMissing"],
      ["Basic abc", "AuthMissing"],
      ["Bearer", "AuthMissing"],
      ["Bearer wrong", "AuthInvalid"],
      [`Bearer ${SECRET}x`, "AuthInvalid"],
      [`Bearer ${SECRET.slice(0, -1)}`, "AuthInvalid"],
    ];
    for (const [auth, error] of cases) {
      const res = await post(app, JSON.stringify(commit.push()), auth);
      assert.equal(res.status, 401, String(auth));
      assert.equal((await res.json()).error, error, String(auth));
    }
    assert.deepEqual(await ctx.rows("SELECT count(*) AS n FROM posts"), [{ n: 0 }]);
  },
);

forEachBackend(
  "push is accepted without a header when no secret is configured (spec 5.3)",
  async (backend) => {
    await using ctx = await openBackendContext(backend);
    assert.equal(ctx.config.ingestSecret, null);
    const res = await post(ingestRoutes(ctx), JSON.stringify(commit.push()));
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), { ok: true, applied: 2 });
  },
);

// The push's HTTP checks, made before the index is reached: one backend.
Deno.test("push over the body limit is 413, by declared length and by streamed length", async () => {
  using ctx = openTestContext({ env: { APPVIEW_INGEST_SECRET: SECRET } });
  const app = ingestRoutes(ctx);
  const big = JSON.stringify({ pad: "x".repeat(MAX_PUSH_BODY_BYTES) });
  const declared = await post(app, big, `Bearer ${SECRET}`);
  assert.equal(declared.status, 413);
  assert.deepEqual(await declared.json(), {
    error: "PayloadTooLarge",
    message: `Request body is larger than ${MAX_PUSH_BODY_BYTES} bytes`,
  });
  const chunk = new Uint8Array(256 * 1024).fill(0x20);
  let sent = 0;
  const stream = new ReadableStream<Uint8Array>({
    pull(c) {
      if (sent >= MAX_PUSH_BODY_BYTES + chunk.length) return c.close();
      sent += chunk.length;
      c.enqueue(chunk);
    },
  });
  const streamed = await post(app, stream, `Bearer ${SECRET}`);
  assert.equal(streamed.status, 413);
  await streamed.body?.cancel();
});

// The push's HTTP checks, made before the index is reached: one backend.
Deno.test("push checks the secret before reading the body", async () => {
  using ctx = openTestContext({ env: { APPVIEW_INGEST_SECRET: SECRET } });
  const res = await post(ingestRoutes(ctx), "x".repeat(MAX_PUSH_BODY_BYTES + 1), "Bearer nope");
  assert.equal(res.status, 401);
});

forEachBackend(
  "push rejects malformed JSON and malformed payloads with 400 and a log line",
  async (backend) => {
    const { log, lines } = captureLogRecords();
    await using ctx = await openBackendContext(backend, { log });
    const app = ingestRoutes(ctx);
    const bodies: [BodyInit, string][] = [
      ["{not json", "Request body is not valid JSON"],
      ["", "Request body is not valid JSON"],
      [new Uint8Array([0xff, 0xfe, 0x00, 0x7b]), "Request body is not valid JSON"],
      [crypto.getRandomValues(new Uint8Array(64)), ""],
      ["null", "Push payload is not an object: null"],
      [JSON.stringify({ ...commit.push(), did: "nope" }), 'Invalid did: "nope"'],
      [
        JSON.stringify({ ...commit.push(), ops: Array(201).fill({}) }),
        "Too many ops: 201 (max 200)",
      ],
    ];
    for (const [body, message] of bodies) {
      const res = await post(app, body);
      assert.equal(res.status, 400);
      const json = await res.json();
      assert.equal(json.error, "InvalidRequest");
      if (message !== "") assert.equal(json.message, message);
      else assert.match(json.message, /./);
    }
    assert.equal(
      lines.filter((l) => l.level === "warn" && /^Push rejected/.test(String(l.msg))).length,
      bodies.length,
    );
    // A good push still works afterwards.
    const ok = await post(app, JSON.stringify(commit.push()));
    assert.equal(ok.status, 200);
  },
);

endBackendTests();
