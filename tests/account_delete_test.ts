/**
 * Account deletion over real servers (issue 37, spec 4.1 rule 13, 4.2 rule 12, 6.2 rule 7): the
 * member's `requestAccountDelete` + `deleteAccount` and the operator's `deno task admin account
 * delete` remove every key of the account from the account host's store (but the invite
 * redemption log and the stream's past events) and, through the local stream's `#account` frame
 * alone (the push is off), every row of the DID from the index, with every counter corrected. The
 * deletions run with the index on SQLite and on PostgreSQL (issue 40); the deletion token's
 * checks, on the account host alone, run once.
 */

import assert from "node:assert/strict";
import { decodeFrame } from "../shared/frame.ts";
import type { SocialClient } from "../shared/client.ts";
import { runAdminCli } from "../scripts/admin.ts";
import { endBackendTests, forEachBackend } from "../appview/_test_helpers.ts";
import { startSystem, type TestSystem } from "./_system.ts";
import { waitFor } from "./_util.ts";

/** Tables that keep bookkeeping of a DID by design (its interned id, its last rev). */
const BOOKKEEPING = ["actors", "repo_revs", "schema_migrations", "cursors", "consumer_status"];

async function admin(sys: TestSystem, ...args: string[]): Promise<number> {
  const env = { PDS_KV_PATH: sys.pds.ctx.config.kvPath, PDS_JWT_SECRET: "x".repeat(16) };
  return await runAdminCli(args, env, { out: () => {}, err: () => {} });
}

async function xrpc(
  sys: TestSystem,
  nsid: string,
  opts: { token?: string; body?: unknown; query?: string } = {},
): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${sys.pdsUrl}/xrpc/${nsid}${opts.query ? `?${opts.query}` : ""}`, {
    method: opts.body === undefined ? "GET" : "POST",
    headers: {
      ...(opts.token ? { authorization: `Bearer ${opts.token}` } : {}),
      ...(opts.body === undefined ? {} : { "content-type": "application/json" }),
    },
    body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
  });
  const text = await res.text();
  return { status: res.status, body: text === "" ? {} : JSON.parse(text) };
}

/** A small community around bob, the account deleted; answers what the checks need. */
async function buildCommunity(sys: TestSystem) {
  const alice = sys.client();
  const bob = sys.client();
  const carol = sys.client();
  const a = await alice.createAccount({ handle: "alice.test", password: "alice-password-1" });
  const b = await bob.createAccount({ handle: "bob.test", password: "bob-password-12" });
  const c = await carol.createAccount({ handle: "carol.test", password: "carol-password-1" });
  const alicePost = await alice.post({ text: "a post by alice" });
  await bob.like(alicePost);
  await bob.repost(alicePost);
  await bob.follow(a.did);
  await carol.follow(b.did);
  await carol.follow(a.did);
  const blob = await bob.uploadBlob(new Uint8Array([1, 2, 3, 4]), "image/png");
  await bob.updateProfile({ displayName: "Bob", avatar: blob });
  const bobPost = await bob.post({ text: "zanzibarquokka by bob" });
  await alice.like(bobPost);
  await bob.createAppPassword("third-party");
  await waitFor(async () => (await alice.profileByDid(a.did)).followers === 2, {
    timeoutMs: 5000,
    intervalMs: 25,
    message: "the index caught up",
  });
  await waitFor(async () => (await alice.search("zanzibarquokka")).posts.length === 1, {
    timeoutMs: 5000,
    intervalMs: 25,
    message: "bob's post reached the index",
  });
  return { alice, bob, carol, a, b, c, alicePost, bobPost };
}

/** Every check of a deleted account, on the store and on the index. */
async function assertDeleted(
  sys: TestSystem,
  w: Awaited<ReturnType<typeof buildCommunity>>,
  bobPostIds: number[],
): Promise<void> {
  const did = w.b.did;
  // The index: waits for the #account frame, then no row names the DID.
  await waitFor(
    async () => !JSON.stringify(await sys.dump({ exclude: BOOKKEEPING })).includes(did),
    { timeoutMs: 5000, intervalMs: 25, message: "the deletion reached the index" },
  );
  // SQLite's full-text index is a table of its own (PostgreSQL's search vector is a column of the
  // post row, gone with it).
  if (sys.backend === "sqlite") {
    const fts = (await sys.dump()).posts_fts.map((r) => r.rowid);
    for (const id of bobPostIds) assert.ok(!fts.includes(id), `posts_fts row ${id} left`);
  }
  const post = (await w.alice.getPost(w.alicePost.uri)).post!;
  assert.deepEqual([post.like_count, post.repost_count], [0, 0]);
  const alice = await w.alice.profileByDid(w.a.did);
  assert.deepEqual([alice.followers, alice.following, alice.post_count], [1, 0, 1]);
  const carol = await w.alice.profileByDid(w.c.did);
  assert.deepEqual([carol.followers, carol.following], [0, 1]);
  assert.equal((await w.alice.profileByDid(did)).did, "");
  assert.deepEqual((await w.alice.search("zanzibarquokka")).posts, []);

  // The store: no key of the DID but the redemption log and the stream's past events.
  const left: string[] = [];
  for await (const entry of sys.pds.ctx.kv.list({ prefix: [] })) {
    const table = entry.key[0];
    if (table === "invite_use" || table === "seq_event") continue;
    const value = entry.value as { did?: unknown } | null;
    if (entry.key.some((p) => typeof p === "string" && p.includes(did)) || value?.did === did) {
      left.push(JSON.stringify(entry.key));
    }
  }
  assert.deepEqual(left, []);

  // The handle is free, the login fails, the repository is gone.
  const resolved = await xrpc(sys, "com.atproto.identity.resolveHandle", {
    query: "handle=bob.test",
  });
  assert.equal(resolved.status, 400);
  const login = await xrpc(sys, "com.atproto.server.createSession", {
    body: { identifier: "bob.test", password: "bob-password-12" },
  });
  assert.equal(login.status, 401);
  for (const nsid of ["com.atproto.sync.getLatestCommit", "com.atproto.sync.getRepoStatus"]) {
    const res = await xrpc(sys, nsid, { query: `did=${did}` });
    assert.deepEqual([res.status, res.body.error], [400, "RepoNotFound"], nsid);
  }

  // The frames, as a foreign consumer decodes them: the creation's, then the deletion's.
  const frames = await readStream(sys);
  const account = frames.filter((f) => f.header.t === "#account" && f.body.did === did);
  assert.deepEqual(
    account.map((f) => ({ active: f.body.active, status: f.body.status })),
    [{ active: true, status: undefined }, { active: false, status: "deleted" }],
  );
}

/** Every frame of the account host's stream from the start, as `shared/frame.ts` decodes them. */
async function readStream(sys: TestSystem) {
  const head = (await sys.pds.ctx.kv.get<number>(["seq_head"])).value ?? 0;
  const url = `${sys.pdsUrl.replace(/^http/, "ws")}/xrpc/com.atproto.sync.subscribeRepos?cursor=0`;
  const ws = new WebSocket(url);
  ws.binaryType = "arraybuffer";
  const frames: ReturnType<typeof decodeFrame>[] = [];
  await new Promise<void>((resolve, reject) => {
    ws.onmessage = (e) => {
      const frame = decodeFrame(new Uint8Array(e.data as ArrayBuffer));
      frames.push(frame);
      if (frame.body.seq === head) ws.close();
    };
    ws.onclose = () => resolve();
    ws.onerror = () => reject(new Error("stream failed"));
  });
  return frames;
}

async function postIds(sys: TestSystem, did: string): Promise<number[]> {
  return (await sys.rows<{ id: number }>("SELECT id FROM posts WHERE did = ?", did)).map((r) =>
    r.id
  );
}

async function accessToken(client: SocialClient): Promise<string> {
  return (await client.session())!.accessJwt;
}

forEachBackend(
  "deleteAccount with the password and a requested token removes the account from the store and the index, counters corrected",
  async (backend) => {
    await using sys = await startSystem({ push: false, backend });
    const w = await buildCommunity(sys);
    const ids = await postIds(sys, w.b.did);
    assert.equal(ids.length, 1);

    const requested = await xrpc(sys, "com.atproto.server.requestAccountDelete", {
      token: await accessToken(w.bob),
      body: {},
    });
    assert.equal(requested.status, 200);
    assert.equal(typeof requested.body.token, "string");
    const deleted = await xrpc(sys, "com.atproto.server.deleteAccount", {
      body: { did: w.b.did, password: "bob-password-12", token: requested.body.token },
    });
    assert.deepEqual([deleted.status, deleted.body], [200, {}]);
    await assertDeleted(sys, w, ids);

    // A replay of the deletion changes nothing.
    const before = await sys.dump();
    await sys.appview.ctx.store.writer.applyOps([
      { kind: "account_status", did: w.b.did, active: false, status: "deleted" },
    ]);
    assert.deepEqual(await sys.dump(), before);

    // The handle can be taken again.
    const again = await sys.client().createAccount({
      handle: "bob.test",
      password: "new-bob-pass-1",
    });
    assert.notEqual(again.did, w.b.did);
  },
);

forEachBackend(
  "deno task admin account delete removes the account without its password",
  async (backend) => {
    await using sys = await startSystem({ push: false, backend });
    const w = await buildCommunity(sys);
    const ids = await postIds(sys, w.b.did);
    assert.equal(await admin(sys, "account", "delete", "bob.test"), 0);
    await assertDeleted(sys, w, ids);
    assert.equal(await admin(sys, "account", "delete", w.b.did), 1);
  },
);

// The account host's checks alone: the index is not asked.
Deno.test("the account deletion token: app-password sessions refused, wrong password 401, bad, used or expired token 400", async () => {
  let now = Date.now();
  await using sys = await startSystem({ push: false, pdsNow: () => now });
  const bob = sys.client();
  const b = await bob.createAccount({ handle: "bob.test", password: "bob-password-12" });
  const app = await bob.createAppPassword("third-party");
  const appLogin = await xrpc(sys, "com.atproto.server.createSession", {
    body: { identifier: "bob.test", password: app.password },
  });
  const byApp = await xrpc(sys, "com.atproto.server.requestAccountDelete", {
    token: appLogin.body.accessJwt as string,
    body: {},
  });
  assert.deepEqual([byApp.status, byApp.body.error, byApp.body.message], [
    400,
    "InvalidToken",
    "Bad token scope",
  ]);

  const request = async () =>
    (await xrpc(sys, "com.atproto.server.requestAccountDelete", {
      token: await accessToken(bob),
      body: {},
    })).body.token as string;
  const del = (body: Record<string, unknown>) =>
    xrpc(sys, "com.atproto.server.deleteAccount", { body });
  const token = await request();
  const wrongPassword = await del({ did: b.did, password: "not-the-password", token });
  assert.deepEqual([wrongPassword.status, wrongPassword.body.error], [
    401,
    "AuthenticationRequired",
  ]);
  const appPassword = await del({ did: b.did, password: app.password, token });
  assert.equal(appPassword.status, 401);
  const wrongToken = await del({ did: b.did, password: "bob-password-12", token: "abcde-fghij" });
  assert.deepEqual([wrongToken.status, wrongToken.body.error], [400, "InvalidToken"]);
  const missing = await del({ did: b.did, password: "bob-password-12" });
  assert.deepEqual([missing.status, missing.body.error], [400, "InvalidRequest"]);

  // A new request replaces the token; an expired one is refused.
  const second = await request();
  const replaced = await del({ did: b.did, password: "bob-password-12", token });
  assert.deepEqual([replaced.status, replaced.body.error], [400, "InvalidToken"]);
  now += 15 * 60 * 1000 + 1;
  const expired = await del({ did: b.did, password: "bob-password-12", token: second });
  assert.deepEqual([expired.status, expired.body.error], [400, "ExpiredToken"]);
  assert.equal((await sys.pds.ctx.kv.get(["account", b.did])).value !== null, true);
});

endBackendTests();
