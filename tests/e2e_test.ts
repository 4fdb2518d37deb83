/**
 * The whole system end to end (issue "client refresh contract, the whole system end to end"):
 * two accounts follow each other, post, reply, like and repost through the client; within one
 * second the index serves the right timeline, thread, profile counts, search hits and
 * notifications. Run three ways: push and stream, stream only, push only (spec 1.3, 6.2 rule 5),
 * each with the index on SQLite and on PostgreSQL (issue 40).
 */

import assert from "node:assert/strict";
import { endBackendTests, forEachBackend } from "../appview/_test_helpers.ts";
import { startSystem, type SystemOptions } from "./_system.ts";
import { waitFor } from "./_util.ts";

const MODES: { name: string; opts: SystemOptions }[] = [
  { name: "push and local stream", opts: {} },
  { name: "local stream only (push disabled)", opts: { push: false } },
  { name: "push only (local stream disabled)", opts: { stream: false } },
];

for (const mode of MODES) {
  forEachBackend(
    `end to end, ${mode.name}: the index serves what two accounts did within a second`,
    async (backend) => {
      await using sys = await startSystem({ ...mode.opts, backend });
      const alice = sys.client();
      const bob = sys.client();
      const a = await alice.createAccount({ handle: "alice.test", password: "alice-password-1" });
      const b = await bob.createAccount({ handle: "bob.test", password: "bob-password-12" });

      await alice.follow(b.did);
      await bob.follow(a.did);
      const post = await alice.post({ text: "Hello end to end from alice", langs: ["en"] });
      const reply = await bob.post({ text: "A reply from bob", reply: { parent: post } });
      await bob.like(post);
      await bob.repost(post);
      await alice.like(reply);
      const wroteAt = Date.now();

      // Everything visible within one second of the last write.
      const thread = await waitFor(async () => {
        const t = await bob.thread(post.uri, b.did);
        const ok = t.post !== null && t.replies.length === 1 && t.like_count === 1 &&
          t.repost_count === 1;
        const notes = await alice.notificationCount();
        return ok && notes.count === 4 ? t : null;
      }, { timeoutMs: 1000, intervalMs: 20, message: `index caught up (${mode.name})` });
      assert.ok(Date.now() - wroteAt <= 1100);

      assert.equal(thread.post?.uri, post.uri);
      assert.equal(thread.post?.text, "Hello end to end from alice");
      assert.deepEqual(thread.post?.langs, ["en"]);
      assert.equal(thread.replies[0].uri, reply.uri);
      assert.equal(thread.replies[0].parent_uri, post.uri);
      assert.equal(thread.replies[0].root_uri, post.uri);
      assert.equal(thread.viewer_liked, true);
      assert.equal(thread.viewer_reposted, true);
      assert.deepEqual(thread.parents, []);

      const bobTimeline = await bob.timeline({ limit: 10 });
      assert.deepEqual(bobTimeline.posts.map((p) => p.uri), [post.uri]);
      const aliceTimeline = await alice.timeline({ limit: 10 });
      assert.deepEqual(aliceTimeline.posts.map((p) => p.uri), [reply.uri]);
      assert.equal(aliceTimeline.cursor, null);

      const profile = await bob.profileByDid(a.did);
      assert.equal(profile.did, a.did);
      assert.equal(profile.followers, 1);
      assert.equal(profile.following, 1);
      assert.equal(profile.post_count, 1);
      assert.deepEqual(profile.posts.map((p) => p.uri), [post.uri]);

      const hits = await bob.search("alice");
      assert.deepEqual(hits.posts.map((p) => p.uri), [post.uri]);
      assert.equal(hits.q, "alice");

      const notes = await alice.notifications();
      assert.deepEqual(
        notes.notifications.map((n) => [n.kind, n.author_did, n.subject_uri]).sort(),
        [
          ["follow", b.did, null],
          ["like", b.did, post.uri],
          ["reply", b.did, reply.uri],
          ["repost", b.did, post.uri],
        ],
      );
      for (const n of notes.notifications) assert.equal(n.read_at, null);
      assert.deepEqual(await alice.markSeen(null), { ok: true, updated: 4 });
      assert.deepEqual(await alice.notificationCount(), { count: 0 });
      assert.deepEqual(await alice.markSeen(null), { ok: true, updated: 0 });
      const bobNotes = await bob.notifications();
      assert.deepEqual(
        bobNotes.notifications.map((n) => [n.kind, n.author_did, n.subject_uri]).sort(),
        [["follow", a.did, null], ["like", a.did, reply.uri]],
      );

      // Handles: carried by the push, or resolved by handle sync from the account host.
      await waitFor(async () => {
        const p = await bob.profileByDid(a.did);
        const t = await bob.timeline();
        return p.handle === "alice.test" && t.posts[0]?.handle === "alice.test";
      }, { timeoutMs: 3000, message: "handles resolved" });
      const byHandle = await bob.profile("ALICE.test");
      assert.equal(byHandle.did, a.did);

      // Unfollow flows through too.
      const follows = await alice.following(a.did);
      assert.deepEqual(follows.profiles.map((p) => p.did), [b.did]);
    },
  );
}

endBackendTests();
