/**
 * Inactive accounts in every view of the index (spec 4.2 rule 12, issue 37): while an account is
 * taken down or deactivated, its posts, replies, profile, notifications and cards are hidden from
 * every viewer (with a viewer or without); counters stay as they are; an active status brings
 * everything back. The status comes through the one write path as an `account_status` op.
 */

import assert from "node:assert/strict";
import { COLLECTION_POST } from "../../shared/nsid.ts";
import { accountStatusOp, didOf, postOp, safetyWorld, uriOf } from "../_fixtures.ts";
import {
  type Backend,
  endBackendTests,
  forEachBackend,
  openHarness,
  type QueryHarness,
} from "../_test_helpers.ts";

// ALICE the viewer; BOB taken down, deactivated, restored; CAROL a third account; DAVE follows
// nobody: the cold-start timeline; BR Bob's reply to A1; CR Carol's reply to BR.
const WORLD = safetyWorld();
const { ALICE, BOB, CAROL, DAVE, A1, B1, BR, CR, C1 } = WORLD;

async function seed(backend: Backend): Promise<QueryHarness> {
  const h = await openHarness(backend, { stepMs: 1000 });
  await h.apply(...WORLD.ops);
  return h;
}

const uris = (posts: { uri: string }[]) => posts.map((p) => p.uri);
const dids = (body: { profiles: { did: string }[] }) => body.profiles.map((p) => p.did);

/** What the others see of Bob, with Alice as the viewer and with no viewer. */
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
  const thread = await get(`/api/thread?uri=${CR}`);
  const bobProfile = await get(`/api/profile?did=${BOB}&viewerDid=${ALICE}`);
  const a1 = await get(`/api/thread?uri=${A1}`);
  const alice = await get(`/api/profile/alice.test`);
  const carol = await get(`/api/profile?did=${CAROL}`);
  return {
    aliceTimeline: uris((await get(`/api/timeline/home?did=${ALICE}`)).posts),
    aliceTimelineStrategies: strategies,
    daveTimeline: uris((await get(`/api/timeline/home?did=${DAVE}`)).posts),
    bobProfile: { did: bobProfile.did, posts: uris(bobProfile.posts) },
    bobProfileByHandle: (await get(`/api/profile/bob.test`)).did,
    searchForAlice: uris((await get(`/api/search?q=post&viewerDid=${ALICE}`)).posts),
    searchPublic: uris((await get(`/api/search?q=post`)).posts),
    aliceThreadReplies: uris(a1.replies),
    aliceThreadRepliesForAlice: uris(
      (await get(`/api/thread?uri=${A1}&viewerDid=${ALICE}`)).replies,
    ),
    carolThread: {
      parents: uris(thread.parents),
      root: thread.root?.uri ?? null,
      ancestor_blocked: thread.ancestor_blocked,
    },
    bobPost: await get(`/api/thread?uri=${B1}`).then((t) => ({
      post: t.post?.uri ?? null,
      blocked: t.blocked,
    })),
    bobPostShort: await get(`/api/post/${BR}`).then((t) => ({
      post: t.post?.uri ?? null,
      blocked: t.blocked,
    })),
    carolPostShort: (await get(`/api/post/${CR}`)).thread.parent?.uri ?? null,
    aliceNotifications: (await get(`/api/notifications?did=${ALICE}`)).notifications
      .map((n: { kind: string; author_did: string }) =>
        `${n.kind} ${n.author_did === BOB ? "bob" : "carol"}`
      ).sort(),
    aliceUnread: (await get(`/api/notifications/count?did=${ALICE}`)).count,
    aliceFollowers: dids(await get(`/api/followers?did=${ALICE}`)),
    carolFollowing: dids(await get(`/api/following?did=${CAROL}`)),
    carolFollowingForAlice: dids(await get(`/api/following?did=${CAROL}&viewerDid=${ALICE}`)),
    // Counters are not corrected while an account is inactive (rule 12).
    counts: {
      aliceFollowers: alice.followers,
      carolFollowing: carol.following,
      a1Likes: a1.like_count,
    },
  };
}

const ACTIVE = {
  aliceTimeline: [C1, CR, BR, B1],
  aliceTimelineStrategies: [[C1, CR, BR, B1], [C1, CR, BR, B1]],
  daveTimeline: [C1, CR, BR, B1, A1],
  bobProfile: { did: BOB, posts: [BR, B1] },
  bobProfileByHandle: BOB,
  searchForAlice: [C1, CR, BR, B1, A1],
  searchPublic: [C1, CR, BR, B1, A1],
  aliceThreadReplies: [BR],
  aliceThreadRepliesForAlice: [BR],
  carolThread: { parents: [A1, BR], root: A1, ancestor_blocked: undefined },
  bobPost: { post: B1, blocked: undefined },
  bobPostShort: { post: BR, blocked: undefined },
  carolPostShort: BR,
  aliceNotifications: ["follow bob", "follow carol", "like bob", "reply bob"],
  aliceUnread: 4,
  aliceFollowers: [CAROL, BOB],
  carolFollowing: [BOB, ALICE],
  carolFollowingForAlice: [BOB, ALICE],
  counts: { aliceFollowers: 2, carolFollowing: 2, a1Likes: 1 },
};

const INACTIVE = {
  ...ACTIVE,
  // Carol's reply to Bob stays: her post, whose parent shows as unavailable in its thread.
  aliceTimeline: [C1, CR],
  aliceTimelineStrategies: [[C1, CR], [C1, CR]],
  daveTimeline: [C1, CR, A1],
  // As an account the index does not know: the synthetic empty profile.
  bobProfile: { did: "", posts: [] },
  bobProfileByHandle: "",
  searchForAlice: [C1, CR, A1],
  searchPublic: [C1, CR, A1],
  aliceThreadReplies: [],
  aliceThreadRepliesForAlice: [],
  carolThread: { parents: [], root: A1, ancestor_blocked: true },
  bobPost: { post: null, blocked: true },
  bobPostShort: { post: null, blocked: true },
  carolPostShort: null,
  aliceNotifications: ["follow carol"],
  aliceUnread: 1,
  aliceFollowers: [CAROL],
  carolFollowing: [ALICE],
  carolFollowingForAlice: [ALICE],
};

forEachBackend(
  "a taken-down account is hidden from every view for every viewer until restored",
  async (backend) => {
    await using h = await seed(backend);
    assert.deepEqual(await everyView(h), ACTIVE);

    await h.apply(accountStatusOp(BOB, "takendown"));
    assert.deepEqual(await everyView(h), INACTIVE);

    await h.apply(accountStatusOp(BOB, null));
    assert.deepEqual(await everyView(h), ACTIVE);
  },
);

forEachBackend(
  "a deactivated account is hidden while deactivated, and back when activated",
  async (backend) => {
    await using h = await seed(backend);
    await h.apply(accountStatusOp(BOB, "deactivated"));
    assert.deepEqual(await everyView(h), INACTIVE);
    // Content indexed while inactive is hidden too.
    await h.apply(postOp(BOB, "3kbbbbbbbbd22", "a late post by bob"));
    assert.deepEqual((await everyView(h)).searchPublic, INACTIVE.searchPublic);
    await h.apply(accountStatusOp(BOB, null));
    const back = await everyView(h);
    assert.deepEqual(back.searchPublic, [
      uriOf(BOB, COLLECTION_POST, "3kbbbbbbbbd22"),
      C1,
      CR,
      BR,
      B1,
      A1,
    ]);
  },
);

forEachBackend(
  "account status ops are idempotent: one row per inactive account, none once active",
  async (backend) => {
    await using h = await seed(backend);
    const rows = () =>
      h.rows(
        `SELECT x.did, i.status FROM inactive_actors i JOIN actors x ON x.id = i.actor ORDER BY x.did`,
      );
    await h.apply(accountStatusOp(BOB, "deactivated"), accountStatusOp(BOB, "deactivated"));
    assert.deepEqual(await rows(), [{ did: BOB, status: "deactivated" }]);
    await h.apply(accountStatusOp(BOB, "takendown"));
    assert.deepEqual(await rows(), [{ did: BOB, status: "takendown" }]);
    // An account the index has never seen may be taken down before its first post arrives.
    const eve = didOf("eve");
    await h.apply(accountStatusOp(eve, "takendown"));
    assert.deepEqual(await rows(), [{ did: BOB, status: "takendown" }, {
      did: eve,
      status: "takendown",
    }]);
    await h.apply(
      accountStatusOp(BOB, null),
      accountStatusOp(BOB, null),
      accountStatusOp(eve, null),
    );
    assert.deepEqual(await rows(), []);
  },
);

endBackendTests();
