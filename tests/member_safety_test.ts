/**
 * Blocks and mutes over real servers (issue 37, spec 4.2 rules 10-11): a block record created on
 * the account host reaches the index (by push and by the local stream, each alone) and hides each
 * account's content from the other; deleting it brings everything back; mutes are kept by the
 * index behind the private-endpoint authentication. The index on SQLite and on PostgreSQL (issue 40).
 */

import assert from "node:assert/strict";
import { endBackendTests, forEachBackend } from "../appview/_test_helpers.ts";
import { COLLECTION_BLOCK } from "../shared/nsid.ts";
import { startSystem, type SystemOptions } from "./_system.ts";
import { waitFor } from "./_util.ts";

const MODES: { name: string; opts: SystemOptions }[] = [
  { name: "local stream only", opts: { push: false } },
  { name: "push only", opts: { stream: false } },
];

for (const mode of MODES) {
  forEachBackend(
    `a block made on the account host hides both accounts from each other in the index, ${mode.name}`,
    async (backend) => {
      await using sys = await startSystem({ ...mode.opts, backend });
      const alice = sys.client();
      const bob = sys.client();
      const a = await alice.createAccount({ handle: "alice.test", password: "alice-password-1" });
      const b = await bob.createAccount({ handle: "bob.test", password: "bob-password-12" });
      await alice.follow(b.did);
      await bob.follow(a.did);
      const post = await alice.post({ text: "a post by alice" });
      const reply = await bob.post({ text: "a reply by bob", reply: { parent: post } });
      const bobPost = await bob.post({ text: "a post by bob" });
      await bob.like(post);

      const seen = async () => ({
        aliceTimeline: (await alice.timeline()).posts.map((p) => p.uri),
        bobTimeline: (await bob.timeline()).posts.map((p) => p.uri),
        aliceNotes: (await alice.notifications()).notifications.map((n) => n.kind).sort(),
        replies: (await alice.thread(post.uri, a.did)).replies.map((p) => p.uri),
        bobProfile: (await alice.profileByDid(b.did, a.did)).posts.length,
        search: (await alice.search("post", undefined, a.did)).posts.map((p) => p.uri),
      });
      const visible = {
        aliceTimeline: [bobPost.uri, reply.uri],
        bobTimeline: [post.uri],
        aliceNotes: ["follow", "like", "reply"],
        replies: [reply.uri],
        bobProfile: 2,
        search: [bobPost.uri, post.uri],
      };
      const hidden = {
        aliceTimeline: [],
        bobTimeline: [],
        aliceNotes: [],
        replies: [],
        bobProfile: 0,
        search: [post.uri],
      };
      const until = (want: unknown, message: string) =>
        waitFor(async () => {
          const now = await seen();
          try {
            assert.deepEqual(now, want);
            return true;
          } catch {
            return false;
          }
        }, { timeoutMs: 5000, intervalMs: 25, message });
      await until(visible, "the index caught up");

      const block = await alice.block(b.did);
      assert.match(block.uri, new RegExp(`^at://${a.did}/${COLLECTION_BLOCK}/`));
      // The account host keeps the block as a record of Alice's public repository.
      const listed = await fetch(
        `${sys.pdsUrl}/xrpc/com.atproto.repo.listRecords?repo=${a.did}&collection=${COLLECTION_BLOCK}`,
      ).then((r) => r.json());
      assert.deepEqual(
        listed.records.map((r: { uri: string; value: { subject: string } }) => [
          r.uri,
          r.value.subject,
        ]),
        [[block.uri, b.did]],
      );
      await until(hidden, "the block reached the index");
      // Views without a viewer are unchanged.
      assert.equal((await alice.profileByDid(b.did)).posts.length, 2);
      assert.deepEqual((await alice.thread(post.uri)).replies.map((p) => p.uri), [reply.uri]);

      await alice.unblock(block.uri);
      await until(visible, "the unblock reached the index");
    },
  );
}

forEachBackend(
  "mutes over real servers: behind the token, hiding the muted account from timeline and notifications",
  async (backend) => {
    await using sys = await startSystem({ push: false, backend });
    const alice = sys.client();
    const carol = sys.client();
    const a = await alice.createAccount({ handle: "alice.test", password: "alice-password-1" });
    const c = await carol.createAccount({ handle: "carol.test", password: "carol-password-1" });
    await alice.follow(c.did);
    const post = await carol.post({ text: "a post by carol" });
    await carol.follow(a.did);
    await waitFor(async () =>
      (await alice.timeline()).posts.length === 1 &&
      (await alice.notificationCount()).count === 1, { timeoutMs: 5000, message: "caught up" });

    // No token: 401 AuthMissing on every mute endpoint.
    for (
      const [method, path, body] of [
        ["GET", `/api/mutes?did=${a.did}`, undefined],
        ["POST", "/api/mutes", JSON.stringify({ did: a.did, subject: c.did })],
        ["DELETE", `/api/mutes/${c.did}?did=${a.did}`, undefined],
      ] as const
    ) {
      const res = await fetch(`${sys.appviewUrl}${path}`, { method, body });
      assert.equal(res.status, 401, `${method} ${path}`);
      assert.equal((await res.json()).error, "AuthMissing");
    }

    assert.deepEqual(await alice.mute(c.did), { ok: true, muted: true });
    assert.deepEqual((await alice.mutes()).profiles.map((p) => p.did), [c.did]);
    assert.deepEqual((await alice.timeline()).posts, []);
    assert.deepEqual((await alice.notifications()).notifications, []);
    assert.deepEqual(await alice.notificationCount(), { count: 0 });
    // Only those two: the profile and thread still show Carol.
    assert.equal((await alice.profileByDid(c.did, a.did)).posts.length, 1);
    assert.equal((await alice.thread(post.uri, a.did)).post?.uri, post.uri);
    // Carol cannot see or change Alice's mutes.
    const carolToken = (await carol.session())!.accessJwt;
    const forbidden = await fetch(`${sys.appviewUrl}/api/mutes?did=${a.did}`, {
      headers: { authorization: `Bearer ${carolToken}` },
    });
    assert.equal(forbidden.status, 403);
    assert.equal((await forbidden.json()).error, "Forbidden");

    assert.deepEqual(await alice.unmute(c.did), { ok: true, removed: true });
    assert.deepEqual((await alice.timeline()).posts.map((p) => p.uri), [post.uri]);
    assert.deepEqual(await alice.notificationCount(), { count: 1 });
  },
);

endBackendTests();
