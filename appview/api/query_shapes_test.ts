/**
 * Wire shapes of every query endpoint (spec part 2, 4.2): every member, its type and its order;
 * counters present or absent exactly as specified; invalid parameters answer 400.
 */

import assert from "node:assert/strict";
import { COLLECTION_POST, EMBED_IMAGES } from "../../shared/nsid.ts";
import {
  cidOf,
  didOf,
  followOp,
  handleOp,
  likeOp,
  postOp,
  profileOp,
  repostOp,
  uriOf,
} from "../_fixtures.ts";
import { placeholderHandle } from "../db/handles.ts";
import {
  assertPostShape,
  type Backend,
  endBackendTests,
  forEachBackend,
  openHarness,
  type QueryHarness,
} from "../_test_helpers.ts";

const ALICE = didOf("alice");
const BOB = didOf("bob");
const CAROL = didOf("carol"); // no handle known: placeholder
const AVATAR = cidOf("alice-avatar");
const BANNER = cidOf("alice-banner");
const P1 = uriOf(ALICE, COLLECTION_POST, "3kaaaaaaaaa22");
const R1 = uriOf(BOB, COLLECTION_POST, "3kbbbbbbbbb22");
const R2 = uriOf(CAROL, COLLECTION_POST, "3kccccccccc22");
const EMBED = {
  $type: EMBED_IMAGES,
  images: [{
    alt: "a cat",
    image: { $type: "blob", ref: { $link: cidOf("img") }, mimeType: "image/png", size: 10 },
  }],
};

/** Alice posts P1 (embed, langs); Bob replies R1; Carol replies to R1 (R2); likes, follows. */
async function seed(backend: Backend): Promise<QueryHarness> {
  const h = await openHarness(backend, { stepMs: 1000 });
  await h.apply(
    handleOp(ALICE, "alice.test"),
    handleOp(BOB, "bob.test"),
    profileOp(ALICE, {
      displayName: "Alice",
      description: "Hi there",
      avatar: AVATAR,
      banner: BANNER,
    }),
    postOp(ALICE, "3kaaaaaaaaa22", "hello world", { embed: EMBED, langs: ["en"] }),
    postOp(BOB, "3kbbbbbbbbb22", "hi alice", { parent: P1 }),
    postOp(CAROL, "3kccccccccc22", "hey both", { parent: R1, root: P1 }),
    likeOp(BOB, "3klike0000022", P1),
    repostOp(CAROL, "3krepost00022", P1),
    followOp(BOB, "3kfollow00022", ALICE),
    followOp(ALICE, "3kfollow00122", BOB),
    followOp(ALICE, "3kfollow00222", CAROL),
  );
  return h;
}

forEachBackend(
  "timeline answers {posts, cursor} with full Post shapes (spec 2.1, 4.2)",
  async (backend) => {
    await using h = await seed(backend);
    const { status, body } = await h.request(`/api/timeline/home?did=${ALICE}`);
    assert.equal(status, 200);
    assert.deepEqual(Object.keys(body), ["posts", "cursor"]);
    assert.equal(body.cursor, null);
    assert.deepEqual(body.posts.map((p: { uri: string }) => p.uri), [R2, R1]);
    for (const p of body.posts) assertPostShape(p);
    const [r2, r1] = body.posts;
    assert.deepEqual(r1, {
      uri: R1,
      did: BOB,
      handle: "bob.test",
      rkey: "3kbbbbbbbbb22",
      collection: COLLECTION_POST,
      text: "hi alice",
      cid: r1.cid,
      parent_uri: P1,
      root_uri: P1,
      embed: null,
      langs: [],
      created_at: "2024-05-01T12:00:00.000Z",
      like_count: 0,
      repost_count: 0,
      avatar_cid: null,
    });
    assert.equal(r2.handle, placeholderHandle(CAROL));
    assert.ok(r2.handle.startsWith("did:plc:") && r2.handle.endsWith("\u2026"));
  },
);

forEachBackend(
  "timeline cold start answers the newest posts when the viewer follows nobody",
  async (backend) => {
    await using h = await seed(backend);
    const { status, body } = await h.request(`/api/timeline/home?did=${CAROL}`);
    assert.equal(status, 200);
    assert.deepEqual(body.posts.map((p: { uri: string }) => p.uri), [R2, R1, P1]);
    const p1 = body.posts[2];
    assertPostShape(p1);
    assert.deepEqual(p1.embed, EMBED);
    assert.deepEqual(p1.langs, ["en"]);
    assert.equal(p1.like_count, 1);
    assert.equal(p1.repost_count, 1);
    assert.equal(p1.avatar_cid, AVATAR);
    assert.equal(p1.handle, "alice.test");
  },
);

forEachBackend(
  "profile by handle answers the cached profile in spec 2.4 order",
  async (backend) => {
    await using h = await seed(backend);
    const { status, body } = await h.request("/api/profile/alice.test");
    assert.equal(status, 200);
    assert.deepEqual(Object.keys(body), [
      "did",
      "handle",
      "posts",
      "followers",
      "following",
      "display_name",
      "description",
      "avatar_cid",
      "banner_cid",
      "post_count",
    ]);
    assert.equal(body.did, ALICE);
    assert.equal(body.handle, "alice.test");
    assert.deepEqual(body.posts.map((p: { uri: string }) => p.uri), [P1]);
    for (const p of body.posts) assertPostShape(p);
    assert.equal(body.followers, 1);
    assert.equal(body.following, 2);
    assert.equal(body.display_name, "Alice");
    assert.equal(body.description, "Hi there");
    assert.equal(body.avatar_cid, AVATAR);
    assert.equal(body.banner_cid, BANNER);
    assert.equal(body.post_count, 1);
  },
);

forEachBackend(
  "profile by handle matches case-insensitively and ignores a leading @",
  async (backend) => {
    await using h = await seed(backend);
    for (const handle of ["ALICE.Test", "@alice.test", "%40Alice.TEST"]) {
      const { status, body } = await h.request(`/api/profile/${handle}`);
      assert.equal(status, 200, handle);
      assert.equal(body.did, ALICE, handle);
      assert.equal(body.handle, "alice.test", handle);
    }
  },
);

forEachBackend(
  "profile of an unknown or placeholder handle is the synthetic empty profile",
  async (backend) => {
    await using h = await seed(backend);
    for (
      const handle of ["nobody.test", encodeURIComponent(placeholderHandle(CAROL)), "not a handle"]
    ) {
      const { status, body } = await h.request(`/api/profile/${handle}`);
      assert.equal(status, 200, handle);
      assert.deepEqual(body, {
        did: "",
        handle: decodeURIComponent(handle),
        posts: [],
        followers: 0,
        following: 0,
        display_name: null,
        description: null,
        avatar_cid: null,
        banner_cid: null,
        post_count: 0,
      });
    }
  },
);

forEachBackend(
  "profile by did serves accounts without handle or profile record",
  async (backend) => {
    await using h = await seed(backend);
    const { status, body } = await h.request(`/api/profile?did=${CAROL}`);
    assert.equal(status, 200);
    assert.equal(body.did, CAROL);
    assert.equal(body.handle, placeholderHandle(CAROL));
    assert.deepEqual(body.posts.map((p: { uri: string }) => p.uri), [R2]);
    assert.equal(body.followers, 1);
    assert.equal(body.following, 0);
    assert.equal(body.display_name, null);
    assert.equal(body.post_count, 1);
    const unknown = await h.request(`/api/profile?did=${didOf("zed")}`);
    assert.equal(unknown.status, 200);
    assert.equal(unknown.body.did, "");
    assert.deepEqual(unknown.body.posts, []);
  },
);

forEachBackend(
  "profile post_count is a live count when there is no cache row (spec 2.4)",
  async (backend) => {
    await using h = await openHarness(backend);
    const dave = didOf("dave");
    for (let i = 0; i < 60; i++) {
      await h.apply(postOp(dave, `3kdave${String(i).padStart(7, "0")}`, `p${i}`));
    }
    await h.rows("DELETE FROM profiles WHERE did = ?", dave);
    const { body } = await h.request(`/api/profile?did=${dave}`);
    assert.equal(body.posts.length, 50);
    assert.equal(body.post_count, 60);
    await h.rows("INSERT INTO profiles (did, post_count) VALUES (?, 7)", dave);
    assert.equal((await h.request(`/api/profile?did=${dave}`)).body.post_count, 7);
  },
);

forEachBackend("search answers {posts, q, cursor}, newest first", async (backend) => {
  await using h = await seed(backend);
  const { status, body } = await h.request("/api/search?q=alice");
  assert.equal(status, 200);
  assert.deepEqual(Object.keys(body), ["posts", "q", "cursor"]);
  assert.equal(body.q, "alice");
  assert.deepEqual(body.posts.map((p: { uri: string }) => p.uri), [R1]);
  for (const p of body.posts) assertPostShape(p);
  const both = await h.request("/api/search?q=" + encodeURIComponent("HELLO   world"));
  assert.deepEqual(both.body.posts.map((p: { uri: string }) => p.uri), [P1]);
});

forEachBackend(
  "search treats quotes, operators and unbalanced syntax as plain words",
  async (backend) => {
    await using h = await seed(backend);
    const inputs = [
      '"',
      'hello"',
      "hello AND",
      "NOT hello",
      "hello OR",
      "(hello",
      "hello)",
      "hello*",
      "^hello",
      "text:hello",
      "NEAR(hello world)",
      "-",
      "hello -",
      "''",
      "hello\u0000",
      "}{][",
    ];
    for (const q of inputs) {
      const { status, body } = await h.request(`/api/search?q=${encodeURIComponent(q)}`);
      assert.equal(status, 200, q);
      assert.equal(body.q, q);
      assert.ok(Array.isArray(body.posts), q);
    }
    const quoted = await h.request(`/api/search?q=${encodeURIComponent('"hello" (world')}`);
    assert.deepEqual(quoted.body.posts.map((p: { uri: string }) => p.uri), [P1]);
    const empty = await h.request("/api/search?q=");
    assert.deepEqual(empty.body, { posts: [], q: "", cursor: null });
  },
);

forEachBackend(
  "post by URI in the path answers ThreadResponse with parent and root (spec 2.8)",
  async (backend) => {
    await using h = await seed(backend);
    const { status, body } = await h.request(`/api/post/${R2}`);
    assert.equal(status, 200);
    assert.deepEqual(Object.keys(body), ["post", "thread", "like_count", "repost_count"]);
    assertPostShape(body.post);
    assert.equal(body.post.uri, R2);
    assert.deepEqual(Object.keys(body.thread), ["parent", "root"]);
    assert.equal(body.thread.parent.uri, R1);
    assert.equal(body.thread.root.uri, P1);
    assertPostShape(body.thread.parent);
    assert.equal(body.like_count, 0);
    assert.equal(body.repost_count, 0);
    const top = await h.request(`/api/post/${encodeURIComponent(P1)}`);
    assert.equal(top.body.post.uri, P1);
    assert.deepEqual(top.body.thread, { parent: null, root: null });
    assert.equal(top.body.like_count, 1);
    assert.equal(top.body.repost_count, 1);
  },
);

forEachBackend(
  "post not indexed answers post null and no counters (spec 4.2 rule 4)",
  async (backend) => {
    await using h = await seed(backend);
    const missing = uriOf(BOB, COLLECTION_POST, "3kmissing0022");
    const { status, body } = await h.request(`/api/post/${missing}`);
    assert.equal(status, 200);
    assert.deepEqual(body, { post: null, thread: { parent: null, root: null } });
  },
);

forEachBackend(
  "thread answers ThreadFullResponse; viewer flags only with viewerDid (spec 2.8)",
  async (backend) => {
    await using h = await seed(backend);
    for (const path of [`/api/thread?uri=${encodeURIComponent(P1)}`, `/api/thread/${P1}`]) {
      const { status, body } = await h.request(path);
      assert.equal(status, 200, path);
      assert.deepEqual(Object.keys(body), [
        "post",
        "parents",
        "root",
        "replies",
        "like_count",
        "repost_count",
      ]);
      assert.equal(body.post.uri, P1);
      assert.deepEqual(body.parents, []);
      assert.equal(body.root, null);
      assert.deepEqual(body.replies.map((p: { uri: string }) => p.uri), [R1]);
      assert.equal(body.like_count, 1);
      assert.equal(body.repost_count, 1);
    }
    const bob = await h.request(`/api/thread?uri=${encodeURIComponent(P1)}&viewerDid=${BOB}`);
    assert.equal(bob.body.viewer_liked, true);
    assert.equal(bob.body.viewer_reposted, false);
    const carol = await h.request(`/api/thread/${P1}?viewerDid=${CAROL}`);
    assert.equal(carol.body.viewer_liked, false);
    assert.equal(carol.body.viewer_reposted, true);
    const leaf = await h.request(`/api/thread/${R2}`);
    assert.deepEqual(leaf.body.parents.map((p: { uri: string }) => p.uri), [P1, R1]);
    assert.equal(leaf.body.root.uri, P1);
    for (const p of [...leaf.body.parents, leaf.body.root, leaf.body.post]) assertPostShape(p);
    const missing = await h.request(
      `/api/thread/${uriOf(BOB, COLLECTION_POST, "3kmissing0022")}?viewerDid=${BOB}`,
    );
    assert.deepEqual(missing.body, { post: null, parents: [], root: null, replies: [] });
  },
);

forEachBackend(
  "thread of a 25-deep reply chain answers 20 parents root-first (spec 4.2 rule 5)",
  async (backend) => {
    await using h = await openHarness(backend, { stepMs: 1 });
    const uris: string[] = [];
    for (let i = 0; i < 26; i++) {
      const rkey = `3kchain${String(i).padStart(6, "0")}`;
      await h.apply(
        postOp(BOB, rkey, `level ${i}`, i === 0 ? {} : { parent: uris[i - 1], root: uris[0] }),
      );
      uris.push(uriOf(BOB, COLLECTION_POST, rkey));
    }
    const { body } = await h.request(`/api/thread/${uris[25]}`);
    assert.equal(body.parents.length, 20);
    assert.deepEqual(body.parents.map((p: { uri: string }) => p.uri), uris.slice(5, 25));
    assert.equal(body.parents[0].parent_uri, uris[4]);
    assert.equal(body.parents[19].uri, uris[24]);
    assert.equal(body.root.uri, uris[0]);
  },
);

forEachBackend("notifications answer hydrated spec 2.7 shapes, newest first", async (backend) => {
  await using h = await seed(backend);
  const { status, body } = await h.request(`/api/notifications?did=${ALICE}`);
  assert.equal(status, 200);
  assert.deepEqual(Object.keys(body), ["notifications", "cursor"]);
  assert.equal(body.cursor, null);
  const kinds = body.notifications.map((n: { kind: string }) => n.kind);
  assert.deepEqual(kinds, ["follow", "repost", "like", "reply"]);
  for (const n of body.notifications) {
    assert.deepEqual(Object.keys(n), [
      "id",
      "kind",
      "author_did",
      "author_handle",
      "author_display_name",
      "author_avatar_cid",
      "subject_uri",
      "subject_text",
      "created_at",
      "indexed_at",
      "read_at",
    ]);
    assert.ok(Number.isInteger(n.id));
    assert.equal(typeof n.author_handle, "string");
    assert.ok(!n.author_handle.startsWith("@"));
    assert.equal(n.read_at, null);
  }
  const [follow, repost, like, reply] = body.notifications;
  assert.deepEqual(
    { ...follow, id: 0, indexed_at: "" },
    {
      id: 0,
      kind: "follow",
      author_did: BOB,
      author_handle: "bob.test",
      author_display_name: null,
      author_avatar_cid: null,
      subject_uri: null,
      subject_text: null,
      created_at: "2024-05-01T12:00:00.000Z",
      indexed_at: "",
      read_at: null,
    },
  );
  assert.equal(repost.author_handle, placeholderHandle(CAROL));
  assert.equal(repost.subject_uri, P1);
  assert.equal(repost.subject_text, "hello world");
  assert.equal(like.subject_text, "hello world");
  assert.equal(reply.subject_uri, R1);
  assert.equal(reply.subject_text, "hi alice");
  assert.ok(follow.indexed_at > repost.indexed_at);
});

forEachBackend("notifications count and seen follow spec 3.1", async (backend) => {
  await using h = await seed(backend);
  const count = async () => (await h.request(`/api/notifications/count?did=${ALICE}`)).body;
  assert.deepEqual(await count(), { count: 4 });
  const list = (await h.request(`/api/notifications?did=${ALICE}`)).body.notifications;
  const seen = (seenAt: string | null) =>
    h.request("/api/notifications/seen", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ did: ALICE, seenAt }),
    });
  // Up to and including the second newest.
  let res = await seen(list[1].indexed_at);
  assert.equal(res.status, 200);
  assert.deepEqual(res.body, { ok: true, updated: 3 });
  assert.deepEqual(await count(), { count: 1 });
  res = await seen(list[1].indexed_at);
  assert.deepEqual(res.body, { ok: true, updated: 0 });
  // A time past the last four-digit year (here 10000-01-01 in UTC) still covers everything.
  res = await seen("9999-12-31T23:59:59-23:59");
  assert.deepEqual(res.body, { ok: true, updated: 1 });
  assert.deepEqual(await count(), { count: 0 });
  assert.deepEqual((await seen(null)).body, { ok: true, updated: 0 });
  const after = (await h.request(`/api/notifications?did=${ALICE}`)).body.notifications;
  for (const n of after) assert.equal(typeof n.read_at, "string");
});

forEachBackend("followers and following answer actor cards (spec 2.6)", async (backend) => {
  await using h = await seed(backend);
  const followers = await h.request(`/api/followers?did=${ALICE}`);
  assert.equal(followers.status, 200);
  assert.deepEqual(followers.body, {
    profiles: [{ did: BOB, handle: "bob.test", display_name: null, avatar_cid: null }],
    cursor: null,
  });
  const following = await h.request(`/api/following?did=${ALICE}`);
  assert.deepEqual(following.body, {
    profiles: [
      { did: CAROL, handle: placeholderHandle(CAROL), display_name: null, avatar_cid: null },
      { did: BOB, handle: "bob.test", display_name: null, avatar_cid: null },
    ],
    cursor: null,
  });
  const bobFollows = await h.request(`/api/following?did=${BOB}`);
  assert.deepEqual(bobFollows.body.profiles, [
    { did: ALICE, handle: "alice.test", display_name: "Alice", avatar_cid: AVATAR },
  ]);
});

forEachBackend(
  "invalid parameters answer 400 InvalidRequest naming the parameter",
  async (backend) => {
    await using h = await seed(backend);
    const cases: [string, RegExp][] = [
      ["/api/timeline/home", /did/],
      ["/api/timeline/home?did=alice", /Invalid did: alice/],
      [`/api/timeline/home?did=${ALICE}&limit=0`, /Invalid limit: 0/],
      [`/api/timeline/home?did=${ALICE}&limit=abc`, /Invalid limit: abc/],
      [`/api/timeline/home?did=${ALICE}&limit=-5`, /Invalid limit: -5/],
      [`/api/timeline/home?did=${ALICE}&cursor=!!`, /Invalid cursor: !!/],
      [`/api/timeline/home?did=${ALICE}&cursor=bm90LWpzb24`, /Invalid cursor/],
      [`/api/notifications?did=${ALICE}&cursor=WyJ4IiwxXQ`, /Invalid cursor/],
      ["/api/notifications", /did/],
      ["/api/notifications/count", /did/],
      ["/api/followers", /did/],
      ["/api/following?did=x", /Invalid did/],
      ["/api/search", /Missing required parameter: q/],
      ["/api/search?q=a&limit=1.5", /Invalid limit/],
      ["/api/search?q=a&cursor=WyJ4Il0", /Invalid cursor/],
      ["/api/profile", /Missing required parameter: did/],
      ["/api/thread", /Missing required parameter: uri/],
      ["/api/thread?uri=nope", /Invalid uri: nope/],
      [`/api/thread?uri=${encodeURIComponent(P1)}&viewerDid=bob`, /Invalid viewerDid: bob/],
      ["/api/post/at://not-a-did", /Invalid uri/],
    ];
    for (const [path, message] of cases) {
      const { status, body } = await h.request(path);
      assert.equal(status, 400, path);
      assert.equal(body.error, "InvalidRequest", path);
      assert.match(body.message, message, path);
    }
    const seen = async (payload: string) =>
      await h.request("/api/notifications/seen", { method: "POST", body: payload });
    for (
      const [payload, message] of [
        ["{", /not valid JSON/],
        ["[]", /not a JSON object/],
        [JSON.stringify({ seenAt: null }), /did/],
        [JSON.stringify({ did: ALICE }), /seenAt/],
        [JSON.stringify({ did: ALICE, seenAt: "yesterday" }), /Invalid seenAt/],
        [JSON.stringify({ did: ALICE, seenAt: 5 }), /Invalid seenAt/],
      ] as const
    ) {
      const { status, body } = await seen(payload);
      assert.equal(status, 400, payload);
      assert.equal(body.error, "InvalidRequest", payload);
      assert.match(body.message, message, payload);
    }
    const big = await seen(JSON.stringify({ did: ALICE, seenAt: null, pad: "x".repeat(20_000) }));
    assert.equal(big.status, 413);
    assert.equal(big.body.error, "PayloadTooLarge");
  },
);

forEachBackend("limit above 100 is served as 100", async (backend) => {
  await using h = await openHarness(backend, { stepMs: 1 });
  const ops = [];
  for (let i = 0; i < 120; i++) ops.push(postOp(BOB, `3kcap${String(i).padStart(8, "0")}`, "x"));
  await h.apply(...ops);
  for (const limit of ["1000", "10000000000", "9".repeat(400)]) {
    const { status, body } = await h.request(`/api/timeline/home?did=${ALICE}&limit=${limit}`);
    assert.equal(status, 200, limit);
    assert.equal(body.posts.length, 100);
    assert.equal(typeof body.cursor, "string");
  }
});

forEachBackend(
  "a known path with the wrong method is 405 naming the allowed ones; an unknown path 404",
  async (backend) => {
    await using h = await openHarness(backend);
    const cases: [string, string, number, Record<string, string>, string | null][] = [
      ["PUT", "/api/search", 405, {
        error: "MethodNotAllowed",
        message: "Method PUT is not allowed on /api/search; use GET",
      }, "GET"],
      ["GET", "/api/notifications/seen", 405, {
        error: "MethodNotAllowed",
        message: "Method GET is not allowed on /api/notifications/seen; use POST",
      }, "POST"],
      ["DELETE", "/api/profile/alice.test", 405, {
        error: "MethodNotAllowed",
        message: "Method DELETE is not allowed on /api/profile/alice.test; use GET",
      }, "GET"],
      ["PUT", "/api/post", 405, {
        error: "MethodNotAllowed",
        message: "Method PUT is not allowed on /api/post; use GET",
      }, "GET"],
      [
        "GET",
        "/api/nothing",
        404,
        { error: "NotFound", message: "No route: GET /api/nothing" },
        null,
      ],
      ["POST", "/api/profile/a/b", 404, {
        error: "NotFound",
        message: "No route: POST /api/profile/a/b",
      }, null],
    ];
    for (const [method, path, status, body, allow] of cases) {
      const res = await h.request(path, { method });
      assert.equal(res.status, status, path);
      assert.deepEqual(res.body, body, path);
      assert.equal(res.headers.get("allow"), allow, path);
    }
  },
);

endBackendTests();
