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
  openTestIndex,
  postOp,
  profileOp,
  repostOp,
  type TestIndex,
  uriOf,
} from "../../_fixtures.ts";

const ALICE = didOf("alice");
const BOB = didOf("bob");
const P1 = uriOf(ALICE, COLLECTION_POST, "p1");
const AVATAR = cidOf("avatar");

function search(ix: TestIndex, q: string): unknown[] {
  return ix.rows(
    `SELECT p.uri FROM posts_fts f JOIN posts p ON p.id = f.rowid
     WHERE posts_fts MATCH ? ORDER BY f.rowid DESC`,
    q,
  ).map((r) => r.uri);
}

Deno.test("placeholderHandle truncates the DID with an ellipsis and no @ (spec 2.1)", () => {
  assert.equal(placeholderHandle("did:plc:abcdefghijklmnopqrstuvwx"), "did:plc:abcdefghij\u2026");
  assert.equal(isPlaceholderHandle("did:plc:abcdefghij\u2026"), true);
  assert.equal(isPlaceholderHandle("alice.test"), false);
});

Deno.test("a post is stored with every wire field of spec 2.1", () => {
  using ix = openTestIndex();
  const embed = { $type: "com.example.unknown", nested: { x: [1, "two"] } };
  const op = postOp(ALICE, "p1", "hello world", { embed, langs: ["en"] });
  assert.deepEqual(ix.apply(op), { applied: 1, skipped: 0 });
  assert.deepEqual(ix.row("SELECT * FROM posts"), {
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
  });
  assert.deepEqual(ix.row("SELECT post_count FROM profiles WHERE did = ?", ALICE), {
    post_count: 1,
  });
  assert.deepEqual(search(ix, "world"), [P1]);
});

Deno.test("a reply stores parent and root; langs default to []", () => {
  using ix = openTestIndex();
  const root = uriOf(BOB, COLLECTION_POST, "r");
  ix.apply(postOp(ALICE, "p1", "re", { parent: uriOf(BOB, COLLECTION_POST, "x"), root }));
  assert.deepEqual(ix.row("SELECT parent_uri, root_uri, langs, embed FROM posts"), {
    parent_uri: uriOf(BOB, COLLECTION_POST, "x"),
    root_uri: root,
    langs: "[]",
    embed: null,
  });
});

Deno.test("an update replaces content and search text but keeps id and indexed_at", () => {
  using ix = openTestIndex();
  ix.apply(postOp(ALICE, "p1", "first words"));
  ix.apply(postOp(ALICE, "p1", "second thoughts", { update: true }));
  assert.deepEqual(ix.row("SELECT id, text, indexed_at FROM posts"), {
    id: 1,
    text: "second thoughts",
    indexed_at: "2024-06-01T00:00:01.000Z",
  });
  assert.deepEqual(search(ix, "first"), []);
  assert.deepEqual(search(ix, "thoughts"), [P1]);
  assert.deepEqual(ix.row("SELECT post_count FROM profiles"), { post_count: 1 });
});

Deno.test("a post delete removes the row and its search entry and decrements post_count", () => {
  using ix = openTestIndex();
  ix.apply(postOp(ALICE, "p1", "gone soon"), postOp(ALICE, "p2", "stays"));
  ix.apply(deleteOp(ALICE, COLLECTION_POST, "p1"), deleteOp(ALICE, COLLECTION_POST, "p1"));
  assert.deepEqual(ix.rows("SELECT rkey FROM posts"), [{ rkey: "p2" }]);
  assert.deepEqual(search(ix, "gone"), []);
  assert.deepEqual(ix.row("SELECT count(*) AS n FROM posts_fts"), { n: 1 });
  assert.deepEqual(ix.row("SELECT post_count FROM profiles"), { post_count: 1 });
});

Deno.test("like, unlike, like leaves like_count 1; redelivery never double-counts", () => {
  using ix = openTestIndex();
  ix.apply(postOp(ALICE, "p1", "hello"));
  ix.apply(likeOp(BOB, "l1", P1), likeOp(BOB, "l1", P1));
  assert.deepEqual(ix.row("SELECT like_count FROM posts"), { like_count: 1 });
  ix.apply(deleteOp(BOB, COLLECTION_LIKE, "l1"), deleteOp(BOB, COLLECTION_LIKE, "l1"));
  assert.deepEqual(ix.row("SELECT like_count FROM posts"), { like_count: 0 });
  ix.apply(likeOp(BOB, "l2", P1), repostOp(BOB, "r1", P1), repostOp(ALICE, "r2", P1));
  ix.apply(deleteOp(ALICE, COLLECTION_REPOST, "r2"));
  assert.deepEqual(ix.row("SELECT like_count, repost_count FROM posts"), {
    like_count: 1,
    repost_count: 1,
  });
});

Deno.test("likes and reposts that arrive before their post are counted when it arrives", () => {
  using ix = openTestIndex();
  ix.apply(likeOp(BOB, "l1", P1), likeOp(didOf("carol"), "l1", P1), repostOp(BOB, "r1", P1));
  ix.apply(postOp(ALICE, "p1", "late"));
  assert.deepEqual(ix.row("SELECT like_count, repost_count FROM posts"), {
    like_count: 2,
    repost_count: 1,
  });
});

Deno.test("a post takes the author's avatar and handle from the profile cache", () => {
  using ix = openTestIndex();
  ix.apply(handleOp(ALICE, "Alice.Test"), profileOp(ALICE, { avatar: AVATAR }));
  ix.apply(postOp(ALICE, "p1", "hello"));
  assert.deepEqual(ix.row("SELECT handle, avatar_cid FROM posts"), {
    handle: "alice.test",
    avatar_cid: AVATAR,
  });
});

Deno.test("re-indexing a post never replaces a known avatar with null (spec 2.1)", () => {
  using ix = openTestIndex();
  ix.apply(postOp(ALICE, "p1", "before the profile"));
  ix.apply(profileOp(ALICE, { avatar: AVATAR }));
  assert.deepEqual(ix.row("SELECT avatar_cid FROM posts"), { avatar_cid: AVATAR });
  ix.apply(deleteOp(ALICE, COLLECTION_PROFILE, PROFILE_RKEY));
  ix.apply(postOp(ALICE, "p1", "edited", { update: true }));
  assert.deepEqual(ix.row("SELECT text, avatar_cid FROM posts"), {
    text: "edited",
    avatar_cid: AVATAR,
  });
});

Deno.test("deleting the profile record clears its fields but keeps counters and handle", () => {
  using ix = openTestIndex();
  ix.apply(
    handleOp(ALICE, "alice.test"),
    profileOp(ALICE, { displayName: "Alice", description: "hi", avatar: AVATAR, banner: AVATAR }),
    postOp(ALICE, "p1", "hello"),
  );
  ix.apply(deleteOp(ALICE, COLLECTION_PROFILE, PROFILE_RKEY));
  assert.deepEqual(
    ix.row(
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
});

Deno.test("a handle op renames the author's posts and clears their handle attempt time", () => {
  using ix = openTestIndex();
  ix.apply(postOp(ALICE, "p1", "one"), postOp(ALICE, "p2", "two"));
  ix.db.exec("UPDATE posts SET handle_attempted_at = '2024-06-01T00:00:00.000Z'");
  ix.apply(handleOp(ALICE, "alice.test"));
  assert.deepEqual(ix.rows("SELECT handle, handle_attempted_at FROM posts"), [
    { handle: "alice.test", handle_attempted_at: null },
    { handle: "alice.test", handle_attempted_at: null },
  ]);
  assert.deepEqual(ix.row("SELECT handle, has_record FROM profiles"), {
    handle: "alice.test",
    has_record: 0,
  });
  ix.apply(handleOp(ALICE, null));
  assert.deepEqual(ix.rows("SELECT DISTINCT handle FROM posts"), [
    { handle: placeholderHandle(ALICE) },
  ]);
  assert.deepEqual(ix.row("SELECT handle FROM profiles"), { handle: null });
});

Deno.test("a handle the account host gives another DID is taken from the previous holder", () => {
  using ix = openTestIndex();
  ix.apply(handleOp(ALICE, "name.test"), postOp(ALICE, "p1", "one"));
  ix.apply({ ...handleOp(BOB, "name.test"), authoritative: true });
  assert.deepEqual(ix.rows("SELECT did, handle FROM profiles ORDER BY did"), [
    { did: ALICE, handle: null },
    { did: BOB, handle: "name.test" },
  ]);
  assert.deepEqual(ix.row("SELECT handle FROM posts"), { handle: placeholderHandle(ALICE) });
});

Deno.test("a claim from a DID document or the public stream cannot take a held handle", () => {
  using ix = openTestIndex();
  ix.apply(handleOp(ALICE, "name.test"), postOp(ALICE, "p1", "one"));
  const result = ix.apply(handleOp(BOB, "NAME.test"), postOp(BOB, "p2", "two"));
  assert.deepEqual(result, { applied: 1, skipped: 1 });
  assert.deepEqual(ix.rows("SELECT did, handle FROM profiles ORDER BY did"), [
    { did: ALICE, handle: "name.test" },
    { did: BOB, handle: null },
  ]);
  assert.deepEqual(ix.rows("SELECT did, handle FROM posts ORDER BY did"), [
    { did: ALICE, handle: "name.test" },
    { did: BOB, handle: placeholderHandle(BOB) },
  ]);
  assert.equal(ix.writer.stats().skippedByReason.handle_conflict, 1);
  // An unheld handle is fine, and so is re-asserting one's own.
  assert.deepEqual(ix.apply(handleOp(BOB, "bob.test"), handleOp(ALICE, "name.test")), {
    applied: 2,
    skipped: 0,
  });
});

Deno.test("a profile record takes the handle of the author's indexed posts", () => {
  using ix = openTestIndex();
  ix.apply(postOp(ALICE, "p1", "one"));
  ix.db.exec("UPDATE posts SET handle = 'alice.test'"); // as a handle resolver would
  ix.apply(profileOp(ALICE, { displayName: "Alice" }));
  assert.deepEqual(ix.row("SELECT handle, display_name, has_record FROM profiles"), {
    handle: "alice.test",
    display_name: "Alice",
    has_record: 1,
  });
});
