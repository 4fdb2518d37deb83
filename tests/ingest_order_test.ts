/**
 * Order across the index's ingest sources (spec 6.2 rules 4 and 5, 6.3, 6.4; docs/behaviour.md 10.7, 10.8):
 * a push that arrives late (after the local stream applied that commit and a newer one) or early
 * (before the commit preceding it) is passed over and the local stream stays authoritative; a
 * push-only index applies a repository's commits in order from its first; a rewound public
 * stream never undoes a newer commit. Real SQLite file or PostgreSQL database (issue 40), real HTTP
 * push, real WebSocket streams.
 */

import assert from "node:assert/strict";
import { ingestRoutes } from "../appview/api/ingest.ts";
import type { AppviewContext } from "../appview/context.ts";
import { COLLECTION_LIKE, COLLECTION_POST } from "../shared/nsid.ts";
import { deleteOp, didOf, likeOp, postOp, repostOp, uriOf } from "../appview/_fixtures.ts";
import {
  type Backend,
  endBackendTests,
  FAST_BACKOFF,
  forEachBackend,
  makeCommit,
  revOf,
  startFakeRepoStream,
  type TestCommit,
} from "../appview/_test_helpers.ts";
import { createJetstreamConsumer } from "../appview/ingest/sources/jetstream.ts";
import { createLocalStreamConsumer } from "../appview/ingest/sources/local_stream.ts";
import { freshIndexEnv, type IndexContext, openIndexContext } from "./_system.ts";
import { makeTempDir, serveOnPort0, startFakeJetstream, waitFor } from "./_util.ts";

const ALICE = didOf("alice");
const BOB = didOf("bob");
const POST = uriOf(ALICE, COLLECTION_POST, "3kalicepost12");
const LIKE_RKEY = "3kboblike1232";
const T0 = 1_725_911_162_000_000;

/** Alice posts (her first commit); Bob likes it (his first), unlikes it, then reposts it. */
function history(): TestCommit[] {
  return [
    makeCommit(1, [postOp(ALICE, "3kalicepost12", "hello")], { since: null }),
    makeCommit(2, [likeOp(BOB, LIKE_RKEY, POST)], { since: null }),
    makeCommit(3, [deleteOp(BOB, COLLECTION_LIKE, LIKE_RKEY)], { since: revOf(2) }),
    makeCommit(4, [repostOp(BOB, "3kbobrepost12", POST)], { since: revOf(3) }),
  ];
}

async function counts(ctx: IndexContext) {
  const q = async (sql: string) => Object.values((await ctx.rows(sql))[0])[0];
  return {
    likes: await q("SELECT count(*) FROM likes"),
    reposts: await q("SELECT count(*) FROM reposts"),
    likeCount: await q(`SELECT like_count FROM posts WHERE uri = '${POST}'`),
    repostCount: await q(`SELECT repost_count FROM posts WHERE uri = '${POST}'`),
    bobRev: await q(`SELECT coalesce(max(rev), '') FROM repo_revs WHERE did = '${BOB}'`),
  };
}

/** A new index on `backend` (SQLite: a file in `dir`). */
async function openIndex(backend: Backend, dir: string): Promise<IndexContext> {
  return await openIndexContext(await freshIndexEnv(backend, `${dir}/index.sqlite`));
}

/** The index's push endpoint on a real HTTP server; `push(commit)` answers its JSON. */
function pushServer(ctx: AppviewContext) {
  const server = serveOnPort0(ingestRoutes(ctx).fetch);
  return {
    server,
    async push(commit: TestCommit): Promise<Record<string, unknown>> {
      const res = await fetch(`${server.url}/internal/ingest-commit`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(commit.push()),
      });
      assert.equal(res.status, 200);
      return await res.json();
    },
  };
}

forEachBackend(
  "stream delivers N then N+1, a late push of N is passed over: the like stays deleted and counters are exact (spec 6.2 rule 4)",
  async (backend) => {
    await using dir = await makeTempDir();
    await using ctx = await openIndex(backend, dir.path);
    await using stream = startFakeRepoStream();
    const { server, push } = pushServer(ctx);
    await using _server = server;
    const [post, like, unlike] = history();
    for (const c of [post, like, unlike]) stream.append(c.seq, c.frame());
    await using local = createLocalStreamConsumer(ctx, { url: stream.url, ...FAST_BACKOFF });
    local.start();
    await waitFor(() => local.status().cursor === 3);
    assert.deepEqual(await counts(ctx), {
      likes: 0,
      reposts: 0,
      likeCount: 0,
      repostCount: 0,
      bobRev: revOf(3),
    });

    assert.deepEqual(await push(like), { ok: true, applied: 0, outOfOrder: true });
    assert.deepEqual(await push(unlike), { ok: true, applied: 0, outOfOrder: true });
    assert.deepEqual(await counts(ctx), {
      likes: 0,
      reposts: 0,
      likeCount: 0,
      repostCount: 0,
      bobRev: revOf(3),
    });
  },
);

forEachBackend(
  "a push that arrives before the commit preceding it is passed over; the stream then delivers both in order",
  async (backend) => {
    await using dir = await makeTempDir();
    await using ctx = await openIndex(backend, dir.path);
    await using stream = startFakeRepoStream();
    const { server, push } = pushServer(ctx);
    await using _server = server;
    const [post, like, unlike, repost] = history();
    await using local = createLocalStreamConsumer(ctx, { url: stream.url, ...FAST_BACKOFF });
    local.start();
    await stream.waitForClients(1);
    stream.append(post.seq, post.frame());
    stream.append(like.seq, like.frame());
    await waitFor(() => local.status().cursor === 2);

    // Commit 4 is pushed while the stream has delivered only up to 2: not the next one.
    assert.deepEqual(await push(repost), { ok: true, applied: 0, outOfOrder: true });
    assert.deepEqual(await counts(ctx), {
      likes: 1,
      reposts: 0,
      likeCount: 1,
      repostCount: 0,
      bobRev: revOf(2),
    });
    // Commit 3 is the next one: the push applies it, and the stream later passes it over.
    assert.deepEqual(await push(unlike), { ok: true, applied: 1 });
    stream.append(unlike.seq, unlike.frame());
    stream.append(repost.seq, repost.frame());
    await waitFor(() => local.status().cursor === 4);
    assert.deepEqual(await counts(ctx), {
      likes: 0,
      reposts: 1,
      likeCount: 0,
      repostCount: 1,
      bobRev: revOf(4),
    });
    assert.deepEqual(await push(repost), { ok: true, applied: 0, outOfOrder: true });
    assert.equal(ctx.store.writer.stats().stale, 3); // push 4, stream 3, push 4 again
  },
);

forEachBackend(
  "push only: a repository's commits apply in order from its first (since null) (spec 6.4)",
  async (backend) => {
    await using dir = await makeTempDir();
    await using ctx = await openIndex(backend, dir.path);
    const { server, push } = pushServer(ctx);
    await using _server = server;
    for (const c of history()) assert.deepEqual(await push(c), { ok: true, applied: 1 });
    assert.deepEqual(await counts(ctx), {
      likes: 0,
      reposts: 1,
      likeCount: 0,
      repostCount: 1,
      bobRev: revOf(4),
    });
    // A push body without `since` (an older account host) is placed by its rev.
    const again = makeCommit(2, [likeOp(BOB, LIKE_RKEY, POST)]);
    assert.deepEqual(await push(again), { ok: true, applied: 0, outOfOrder: true });
    const newer = makeCommit(5, [likeOp(BOB, "3kboblike2232", POST)], { handle: "bob.test" });
    assert.deepEqual(await push(newer), { ok: true, applied: 2 });
    assert.equal((await counts(ctx)).likeCount, 1);
  },
);

forEachBackend(
  "a rewound public stream redelivering an older commit does not undo a newer one (spec 6.3)",
  async (backend) => {
    await using dir = await makeTempDir();
    await using ctx = await openIndex(backend, dir.path);
    await using js = startFakeJetstream();
    await using pub = createJetstreamConsumer(ctx, { url: js.url, ...FAST_BACKOFF })!;
    pub.start();
    await js.waitForClients(1);
    const [post, like, unlike] = history();
    let t = T0;
    const send = (c: TestCommit) => {
      for (const event of c.jetstream(++t)) js.send(event);
    };
    for (const c of [post, like, unlike]) send(c);
    await waitFor(() => pub.status().cursor === T0 + 3);
    send(like); // older than Bob's stored rev 3
    await waitFor(() => pub.status().cursor === T0 + 4);
    assert.deepEqual(await counts(ctx), {
      likes: 0,
      reposts: 0,
      likeCount: 0,
      repostCount: 0,
      bobRev: revOf(3),
    });
    assert.deepEqual([ctx.store.writer.stats().stale, ctx.store.writer.stats().staleOps], [1, 1]);
  },
);

endBackendTests();
