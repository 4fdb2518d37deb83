import assert from "node:assert/strict";
import { COLLECTION_FOLLOW, COLLECTION_LIKE, COLLECTION_POST } from "../../../shared/nsid.ts";
import {
  deleteOp,
  didOf,
  followOp,
  handleOp,
  likeOp,
  postOp,
  profileOp,
  repostOp,
  uriOf,
} from "../../_fixtures.ts";
import {
  type BackendIndex,
  endBackendTests,
  forEachBackend,
  openBackendIndex,
} from "../../_test_helpers.ts";

const ALICE = didOf("alice");
const BOB = didOf("bob");
const CAROL = didOf("carol");
const ALICE_POST = uriOf(ALICE, COLLECTION_POST, "p1");

function notifications(ix: BackendIndex) {
  return ix.rows(
    `SELECT r.did AS recipient_did, n.kind, n.author_did, n.subject_uri, n.record_uri
     FROM notifications n JOIN actors r ON r.id = n.recipient
     ORDER BY n.id`,
  );
}

forEachBackend(
  "a like notifies the liked post's author with the post as subject (spec 6.5)",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    await ix.apply(postOp(ALICE, "p1", "hello"), likeOp(BOB, "l1", ALICE_POST));
    const rows = await ix.rows(
      `SELECT n.id, r.did AS recipient_did, n.kind, n.author_did, n.subject_uri, n.record_uri,
       n.created_at, n.indexed_at, n.read_at
     FROM notifications n JOIN actors r ON r.id = n.recipient`,
    );
    assert.deepEqual(rows, [{
      id: 1,
      recipient_did: ALICE,
      kind: "like",
      author_did: BOB,
      subject_uri: ALICE_POST,
      record_uri: uriOf(BOB, COLLECTION_LIKE, "l1"),
      created_at: "2024-05-01T12:00:00.000Z",
      indexed_at: "2024-06-01T00:00:02.000Z",
      read_at: null,
    }]);
  },
);

forEachBackend("a repost notifies the reposted post's author", async (backend) => {
  await using ix = await openBackendIndex(backend);
  await ix.apply(postOp(ALICE, "p1", "hello"), repostOp(BOB, "r1", ALICE_POST));
  assert.deepEqual(await notifications(ix), [{
    recipient_did: ALICE,
    kind: "repost",
    author_did: BOB,
    subject_uri: ALICE_POST,
    record_uri: `at://${BOB}/app.social.feed.repost/r1`,
  }]);
});

forEachBackend("a follow notifies the followed DID with a null subject", async (backend) => {
  await using ix = await openBackendIndex(backend);
  await ix.apply(profileOp(BOB, { displayName: "Bob" }), followOp(ALICE, "f1", BOB));
  assert.deepEqual(await notifications(ix), [{
    recipient_did: BOB,
    kind: "follow",
    author_did: ALICE,
    subject_uri: null,
    record_uri: uriOf(ALICE, COLLECTION_FOLLOW, "f1"),
  }]);
});

forEachBackend(
  "a reply notifies the parent's author with the reply's own URI as subject",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    await ix.apply(
      postOp(ALICE, "p1", "hello"),
      postOp(BOB, "b1", "hi back", { parent: ALICE_POST }),
    );
    const reply = uriOf(BOB, COLLECTION_POST, "b1");
    assert.deepEqual(await notifications(ix), [{
      recipient_did: ALICE,
      kind: "reply",
      author_did: BOB,
      subject_uri: reply,
      record_uri: reply,
    }]);
  },
);

forEachBackend(
  "no notification to oneself: self-like, self-repost, self-reply, self-follow",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    await ix.apply(
      postOp(ALICE, "p1", "hello"),
      likeOp(ALICE, "l1", ALICE_POST),
      repostOp(ALICE, "r1", ALICE_POST),
      postOp(ALICE, "p2", "thread", { parent: ALICE_POST }),
      followOp(ALICE, "f1", ALICE),
    );
    assert.deepEqual(await notifications(ix), []);
    assert.deepEqual(
      await ix.row("SELECT like_count, repost_count FROM posts WHERE uri = ?", ALICE_POST),
      {
        like_count: 1,
        repost_count: 1,
      },
    );
  },
);

forEachBackend(
  "no notification to a recipient unknown to the index (spec 3.1)",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    const unknownPost = uriOf(CAROL, COLLECTION_POST, "c1");
    await ix.apply(
      likeOp(BOB, "l1", unknownPost),
      repostOp(BOB, "r1", unknownPost),
      postOp(BOB, "b1", "reply", { parent: unknownPost }),
      followOp(BOB, "f1", CAROL),
    );
    // The follow was decided before its own follower-count row for CAROL existed.
    assert.deepEqual(await notifications(ix), []);
    assert.deepEqual(await ix.row("SELECT has_record, handle FROM profiles WHERE did = ?", CAROL), {
      has_record: 0,
      handle: null,
    });
    // From now on CAROL has a profile row: she is known ("has a profile row or a post row").
    await ix.apply(followOp(ALICE, "f2", CAROL));
    assert.deepEqual((await notifications(ix)).map((n) => [n.kind, n.author_did]), [[
      "follow",
      ALICE,
    ]]);
  },
);

forEachBackend("an account op makes a DID known before it has posted", async (backend) => {
  await using ix = await openBackendIndex(backend);
  await ix.apply({ kind: "account", did: CAROL }, followOp(BOB, "f1", CAROL));
  assert.deepEqual((await notifications(ix)).map((n) => [n.kind, n.author_did]), [["follow", BOB]]);
});

forEachBackend(
  "a recipient is known through a post, a profile record or a handle",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    await ix.apply(
      postOp(ALICE, "p1", "hello"),
      profileOp(BOB, {}),
      handleOp(CAROL, "carol.test"),
      followOp(didOf("dave"), "d1", ALICE),
      followOp(didOf("dave"), "d2", BOB),
      followOp(didOf("dave"), "d3", CAROL),
    );
    const recipients = (await notifications(ix)).map((n) => n.recipient_did);
    assert.deepEqual(recipients, [ALICE, BOB, CAROL]);
  },
);

forEachBackend("unlike then relike creates no second notification (spec 3.1)", async (backend) => {
  await using ix = await openBackendIndex(backend);
  await ix.apply(postOp(ALICE, "p1", "hello"), likeOp(BOB, "l1", ALICE_POST));
  await ix.apply(deleteOp(BOB, COLLECTION_LIKE, "l1"));
  assert.equal((await notifications(ix)).length, 1, "the unlike keeps the notification");
  await ix.apply(likeOp(BOB, "l2", ALICE_POST));
  assert.equal((await notifications(ix)).length, 1);
  assert.deepEqual(await ix.row("SELECT like_count FROM posts"), { like_count: 1 });
});

forEachBackend("unfollow then refollow creates no second notification", async (backend) => {
  await using ix = await openBackendIndex(backend);
  await ix.apply(postOp(ALICE, "p1", "hello"), followOp(BOB, "f1", ALICE));
  await ix.apply(deleteOp(BOB, COLLECTION_FOLLOW, "f1"), followOp(BOB, "f2", ALICE));
  assert.equal((await notifications(ix)).length, 1);
});

forEachBackend("a redelivered reply creates no second notification", async (backend) => {
  await using ix = await openBackendIndex(backend);
  const reply = postOp(BOB, "b1", "hi", { parent: ALICE_POST });
  await ix.apply(postOp(ALICE, "p1", "hello"), reply);
  await ix.apply(reply);
  await ix.apply({ ...postOp(BOB, "b1", "hi, edited", { parent: ALICE_POST }), action: "update" });
  assert.equal((await notifications(ix)).length, 1);
});

endBackendTests();
