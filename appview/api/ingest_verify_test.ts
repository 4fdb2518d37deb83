// A push is as trustworthy as a stream frame (issue 36 item 5): the holder of the ingest secret
// cannot index what the account's signed repository does not hold, delete what it does, or move a
// handle; failed secret checks are logged per address, rate limited, without the secret.

import assert from "node:assert/strict";
import { COLLECTION_POST } from "../../shared/nsid.ts";
import { cidOf, deleteOp, didOf, likeOp, postOp, uriOf } from "../_fixtures.ts";
import {
  type BackendContext,
  captureLogRecords,
  endBackendTests,
  forEachBackend,
  makeCommit,
  openBackendContext,
  openTestContext,
  revOf,
  TestAccountDirectory,
} from "../_test_helpers.ts";
import type { HostedAccount } from "../ingest/sources/account_directory.ts";
import { serveOnPort0 } from "../../runtime/_test_helpers.ts";
import { AddressLogLimiter } from "./address_log_limiter.ts";
import { INGEST_COMMIT_PATH, ingestRoutes, LOG_SECRET_REFUSED } from "./ingest.ts";

const ALICE = didOf("alice");
const BOB = didOf("bob");
const SECRET = "s3cret-shared-with-the-account-host";
const POST_RKEY = "3kaaaaaaaaaa2";
const POST_URI = uriOf(ALICE, COLLECTION_POST, POST_RKEY);

type App = ReturnType<typeof ingestRoutes>;

function push(app: App, body: unknown, opts: { auth?: string; address?: string } = {}) {
  const headers: Record<string, string> = { "content-type": "application/json" };
  headers.authorization = opts.auth ?? `Bearer ${SECRET}`;
  const env = { remoteAddr: { hostname: opts.address ?? "192.0.2.1", port: 40000 } };
  return app.request(INGEST_COMMIT_PATH, {
    method: "POST",
    headers,
    body: JSON.stringify(body),
  }, env as never);
}

async function count(ctx: BackendContext, table: string): Promise<number> {
  const [{ n }] = await ctx.rows<{ n: number }>(`SELECT count(*) AS n FROM ${table}`);
  return n;
}

/** Alice's genuine first commit: one post. */
const genuinePost = makeCommit(1, [postOp(ALICE, POST_RKEY, "real")], {
  handle: "alice.test",
  since: null,
});

forEachBackend(
  "a push with a forged post (right secret, record not in the signed tree) is 400 InvalidCommit and indexes nothing",
  async (backend) => {
    await using ctx = await openBackendContext(backend, { env: { APPVIEW_INGEST_SECRET: SECRET } });
    const app = ingestRoutes(ctx);
    const forged = genuinePost.push();
    (forged.ops as unknown[]).push({
      action: "create",
      collection: COLLECTION_POST,
      rkey: "3kforgedpost2",
      cid: cidOf("forged"),
      record: { $type: COLLECTION_POST, text: "forged", createdAt: "2024-05-01T12:00:00.000Z" },
    });
    const res = await push(app, forged);
    assert.equal(res.status, 400);
    const body = await res.json();
    assert.equal(body.error, "InvalidCommit");
    assert.match(body.message, /^Commit does not hold app\.social\.feed\.post\/3kforgedpost2 at /);
    assert.equal(await count(ctx, "posts"), 0);
    assert.equal(await count(ctx, "profiles"), 0);
  },
);

forEachBackend(
  "a push without the commit's blocks (the old body alone) is 400 InvalidCommit and indexes nothing",
  async (backend) => {
    await using ctx = await openBackendContext(backend, { env: { APPVIEW_INGEST_SECRET: SECRET } });
    const { blocks: _, ...bare } = genuinePost.push();
    const res = await push(ingestRoutes(ctx), bare);
    assert.equal(res.status, 400);
    assert.deepEqual(await res.json(), {
      error: "InvalidCommit",
      message: "Push carries no commit blocks",
    });
    assert.equal(await count(ctx, "posts"), 0);
  },
);

forEachBackend(
  "a pushed record body that differs from the signed block is not what gets indexed",
  async (backend) => {
    await using ctx = await openBackendContext(backend, { env: { APPVIEW_INGEST_SECRET: SECRET } });
    const body = genuinePost.push();
    const op = (body.ops as { record: { text: string } }[])[0];
    op.record.text = "edited in transit";
    const res = await push(ingestRoutes(ctx), body);
    assert.equal(res.status, 200);
    const [row] = await ctx.rows("SELECT text FROM posts WHERE uri = ?", POST_URI);
    assert.equal(row?.text, "real");
  },
);

forEachBackend(
  "a push whose commit is not signed by the account's key is 400 InvalidCommit",
  async (backend) => {
    const accounts = new (class extends TestAccountDirectory {
      // The account host says Alice's key is Bob's: Alice's real signature cannot verify.
      override lookup(did: string): Promise<HostedAccount> {
        return super.lookup(did === ALICE ? BOB : did).then((a) => ({ ...a, did }));
      }
    })();
    await using ctx = await openBackendContext(backend, { env: { APPVIEW_INGEST_SECRET: SECRET } });
    const res = await push(ingestRoutes(ctx, { accounts }), genuinePost.push());
    assert.equal(res.status, 400);
    assert.deepEqual(await res.json(), {
      error: "InvalidCommit",
      message: `Commit signature does not verify against the key of ${ALICE}`,
    });
    assert.equal(await count(ctx, "posts"), 0);
  },
);

forEachBackend(
  "a push of one account's signed commit under another DID is 400 InvalidCommit",
  async (backend) => {
    await using ctx = await openBackendContext(backend, { env: { APPVIEW_INGEST_SECRET: SECRET } });
    const res = await push(ingestRoutes(ctx), { ...genuinePost.push(), did: BOB, handle: null });
    assert.equal(res.status, 400);
    assert.deepEqual(await res.json(), {
      error: "InvalidCommit",
      message: `Commit is signed for ${ALICE}, not ${BOB}`,
    });
    assert.equal(await count(ctx, "posts"), 0);
  },
);

forEachBackend(
  "a forged delete of a real post is 400 InvalidCommit and the post stays",
  async (backend) => {
    await using ctx = await openBackendContext(backend, { env: { APPVIEW_INGEST_SECRET: SECRET } });
    const app = ingestRoutes(ctx);
    assert.equal((await push(app, genuinePost.push())).status, 200);
    // Alice's genuine next commit (a like), with a delete of her post added to its ops.
    const like = makeCommit(2, [
      likeOp(ALICE, "3klikelikeli2", POST_URI),
      postOp(ALICE, POST_RKEY, "real"), // the tree of this commit still holds the post
    ], { handle: "alice.test", since: revOf(1) });
    const body = like.push();
    body.ops = [(body.ops as unknown[])[0], {
      action: "delete",
      collection: COLLECTION_POST,
      rkey: POST_RKEY,
      cid: null,
      record: null,
    }];
    const res = await push(app, body);
    assert.equal(res.status, 400);
    assert.deepEqual(await res.json(), {
      error: "InvalidCommit",
      message: `Commit does not delete ${COLLECTION_POST}/${POST_RKEY}: the tree still holds it`,
    });
    const [row] = await ctx.rows("SELECT text FROM posts WHERE uri = ?", POST_URI);
    assert.equal(row?.text, "real");
    assert.equal(await count(ctx, "likes"), 0);
  },
);

forEachBackend(
  "a genuine delete (the key absent from the signed tree) is applied",
  async (backend) => {
    await using ctx = await openBackendContext(backend, { env: { APPVIEW_INGEST_SECRET: SECRET } });
    const app = ingestRoutes(ctx);
    assert.equal((await push(app, genuinePost.push())).status, 200);
    const del = makeCommit(2, [deleteOp(ALICE, COLLECTION_POST, POST_RKEY)], {
      handle: "alice.test",
      since: revOf(1),
    });
    const res = await push(app, del.push());
    assert.deepEqual(await res.json(), { ok: true, applied: 2 });
    assert.equal(await count(ctx, "posts"), 0);
  },
);

forEachBackend(
  "a push claiming another account's handle is 403 HandleMismatch and no handle moves",
  async (backend) => {
    await using ctx = await openBackendContext(backend, { env: { APPVIEW_INGEST_SECRET: SECRET } });
    const app = ingestRoutes(ctx);
    assert.equal((await push(app, genuinePost.push())).status, 200);
    const bobs = makeCommit(3, [postOp(BOB, "3kbobpostaaa2", "bob")], { handle: "bob.test" });
    assert.equal((await push(app, bobs.push())).status, 200);
    // Bob's genuine next commit, pushed with Alice's handle.
    const grab = makeCommit(4, [postOp(BOB, "3kbobpostaab2", "mine now")], {
      handle: "alice.test",
      since: revOf(3),
    });
    const res = await push(app, grab.push());
    assert.equal(res.status, 403);
    assert.deepEqual(await res.json(), {
      error: "HandleMismatch",
      message: `Handle alice.test is not the handle the account host lists for ${BOB}`,
    });
    const handles = await ctx.rows("SELECT did, handle FROM profiles ORDER BY handle");
    assert.deepEqual(handles, [{ did: ALICE, handle: "alice.test" }, {
      did: BOB,
      handle: "bob.test",
    }]);
    assert.equal(await count(ctx, "posts"), 2);
  },
);

// Logging of refused secrets, before the index is reached: one backend.
Deno.test("failed secret checks are logged with the address, once a minute per address, never with the secret", async () => {
  const { log, lines } = captureLogRecords();
  let now = 0;
  const secretLog = new AddressLogLimiter({ now: () => now, maxAddresses: 2 });
  using ctx = openTestContext({ log, env: { APPVIEW_INGEST_SECRET: SECRET } });
  const app = ingestRoutes(ctx, { secretLog });
  const wrong = "Bearer guessed-wrong-secret-value";
  const refused = () => lines.filter((l) => l.msg === LOG_SECRET_REFUSED);
  for (let i = 0; i < 5; i++) {
    assert.equal((await push(app, {}, { auth: wrong, address: "203.0.113.7" })).status, 401);
  }
  assert.equal((await push(app, {}, { auth: "", address: "198.51.100.9" })).status, 401);
  assert.deepEqual(refused().map((l) => [l.address, l.error, l.suppressed]), [
    ["203.0.113.7", "AuthInvalid", 0],
    ["198.51.100.9", "AuthMissing", 0],
  ]);
  now += 60_000;
  assert.equal((await push(app, {}, { auth: wrong, address: "203.0.113.7" })).status, 401);
  assert.deepEqual(refused().at(-1)?.suppressed, 4);
  assert.equal(refused().length, 3);
  // Bounded: a third address forgets the oldest.
  assert.equal((await push(app, {}, { auth: wrong, address: "192.0.2.200" })).status, 401);
  assert.equal(secretLog.size, 2);
  const text = JSON.stringify(lines);
  assert.ok(!text.includes("guessed-wrong-secret-value"));
  assert.ok(!text.includes(SECRET));
});

// Logging of refused secrets, before the index is reached: one backend.
Deno.test("over a real socket the logged address is the connection's, not a forwarded header", async () => {
  const { log, lines } = captureLogRecords();
  using ctx = openTestContext({ log, env: { APPVIEW_INGEST_SECRET: SECRET } });
  await using server = serveOnPort0(ingestRoutes(ctx).fetch);
  const res = await fetch(`${server.url}${INGEST_COMMIT_PATH}`, {
    method: "POST",
    headers: { authorization: "Bearer nope", "x-forwarded-for": "198.51.100.77" },
    body: "{}",
  });
  assert.equal(res.status, 401);
  await res.body?.cancel();
  const refused = lines.filter((l) => l.msg === LOG_SECRET_REFUSED);
  assert.deepEqual(refused.map((l) => l.address), ["127.0.0.1"]);
});

endBackendTests();
