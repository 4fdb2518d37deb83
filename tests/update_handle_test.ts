/**
 * A handle change over real servers (issue 37; behaviour 4.1 rule 11, 6.2 rule 6): the account
 * host's `#identity` frame reaches the index by the local stream, which then shows the new handle
 * in every view (posts, profile, notifications, follower lists) and serves `/api/profile/<new>`;
 * the old handle no longer finds the profile. The index on SQLite and on PostgreSQL (issue 40).
 */

import assert from "node:assert/strict";
import { endBackendTests, forEachBackend } from "../appview/_test_helpers.ts";
import { startSystem } from "./_system.ts";
import { waitFor } from "./_util.ts";

forEachBackend(
  "after updateHandle the index shows the new handle in every view, by the local stream alone",
  async (backend) => {
    await using sys = await startSystem({ push: false, handleSync: false, backend });
    const alice = sys.client();
    const bob = sys.client();
    const a = await alice.createAccount({ handle: "alice.test", password: "alice-password-1" });
    const b = await bob.createAccount({ handle: "bob.test", password: "bob-password-12" });
    await alice.follow(b.did);
    await bob.follow(a.did);
    const post = await alice.post({ text: "a post by alice" });
    await alice.like(await bob.post({ text: "a post by bob" }));

    const seen = async () => ({
      timeline: (await bob.timeline()).posts.filter((p) => p.did === a.did).map((p) => p.handle),
      profilePosts: (await bob.profileByDid(a.did)).posts.map((p) => p.handle),
      profile: (await bob.profileByDid(a.did)).handle,
      thread: (await bob.thread(post.uri)).post?.handle,
      notifications: (await bob.notifications()).notifications
        .filter((n) => n.author_did === a.did).map((n) => n.author_handle).sort(),
      followers: (await bob.followers(b.did)).profiles.map((f) => f.handle),
      following: (await bob.following(b.did)).profiles.map((f) => f.handle),
    });
    const showing = (handle: string) => ({
      timeline: [handle],
      profilePosts: [handle],
      profile: handle,
      thread: handle,
      notifications: [handle, handle],
      followers: [handle],
      following: [handle],
    });
    const until = (want: unknown, message: string) =>
      waitFor(async () => {
        try {
          assert.deepEqual(await seen(), want);
          return true;
        } catch {
          return false;
        }
      }, { timeoutMs: 5000, intervalMs: 25, message });
    // Without the push and handle sync the index learns handles from #identity frames alone: the
    // account's creation sends the first one (docs/behaviour.md 6.1 rule 9).
    await until(showing("alice.test"), "the index caught up");

    await alice.updateHandle("alicia.test");
    assert.equal((await alice.session())?.handle, "alicia.test");
    await until(showing("alicia.test"), "the index shows the new handle");
    assert.equal((await bob.profile("alicia.test")).did, a.did);
    // The old handle finds no one: the empty profile of an unknown handle (behaviour 4.2 rule 3).
    const old = await bob.profile("alice.test");
    assert.deepEqual([old.did, old.handle, old.posts], ["", "alice.test", []]);
  },
);

forEachBackend(
  "the push carries the new handle after updateHandle: a post pushed after the change does not bring the old one back",
  async (backend) => {
    await using sys = await startSystem({ push: true, handleSync: false, backend });
    const alice = sys.client();
    const bob = sys.client();
    const a = await alice.createAccount({ handle: "alice.test", password: "alice-password-1" });
    await bob.createAccount({ handle: "bob.test", password: "bob-password-12" });
    await alice.post({ text: "before the change" });
    const handleSeen = async () => (await bob.profileByDid(a.did)).handle;
    await waitFor(async () => (await handleSeen()) === "alice.test", { message: "indexed" });

    await alice.updateHandle("alicia.test");
    await waitFor(async () => (await handleSeen()) === "alicia.test", { message: "new handle" });
    const after = await alice.post({ text: "after the change" });
    await waitFor(async () => (await bob.thread(after.uri)).post !== null, { message: "pushed" });
    assert.equal((await bob.thread(after.uri)).post?.handle, "alicia.test");
    assert.equal(await handleSeen(), "alicia.test");
    assert.equal((await bob.profile("alicia.test")).did, a.did);
  },
);

endBackendTests();
