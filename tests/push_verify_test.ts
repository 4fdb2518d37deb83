/**
 * Push verification against the real account host (issue 36 item 5): the index, fed by push
 * only, applies every genuine commit (real trees, real signatures, creates and deletes), and
 * refuses pushes made with the ingest secret that the account's repository does not prove. The
 * index on SQLite and on PostgreSQL (issue 40).
 *
 * @module
 */

import assert from "node:assert/strict";
import { endBackendTests, forEachBackend } from "../appview/_test_helpers.ts";
import type { CreatedRecord } from "../shared/client_types.ts";
import { COLLECTION_POST } from "../shared/nsid.ts";
import { readEventBodies, readHeadSeq } from "../pds/sequencer/event_log.ts";
import { pushBodyOf } from "../pds/sequencer/push.ts";
import { decodeEvent } from "../pds/sequencer/sequencer.ts";
import { INGEST_SECRET, startSystem, type TestSystem } from "./_system.ts";
import { waitFor } from "./_util.ts";

const REFUSED = "Push refused: it does not verify";

/** The push body the account host would send for its latest commit. */
async function latestPush(sys: TestSystem, handle: string): Promise<Record<string, unknown>> {
  const head = await readHeadSeq(sys.pds.ctx.kv);
  const [{ body }] = await readEventBodies(sys.pds.ctx.kv, head - 1, 1);
  return JSON.parse(JSON.stringify(pushBodyOf(decodeEvent(body), handle)));
}

async function push(sys: TestSystem, body: unknown): Promise<[number, Record<string, unknown>]> {
  const res = await fetch(`${sys.appviewUrl}/internal/ingest-commit`, {
    method: "POST",
    headers: { authorization: `Bearer ${INGEST_SECRET}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return [res.status, await res.json()];
}

function refusals(sys: TestSystem): Record<string, unknown>[] {
  return sys.lines.map((l) => JSON.parse(l)).filter((l) => l.msg === REFUSED);
}

forEachBackend(
  "push only: every genuine commit verifies and applies, creates and deletes alike",
  async (backend) => {
    await using sys = await startSystem({ stream: false, backend });
    const alice = sys.client();
    const bob = sys.client();
    await alice.createAccount({ handle: "alice.test", password: "alice-password-1" });
    const b = await bob.createAccount({ handle: "bob.test", password: "bob-password-12" });
    await alice.follow(b.did);
    const posts: CreatedRecord[] = [];
    for (let i = 0; i < 40; i++) posts.push(await alice.post({ text: `post ${i}` }));
    const like = await bob.like(posts[0]);
    await waitFor(async () => (await alice.profileByDid(b.did)).followers === 1, {
      message: "follow indexed",
    });
    for (const p of posts.slice(1).reverse()) await alice.deleteRecord(p.uri);
    await bob.deleteRecord(like.uri);
    const profile = await waitFor(async () => {
      const p = await alice.profile("alice.test");
      return p.post_count === 1 && (await bob.thread(posts[0].uri)).like_count === 0 ? p : null;
    }, { message: "39 deletes and the unlike applied", timeoutMs: 5000 });
    assert.equal(profile.handle, "alice.test");
    assert.equal((await bob.thread(posts[0].uri)).post?.text, "post 0");
    assert.deepEqual(refusals(sys), []);
  },
);

forEachBackend(
  "pushes with the right secret that the repository does not prove are refused and change nothing",
  async (backend) => {
    await using sys = await startSystem({ stream: false, backend });
    const alice = sys.client();
    const bob = sys.client();
    const a = await alice.createAccount({ handle: "alice.test", password: "alice-password-1" });
    const b = await bob.createAccount({ handle: "bob.test", password: "bob-password-12" });
    const post = await alice.post({ text: "the real post" });
    await waitFor(async () => (await alice.thread(post.uri)).post !== null, {
      message: "post indexed",
    });
    const rkey = post.uri.split("/").at(-1)!;

    // A post for Alice that is in no repository, on her real latest commit.
    const forgedPost = await latestPush(sys, "alice.test");
    (forgedPost.ops as unknown[]).push({
      action: "create",
      collection: COLLECTION_POST,
      rkey: "3kforgedpost2",
      cid: (forgedPost.ops as { cid: string }[])[0].cid,
      record: { $type: COLLECTION_POST, text: "forged", createdAt: new Date().toISOString() },
    });
    const [s1, e1] = await push(sys, forgedPost);
    assert.equal(s1, 400);
    assert.equal(e1.error, "InvalidCommit");
    assert.equal((await alice.profileByDid(a.did)).post_count, 1);

    // A delete of her real post on her real latest commit (whose tree holds the post).
    const forgedDelete = await latestPush(sys, "alice.test");
    forgedDelete.ops = [{ action: "delete", collection: COLLECTION_POST, rkey, cid: null }];
    const [s2, e2] = await push(sys, forgedDelete);
    assert.deepEqual([s2, e2.error], [400, "InvalidCommit"]);
    assert.equal((await alice.thread(post.uri)).post?.text, "the real post");

    // Bob's real latest commit, claiming Alice's handle.
    const bobPost = await bob.post({ text: "bob" });
    await waitFor(async () => (await bob.thread(bobPost.uri)).post !== null);
    const bobs = await latestPush(sys, "alice.test");
    assert.equal(bobs.did, b.did);
    const [s3, e3] = await push(sys, bobs);
    assert.deepEqual([s3, e3.error], [403, "HandleMismatch"]);
    assert.equal((await alice.profile("alice.test")).did, a.did);
    assert.equal((await bob.profileByDid(b.did)).handle, "bob.test");
    assert.equal(refusals(sys).length, 3);
  },
);

endBackendTests();
