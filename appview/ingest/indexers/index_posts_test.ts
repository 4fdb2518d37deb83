import assert from "node:assert/strict";
import {
  COLLECTION_LIKE,
  COLLECTION_POST,
  COLLECTION_PROFILE,
  COLLECTION_REPOST,
  PROFILE_RKEY,
} from "../../../shared/nsid.ts";
import { isPlaceholderHandle, placeholderHandle } from "../../db/handles.ts";
import {
  cidOf,
  deleteOp,
  didOf,
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
const P1 = uriOf(ALICE, COLLECTION_POST, "p1");
const AVATAR = cidOf("avatar");

/** The URIs of the posts a search for `q` finds, newest first (the store's search view). */
async function search(ix: BackendIndex, q: string): Promise<unknown[]> {
  const page = await ix.store.views.search.search(q, { limit: 100, before: null });
  return page.rows.map((r) => r.uri);
}

Deno.test("placeholderHandle truncates the DID with an ellipsis and no @ (spec 2.1)", () => {
  assert.equal(placeholderHandle("did:plc:abcdefghijklmnopqrstuvwx"), "did:plc:abcdefghij\u2026");
  assert.equal(isPlaceholderHandle("did:plc:abcdefghij\u2026"), true);
  assert.equal(isPlaceholderHandle("alice.test"), false);
});

forEachBackend("a post is stored with every wire field of spec 2.1", async (backend) => {
  await using ix = await openBackendIndex(backend);
  const embed = { $type: "com.example.unknown", nested: { x: [1, "two"] } };
  const op = postOp(ALICE, "p1", "hello world", { embed, langs: ["en"] });
  assert.deepEqual(await ix.apply(op), { applied: 1, skipped: 0 });
  assert.deepEqual(await ix.row("SELECT * FROM posts"), {
    id: 1,
    author: 1, // the interned id of ALICE, the first DID this index saw
    uri: P1,
    did: ALICE,
    handle: placeholderHandle(ALICE),
    rkey: "p1",
    collection: COLLECTION_POST,
    text: "hello world",
    cid: op.cid,
    parent_uri: null,
    root_uri: null,
    embed: JSON.stringify(embed),
    langs: '["en"]',
    created_at: "2024-05-01T12:00:00.000Z",
    like_count: 0,
    repost_count: 0,
    avatar_cid: null,
    indexed_at: "2024-06-01T00:00:01.000Z",
    handle_attempted_at: null,
    // PostgreSQL keeps the search vector in the row (schema version 11), SQLite in posts_fts.
    ...(backend === "postgres" ? { search_vector: "'hello':1 'world':2" } : {}),
  });
  assert.deepEqual(await ix.row("SELECT post_count FROM profiles WHERE did = ?", ALICE), {
    post_count: 1,
  });
  assert.deepEqual(await search(ix, "world"), [P1]);
});

forEachBackend("a reply stores parent and root; langs default to []", async (backend) => {
  await using ix = await openBackendIndex(backend);
  const root = uriOf(BOB, COLLECTION_POST, "r");
  await ix.apply(postOp(ALICE, "p1", "re", { parent: uriOf(BOB, COLLECTION_POST, "x"), root }));
  assert.deepEqual(await ix.row("SELECT parent_uri, root_uri, langs, embed FROM posts"), {
    parent_uri: uriOf(BOB, COLLECTION_POST, "x"),
    root_uri: root,
    langs: "[]",
    embed: null,
  });
});

forEachBackend(
  "an update replaces content and search text but keeps id and indexed_at",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    await ix.apply(postOp(ALICE, "p1", "first words"));
    await ix.apply(postOp(ALICE, "p1", "second thoughts", { update: true }));
    assert.deepEqual(await ix.row("SELECT id, text, indexed_at FROM posts"), {
      id: 1,
      text: "second thoughts",
      indexed_at: "2024-06-01T00:00:01.000Z",
    });
    assert.deepEqual(await search(ix, "first"), []);
    assert.deepEqual(await search(ix, "thoughts"), [P1]);
    assert.deepEqual(await ix.row("SELECT post_count FROM profiles"), { post_count: 1 });
  },
);

forEachBackend(
  "a post delete removes the row and its search entry and decrements post_count",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    await ix.apply(postOp(ALICE, "p1", "gone soon"), postOp(ALICE, "p2", "stays"));
    await ix.apply(deleteOp(ALICE, COLLECTION_POST, "p1"), deleteOp(ALICE, COLLECTION_POST, "p1"));
    assert.deepEqual(await ix.rows("SELECT rkey FROM posts"), [{ rkey: "p2" }]);
    assert.deepEqual(await search(ix, "gone"), []);
    // posts_fts is SQLite's full-text table (PostgreSQL's search vector is a column of posts).
    if (ix.backend === "sqlite") {
      assert.deepEqual(await ix.row("SELECT count(*) AS n FROM posts_fts"), { n: 1 });
    }
    assert.deepEqual(await ix.row("SELECT post_count FROM profiles"), { post_count: 1 });
  },
);

forEachBackend(
  "like, unlike, like leaves like_count 1; redelivery never double-counts",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    await ix.apply(postOp(ALICE, "p1", "hello"));
    await ix.apply(likeOp(BOB, "l1", P1), likeOp(BOB, "l1", P1));
    assert.deepEqual(await ix.row("SELECT like_count FROM posts"), { like_count: 1 });
    await ix.apply(deleteOp(BOB, COLLECTION_LIKE, "l1"), deleteOp(BOB, COLLECTION_LIKE, "l1"));
    assert.deepEqual(await ix.row("SELECT like_count FROM posts"), { like_count: 0 });
    await ix.apply(likeOp(BOB, "l2", P1), repostOp(BOB, "r1", P1), repostOp(ALICE, "r2", P1));
    await ix.apply(deleteOp(ALICE, COLLECTION_REPOST, "r2"));
    assert.deepEqual(await ix.row("SELECT like_count, repost_count FROM posts"), {
      like_count: 1,
      repost_count: 1,
    });
  },
);

forEachBackend(
  "likes and reposts that arrive before their post are counted when it arrives",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    await ix.apply(
      likeOp(BOB, "l1", P1),
      likeOp(didOf("carol"), "l1", P1),
      repostOp(BOB, "r1", P1),
    );
    await ix.apply(postOp(ALICE, "p1", "late"));
    assert.deepEqual(await ix.row("SELECT like_count, repost_count FROM posts"), {
      like_count: 2,
      repost_count: 1,
    });
  },
);

forEachBackend(
  "a post takes the author's avatar and handle from the profile cache",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    await ix.apply(handleOp(ALICE, "Alice.Test"), profileOp(ALICE, { avatar: AVATAR }));
    await ix.apply(postOp(ALICE, "p1", "hello"));
    assert.deepEqual(await ix.row("SELECT handle, avatar_cid FROM posts"), {
      handle: "alice.test",
      avatar_cid: AVATAR,
    });
  },
);

forEachBackend(
  "re-indexing a post never replaces a known avatar with null (spec 2.1)",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    await ix.apply(postOp(ALICE, "p1", "before the profile"));
    await ix.apply(profileOp(ALICE, { avatar: AVATAR }));
    assert.deepEqual(await ix.row("SELECT avatar_cid FROM posts"), { avatar_cid: AVATAR });
    await ix.apply(deleteOp(ALICE, COLLECTION_PROFILE, PROFILE_RKEY));
    await ix.apply(postOp(ALICE, "p1", "edited", { update: true }));
    assert.deepEqual(await ix.row("SELECT text, avatar_cid FROM posts"), {
      text: "edited",
      avatar_cid: AVATAR,
    });
  },
);

forEachBackend(
  "deleting the profile record clears its fields but keeps counters and handle",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    await ix.apply(
      handleOp(ALICE, "alice.test"),
      profileOp(ALICE, { displayName: "Alice", description: "hi", avatar: AVATAR, banner: AVATAR }),
      postOp(ALICE, "p1", "hello"),
    );
    await ix.apply(deleteOp(ALICE, COLLECTION_PROFILE, PROFILE_RKEY));
    assert.deepEqual(
      await ix.row(
        `SELECT handle, display_name, description, avatar_cid, banner_cid, has_record, post_count
       FROM profiles`,
      ),
      {
        handle: "alice.test",
        display_name: null,
        description: null,
        avatar_cid: null,
        banner_cid: null,
        has_record: 0,
        post_count: 1,
      },
    );
  },
);

forEachBackend(
  "a handle op renames the author's posts and clears their handle attempt time",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    await ix.apply(postOp(ALICE, "p1", "one"), postOp(ALICE, "p2", "two"));
    await ix.rows("UPDATE posts SET handle_attempted_at = '2024-06-01T00:00:00.000Z'");
    await ix.apply(handleOp(ALICE, "alice.test"));
    assert.deepEqual(await ix.rows("SELECT handle, handle_attempted_at FROM posts"), [
      { handle: "alice.test", handle_attempted_at: null },
      { handle: "alice.test", handle_attempted_at: null },
    ]);
    assert.deepEqual(await ix.row("SELECT handle, has_record FROM profiles"), {
      handle: "alice.test",
      has_record: 0,
    });
    await ix.apply(handleOp(ALICE, null));
    assert.deepEqual(await ix.rows("SELECT DISTINCT handle FROM posts"), [
      { handle: placeholderHandle(ALICE) },
    ]);
    assert.deepEqual(await ix.row("SELECT handle FROM profiles"), { handle: null });
  },
);

forEachBackend(
  "a handle the account host gives another DID is taken from the previous holder",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    await ix.apply(handleOp(ALICE, "name.test"), postOp(ALICE, "p1", "one"));
    await ix.apply({ ...handleOp(BOB, "name.test"), authoritative: true });
    assert.deepEqual(await ix.rows("SELECT did, handle FROM profiles ORDER BY did"), [
      { did: ALICE, handle: null },
      { did: BOB, handle: "name.test" },
    ]);
    assert.deepEqual(await ix.row("SELECT handle FROM posts"), {
      handle: placeholderHandle(ALICE),
    });
  },
);

forEachBackend(
  "a claim from a DID document or the public stream cannot take a held handle",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    await ix.apply(handleOp(ALICE, "name.test"), postOp(ALICE, "p1", "one"));
    const result = await ix.apply(handleOp(BOB, "NAME.test"), postOp(BOB, "p2", "two"));
    assert.deepEqual(result, { applied: 1, skipped: 1 });
    assert.deepEqual(await ix.rows("SELECT did, handle FROM profiles ORDER BY did"), [
      { did: ALICE, handle: "name.test" },
      { did: BOB, handle: null },
    ]);
    assert.deepEqual(await ix.rows("SELECT did, handle FROM posts ORDER BY did"), [
      { did: ALICE, handle: "name.test" },
      { did: BOB, handle: placeholderHandle(BOB) },
    ]);
    assert.equal(ix.writer.stats().skippedByReason.handle_conflict, 1);
    // An unheld handle is fine, and so is re-asserting one's own.
    assert.deepEqual(await ix.apply(handleOp(BOB, "bob.test"), handleOp(ALICE, "name.test")), {
      applied: 2,
      skipped: 0,
    });
  },
);

forEachBackend(
  "a profile record takes the handle of the author's indexed posts",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    await ix.apply(postOp(ALICE, "p1", "one"));
    await ix.rows("UPDATE posts SET handle = 'alice.test'"); // as a handle resolver would
    await ix.apply(profileOp(ALICE, { displayName: "Alice" }));
    assert.deepEqual(await ix.row("SELECT handle, display_name, has_record FROM profiles"), {
      handle: "alice.test",
      display_name: "Alice",
      has_record: 1,
    });
  },
);

endBackendTests();
