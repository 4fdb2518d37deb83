/**
 * Paging (docs/behaviour.md 10.9): 1,000 items with `limit=30` on the timeline, notifications,
 * followers and search come back each exactly once, in order, with a final `cursor` of null; new
 * posts indexed between pages never cause a duplicate or a skip.
 */

import assert from "node:assert/strict";
import { COLLECTION_POST } from "../../shared/nsid.ts";
import type { IndexOp } from "../../shared/ops.ts";
import { didOf, followOp, handleOp, postOp, uriOf } from "../_fixtures.ts";
import {
  endBackendTests,
  forEachBackend,
  openHarness,
  type QueryHarness,
} from "../_test_helpers.ts";

const VIEWER = didOf("viewer");

/** Applies `ops` with the clock moving one millisecond every `tieEvery` ops (many ties). */
async function applyWithTies(h: QueryHarness, ops: IndexOp[], tieEvery = 7): Promise<void> {
  for (let i = 0; i < ops.length; i += tieEvery) {
    await h.apply(...ops.slice(i, i + tieEvery));
    h.clock.tick(1);
  }
}

/** Follows every page of `path` (which has no cursor yet) and returns the items in order. */
async function collect<T>(
  h: QueryHarness,
  path: string,
  member: string,
  between?: (page: number) => Promise<void>,
): Promise<T[]> {
  const items: T[] = [];
  let cursor: string | null = null;
  for (let page = 0;; page++) {
    const sep = path.includes("?") ? "&" : "?";
    const url: string = `${path}${sep}limit=30${cursor === null ? "" : `&cursor=${cursor}`}`;
    const { status, body } = await h.request(url);
    assert.equal(status, 200, url);
    assert.ok(body[member].length <= 30);
    items.push(...body[member]);
    cursor = body.cursor;
    if (cursor === null) break;
    assert.equal(body[member].length, 30, "only the last page is short");
    await between?.(page);
    assert.ok(page < 100, "paging ends");
  }
  return items;
}

/** Post URIs of `rows` sorted as the timeline orders them: (indexed_at desc, uri desc). */
async function expectedOrder(
  h: QueryHarness,
  where: string,
  ...params: string[]
): Promise<string[]> {
  return (await h.rows<{ uri: string }>(
    `SELECT uri FROM posts WHERE ${where} ORDER BY indexed_at DESC, uri DESC`,
    ...params,
  )).map((r) => r.uri);
}

function posts(authors: string[], count: number, text: (i: number) => string): IndexOp[] {
  const ops: IndexOp[] = [];
  for (let i = 0; i < count; i++) {
    ops.push(postOp(authors[i % authors.length], `3kp${String(i).padStart(10, "0")}`, text(i)));
  }
  return ops;
}

for (const followCount of [10, 150]) {
  forEachBackend(
    `timeline pages 1,000 posts of ${followCount} followees exactly once, in order`,
    async (backend) => {
      await using h = await openHarness(backend);
      const authors = Array.from({ length: followCount }, (_, i) => didOf(`author${i}`));
      const others = Array.from({ length: 20 }, (_, i) => didOf(`other${i}`));
      await h.apply(
        ...authors.map((a, i) => followOp(VIEWER, `3kf${String(i).padStart(10, "0")}`, a)),
      );
      const followed = posts(authors, 1000, (i) => `post ${i}`);
      const noise = posts(others, 500, (i) => `noise ${i}`).map((op) => ({
        ...op,
        rkey: `3kn${(op as { rkey: string }).rkey.slice(3)}`,
      }));
      // Interleave followed posts with posts of accounts the viewer does not follow.
      const mixed: IndexOp[] = [];
      for (let i = 0; i < 1000; i++) {
        mixed.push(followed[i]);
        if (i % 2 === 0) mixed.push(noise[i / 2]);
      }
      await applyWithTies(h, mixed);
      const expected = await expectedOrder(
        h,
        "author IN (SELECT subject FROM follows WHERE follower = (SELECT id FROM actors WHERE did = ?))",
        VIEWER,
      );
      assert.equal(expected.length, 1000);
      const got = await collect<{ uri: string }>(h, `/api/timeline/home?did=${VIEWER}`, "posts");
      assert.deepEqual(got.map((p) => p.uri), expected);
    },
  );
}

forEachBackend(
  "timeline paging never repeats or skips while new posts arrive between pages",
  async (backend) => {
    await using h = await openHarness(backend);
    const authors = Array.from({ length: 8 }, (_, i) => didOf(`author${i}`));
    await h.apply(
      ...authors.map((a, i) => followOp(VIEWER, `3kf${String(i).padStart(10, "0")}`, a)),
    );
    await applyWithTies(h, posts(authors, 1000, (i) => `post ${i}`));
    const expected = await expectedOrder(
      h,
      "author IN (SELECT subject FROM follows WHERE follower = (SELECT id FROM actors WHERE did = ?))",
      VIEWER,
    );
    let fresh = 0;
    const got = await collect<{ uri: string }>(
      h,
      `/api/timeline/home?did=${VIEWER}`,
      "posts",
      async () => {
        // New posts, some in the same millisecond as the newest ones.
        const ops: IndexOp[] = [];
        for (let i = 0; i < 5; i++, fresh++) {
          ops.push(postOp(authors[fresh % 8], `3kz${String(fresh).padStart(10, "0")}`, "fresh"));
        }
        await h.apply(...ops);
        h.clock.tick(1);
      },
    );
    assert.ok(fresh > 100);
    assert.deepEqual(got.map((p) => p.uri), expected);
  },
);

forEachBackend(
  "notifications page 1,000 rows exactly once, newest first by (indexed_at, id)",
  async (backend) => {
    await using h = await openHarness(backend);
    await h.apply(handleOp(VIEWER, "viewer.test"));
    const followers = Array.from({ length: 1000 }, (_, i) => didOf(`fan${i}`));
    await applyWithTies(h, followers.map((f) => followOp(f, "3kfollow00022", VIEWER)));
    const expected = (await h.rows<{ id: number }>(
      `SELECT id FROM notifications WHERE recipient = (SELECT id FROM actors WHERE did = ?)
     ORDER BY indexed_at DESC, id DESC`,
      VIEWER,
    )).map((r) => r.id);
    assert.equal(expected.length, 1000);
    const got = await collect<{ id: number }>(
      h,
      `/api/notifications?did=${VIEWER}`,
      "notifications",
    );
    assert.deepEqual(got.map((n) => n.id), expected);
  },
);

forEachBackend(
  "followers page 1,000 accounts exactly once, newest follow first",
  async (backend) => {
    await using h = await openHarness(backend);
    const followers = Array.from({ length: 1000 }, (_, i) => didOf(`fan${i}`));
    await applyWithTies(h, followers.map((f) => followOp(f, "3kfollow00022", VIEWER)));
    const expected = (await h.rows<{ did: string }>(
      `SELECT a.did FROM follows f JOIN actors a ON a.id = f.follower
     WHERE f.subject = (SELECT id FROM actors WHERE did = ?)
     ORDER BY f.indexed_at DESC, f.follower DESC`,
      VIEWER,
    )).map((r) => r.did);
    assert.equal(expected.length, 1000);
    const got = await collect<{ did: string }>(h, `/api/followers?did=${VIEWER}`, "profiles");
    assert.deepEqual(got.map((p) => p.did), expected);
    const following = await collect<{ did: string }>(
      h,
      `/api/following?did=${followers[3]}`,
      "profiles",
    );
    assert.deepEqual(following.map((p) => p.did), [VIEWER]);
  },
);

forEachBackend("search pages 1,000 matches exactly once, newest first", async (backend) => {
  await using h = await openHarness(backend);
  const authors = Array.from({ length: 5 }, (_, i) => didOf(`author${i}`));
  await applyWithTies(
    h,
    posts(authors, 1500, (i) => (i % 3 === 2 ? `hay ${i}` : `needle number ${i}`)),
  );
  const expected = (await h.rows<{ uri: string }>(
    "SELECT uri FROM posts WHERE text LIKE 'needle%' ORDER BY id DESC",
  )).map((r) => r.uri);
  assert.equal(expected.length, 1000);
  const got = await collect<{ uri: string }>(h, "/api/search?q=Needle", "posts");
  assert.deepEqual(got.map((p) => p.uri), expected);
  assert.equal(uriOf(authors[0], COLLECTION_POST, "3kp0000000000"), expected[999]);
});

endBackendTests();
