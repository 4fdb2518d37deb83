// com.atproto.identity.updateHandle (docs/behaviour.md 4.1 rule 11): the handle moves, the old
// one is free, the new one resolves and an #identity frame goes out on subscribeRepos, durable
// and replayed by cursor. The index's side: tests/update_handle_test.ts.

import assert from "node:assert/strict";
import { decodeFrame } from "../../shared/frame.ts";
import { waitFor } from "../../runtime/_test_helpers.ts";
import { signUp, startTestServer, StreamClient, xrpcGet, xrpcPost } from "../_test_helpers.ts";

const METHOD = "com.atproto.identity.updateHandle";

function bearer(token: string): Record<string, string> {
  return { authorization: `Bearer ${token}` };
}

Deno.test("updateHandle frees the old handle, resolves the new one and lists it in the DID document", async () => {
  await using s = await startTestServer();
  const alice = await signUp(s.url, "alice.test");
  const res = await xrpcPost(s.url, METHOD, { handle: "Alicia.test" }, bearer(alice.accessJwt));
  assert.equal(res.status, 200);
  await res.body?.cancel();

  const resolved = await xrpcGet(s.url, "com.atproto.identity.resolveHandle?handle=alicia.test");
  assert.deepEqual(await resolved.json(), { did: alice.did, handle: "alicia.test" });
  const old = await xrpcGet(s.url, "com.atproto.identity.resolveHandle?handle=alice.test");
  assert.equal(old.status, 400);
  assert.equal((await old.json()).error, "HandleNotFound");
  const doc = await xrpcGet(s.url, `com.atproto.identity.resolveDid?did=${alice.did}`);
  assert.deepEqual((await doc.json()).didDoc.alsoKnownAs, ["at://alicia.test"]);
  const session = await xrpcGet(s.url, "com.atproto.server.getSession", bearer(alice.accessJwt));
  assert.equal((await session.json()).handle, "alicia.test");
  const login = await xrpcPost(s.url, "com.atproto.server.createSession", {
    identifier: "alicia.test",
    password: "correct horse battery",
  });
  assert.equal(login.status, 200);
  assert.equal((await login.json()).handle, "alicia.test");

  // The old handle is free: another member can take it.
  const bob = await signUp(s.url, "alice.test");
  assert.notEqual(bob.did, alice.did);
});

Deno.test("updateHandle sends an #identity frame that a foreign consumer decodes, live and replayed by cursor", async () => {
  await using s = await startTestServer();
  const alice = await signUp(s.url, "alice.test");
  const live = await StreamClient.connect(s.url);
  try {
    const res = await xrpcPost(s.url, METHOD, { handle: "alicia.test" }, bearer(alice.accessJwt));
    assert.equal(res.status, 200);
    await res.body?.cancel();
    await waitFor(() => live.frames.some((f) => f.header.t === "#identity"), {
      message: "#identity frame",
    });
  } finally {
    await live.close();
  }
  const i = live.frames.findIndex((f) => f.header.t === "#identity");
  // Decoded from the raw bytes as any atproto consumer would.
  const frame = decodeFrame(live.raw[i]);
  assert.deepEqual(frame.header, { op: 1, t: "#identity" });
  const body = frame.body;
  assert.deepEqual(Object.keys(body).sort(), ["did", "handle", "seq", "time"]);
  assert.equal(body.did, alice.did);
  assert.equal(body.handle, "alicia.test");
  assert.equal(typeof body.seq, "number");
  assert.ok(!Number.isNaN(Date.parse(body.time as string)));
  assert.equal(await s.ctx.sequencer.headSeq(), body.seq);

  // Durable: a new subscriber replaying from the seq before it gets the same bytes.
  const replay = await StreamClient.connect(s.url, (body.seq as number) - 1);
  try {
    await waitFor(() => replay.raw.length >= 1, { message: "replayed frame" });
  } finally {
    await replay.close();
  }
  assert.deepEqual(replay.raw[0], live.raw[i]);

  // The repository still commits after it (the sequencer's seq head moved under it).
  const post = await xrpcPost(s.url, "com.atproto.repo.createRecord", {
    repo: alice.did,
    collection: "app.social.feed.post",
    record: { text: "after the rename", createdAt: new Date().toISOString() },
  }, bearer(alice.accessJwt));
  assert.equal(post.status, 200);
  await post.body?.cancel();
  assert.equal(await s.ctx.sequencer.headSeq(), (body.seq as number) + 1);
});

Deno.test("updateHandle refuses a taken handle, another domain and an invalid handle, and needs a token", async () => {
  await using s = await startTestServer();
  const alice = await signUp(s.url, "alice.test");
  await signUp(s.url, "bob.test");
  const cases: [unknown, string, string][] = [
    ["bob.test", "HandleNotAvailable", 'Handle is already taken: "bob.test"'],
    ["alice.example", "UnsupportedDomain", 'Handle must end with .test: "alice.example"'],
    ["a_b.test", "InvalidHandle", 'Handle is invalid: "a_b.test"'],
    ["", "InvalidHandle", "Handle is required"],
  ];
  for (const [handle, error, message] of cases) {
    const res = await xrpcPost(s.url, METHOD, { handle }, bearer(alice.accessJwt));
    assert.equal(res.status, 400, String(handle));
    assert.deepEqual(await res.json(), { error, message });
  }
  const anonymous = await xrpcPost(s.url, METHOD, { handle: "alicia.test" });
  assert.equal(anonymous.status, 401);
  assert.equal((await anonymous.json()).error, "AuthMissing");
  const still = await xrpcGet(s.url, "com.atproto.identity.resolveHandle?handle=alice.test");
  assert.deepEqual(await still.json(), { did: alice.did, handle: "alice.test" });
});
