/**
 * Blocks in every view of the index (spec 4.2 rule 10, issue 37): with a viewer, each of the two
 * accounts' posts, replies and notifications are hidden from the other; threads follow the block
 * rule (a blocked reply is left out with what hangs below it, a blocked ancestor ends the chain);
 * views without a viewer are unchanged; a deleted block brings everything back.
 */

import assert from "node:assert/strict";
import { COLLECTION_BLOCK } from "../../shared/nsid.ts";
import { blockOp, deleteOp, likeOp, safetyWorld } from "../_fixtures.ts";
import {
  type Backend,
  endBackendTests,
  forEachBackend,
  openHarness,
  type QueryHarness,
} from "../_test_helpers.ts";

// ALICE the blocker; BOB blocked by Alice; CAROL neither; DAVE follows nobody: the cold-start
// timeline; BR Bob's reply to A1; CR Carol's reply to BR; C1 Carol's post.
const WORLD = safetyWorld();
const { ALICE, BOB, CAROL, DAVE, A1, B1, BR, CR, C1 } = WORLD;
const BLOCK = "3kblock000022";

async function seed(backend: Backend): Promise<QueryHarness> {
  const h = await openHarness(backend, { stepMs: 1000 });
  await h.apply(
    ...WORLD.ops,
    likeOp(ALICE, "3klike0000122", B1),
  );
  return h;
}

const uris = (posts: { uri: string }[]) => posts.map((p) => p.uri);

/** What Alice (and Bob, and nobody) sees in every view; compared before, during, after a block. */
async function everyView(h: QueryHarness) {
  const get = async (path: string) => {
    const res = await h.request(path);
    assert.equal(res.status, 200, path);
    return res.body;
  };
  const strategies = [];
  for (const strategy of ["per_followee", "global_scan"] as const) {
    const page = await h.store.views.timeline.home(ALICE, { limit: 30, cursor: null, strategy });
    strategies.push(page.rows.map((r) => r.uri));
  }
  const thread = await get(`/api/thread?uri=${CR}&viewerDid=${ALICE}`);
  const notes = await get(`/api/notifications?did=${ALICE}`);
  return {
    aliceTimeline: uris((await get(`/api/timeline/home?did=${ALICE}`)).posts),
    aliceTimelineStrategies: strategies,
    bobTimeline: uris((await get(`/api/timeline/home?did=${BOB}`)).posts),
    daveTimeline: uris((await get(`/api/timeline/home?did=${DAVE}`)).posts),
    bobProfileForAlice: uris((await get(`/api/profile?did=${BOB}&viewerDid=${ALICE}`)).posts),
    aliceProfileForBob: uris(
      (await get(`/api/profile/alice.test?viewerDid=${BOB}`)).posts,
    ),
    bobProfilePublic: uris((await get(`/api/profile?did=${BOB}`)).posts),
    searchForAlice: uris((await get(`/api/search?q=post&viewerDid=${ALICE}`)).posts),
    searchPublic: uris((await get(`/api/search?q=post`)).posts),
    aliceThread: uris((await get(`/api/thread?uri=${A1}&viewerDid=${ALICE}`)).replies),
    carolThreadForAlice: {
      parents: uris(thread.parents),
      root: thread.root?.uri ?? null,
      ancestor_blocked: thread.ancestor_blocked,
    },
    bobPostForAlice: await get(`/api/thread?uri=${B1}&viewerDid=${ALICE}`).then((t) => ({
      post: t.post?.uri ?? null,
      blocked: t.blocked,
    })),
    bobPostShortForAlice: await get(`/api/post/${BR}?viewerDid=${ALICE}`).then((t) => ({
      post: t.post?.uri ?? null,
      blocked: t.blocked,
    })),
    aliceThreadPublic: uris((await get(`/api/thread?uri=${A1}`)).replies),
    aliceNotifications: notes.notifications.map((n: { kind: string; author_did: string }) =>
      `${n.kind} ${n.author_did === BOB ? "bob" : "carol"}`
    ).sort(),
    aliceUnread: (await get(`/api/notifications/count?did=${ALICE}`)).count,
    bobNotifications: (await get(`/api/notifications?did=${BOB}`)).notifications.length,
    bobUnread: (await get(`/api/notifications/count?did=${BOB}`)).count,
    carolFollowersForBob: (await get(`/api/followers?did=${CAROL}&viewerDid=${BOB}`))
      .profiles.map((p: { did: string }) => p.did),
    carolFollowingForBob: (await get(`/api/following?did=${CAROL}&viewerDid=${BOB}`))
      .profiles.map((p: { did: string }) => p.did),
    carolFollowingPublic: (await get(`/api/following?did=${CAROL}`)).profiles.length,
  };
}

const UNBLOCKED = {
  aliceTimeline: [C1, CR, BR, B1],
  aliceTimelineStrategies: [[C1, CR, BR, B1], [C1, CR, BR, B1]],
  bobTimeline: [A1],
  daveTimeline: [C1, CR, BR, B1, A1],
  bobProfileForAlice: [BR, B1],
  aliceProfileForBob: [A1],
  bobProfilePublic: [BR, B1],
  searchForAlice: [C1, CR, BR, B1, A1],
  searchPublic: [C1, CR, BR, B1, A1],
  aliceThread: [BR],
  carolThreadForAlice: { parents: [A1, BR], root: A1, ancestor_blocked: undefined },
  bobPostForAlice: { post: B1, blocked: undefined },
  bobPostShortForAlice: { post: BR, blocked: undefined },
  aliceThreadPublic: [BR],
  aliceNotifications: ["follow bob", "follow carol", "like bob", "reply bob"],
  aliceUnread: 4,
  bobNotifications: 4, // Alice's follow and like, Carol's follow and reply
  bobUnread: 4,
  carolFollowersForBob: [ALICE],
  carolFollowingForBob: [BOB, ALICE],
  carolFollowingPublic: 2,
};

forEachBackend(
  "a block hides each account from the other in every view, until it is deleted",
  async (backend) => {
    await using h = await seed(backend);
    assert.deepEqual(await everyView(h), UNBLOCKED);

    await h.apply(blockOp(ALICE, BLOCK, BOB));
    assert.deepEqual(await everyView(h), {
      ...UNBLOCKED,
      // Carol's reply to Bob stays: her post, whose parent shows as unavailable in its thread.
      aliceTimeline: [C1, CR],
      aliceTimelineStrategies: [[C1, CR], [C1, CR]],
      bobTimeline: [],
      bobProfileForAlice: [],
      aliceProfileForBob: [],
      searchForAlice: [C1, CR, A1],
      aliceThread: [],
      // The chain ends at Bob's reply: Carol's reply shows its parent as unavailable.
      carolThreadForAlice: { parents: [], root: A1, ancestor_blocked: true },
      bobPostForAlice: { post: null, blocked: true },
      bobPostShortForAlice: { post: null, blocked: true },
      aliceNotifications: ["follow carol"],
      aliceUnread: 1,
      bobNotifications: 2,
      bobUnread: 2,
      carolFollowersForBob: [],
      carolFollowingForBob: [BOB],
    });

    await h.apply(deleteOp(ALICE, COLLECTION_BLOCK, BLOCK));
    assert.deepEqual(await everyView(h), UNBLOCKED);
  },
);

forEachBackend(
  "the blocked account's view of the blocker's thread: the root is unavailable",
  async (backend) => {
    await using h = await seed(backend);
    await h.apply(blockOp(ALICE, BLOCK, BOB));
    const { body } = await h.request(`/api/thread?uri=${CR}&viewerDid=${BOB}`);
    // Bob sees his own reply, but not Alice's post above it, which is also the root.
    assert.deepEqual(uris(body.parents), [BR]);
    assert.equal(body.root, null);
    assert.equal(body.ancestor_blocked, true);
    const short = await h.request(`/api/post/${BR}?viewerDid=${BOB}`);
    assert.equal(short.body.post.uri, BR);
    assert.deepEqual(short.body.thread, { parent: null, root: null });
  },
);

forEachBackend("an invalid viewerDid is 400 InvalidRequest naming it", async (backend) => {
  await using h = await seed(backend);
  for (const path of ["/api/profile?did=" + BOB, "/api/search?q=post", `/api/post/${B1}`]) {
    const { status, body } = await h.request(`${path}${path.includes("?") ? "&" : "?"}viewerDid=x`);
    assert.equal(status, 400, path);
    assert.deepEqual(body, { error: "InvalidRequest", message: "Invalid viewerDid: x" });
  }
});

endBackendTests();
