/**
 * The three ingest sources of the index (spec 1.3, 6.2-6.5) against one write path: the same
 * commits delivered by push, by the local stream and as Jetstream events, in every order and
 * repeated, leave identical tables (blocks included); the two cursors stay apart across a restart; the local
 * stream alone delivers every post. The index on SQLite and on PostgreSQL (issue 40).
 */

import assert from "node:assert/strict";
import { COLLECTION_BLOCK, COLLECTION_POST, COLLECTION_REPOST } from "../shared/nsid.ts";
import { ingestRoutes } from "../appview/api/ingest.ts";
import {
  type Backend,
  captureLogRecords,
  endBackendTests,
  FAST_BACKOFF,
  FIXED_NOW,
  forEachBackend,
  makeCommit,
  startFakeRepoStream,
  type TestCommit,
} from "../appview/_test_helpers.ts";
import { CURSOR_LOCAL_SEQ, CURSOR_PUBLIC_TIME_US } from "../appview/db/state.ts";
import {
  blockOp,
  deleteOp,
  didOf,
  followOp,
  likeOp,
  postOp,
  profileOp,
  repostOp,
  uriOf,
} from "../appview/_fixtures.ts";
import { createJetstreamConsumer } from "../appview/ingest/sources/jetstream.ts";
import { createLocalStreamConsumer } from "../appview/ingest/sources/local_stream.ts";
import type { StreamConsumer } from "../appview/ingest/sources/stream_consumer.ts";
import { freshIndexEnv, openIndexContext } from "./_system.ts";
import { makeTempDir, startFakeJetstream, waitFor } from "./_util.ts";

const ALICE = didOf("alice");
const BOB = didOf("bob");
const CAROL = didOf("carol");
const P1 = uriOf(ALICE, COLLECTION_POST, "3kalicepost12");
const T0 = 1_725_911_162_000_000;

/** A small history touching every table: profiles, posts, likes, reposts, follows, replies. */
function scenario(): TestCommit[] {
  return [
    makeCommit(1, [profileOp(ALICE, { displayName: "Alice", avatar: cidText("avatar") })], {
      handle: "alice.test",
    }),
    makeCommit(2, [postOp(ALICE, "3kalicepost12", "hello world", { langs: ["en"] })], {
      handle: "alice.test",
    }),
    makeCommit(3, [postOp(BOB, "3kbobpost1232", "bob here")], { handle: "bob.test" }),
    makeCommit(4, [
      likeOp(BOB, "3kboblike1232", P1),
      repostOp(BOB, "3kbobrepost12", P1),
      followOp(BOB, "3kbobfollow12", ALICE),
      postOp(BOB, "3kbobreply122", "a reply", { parent: P1 }),
    ], { handle: "bob.test" }),
    makeCommit(5, [likeOp(CAROL, "3kcarollike12", P1)]),
    makeCommit(6, [followOp(ALICE, "3kalicefollo2", BOB)], { handle: "alice.test" }),
    makeCommit(7, [deleteOp(BOB, COLLECTION_REPOST, "3kbobrepost12")], { handle: "bob.test" }),
    makeCommit(8, [profileOp(ALICE, { displayName: "Alice A.", avatar: cidText("avatar") })], {
      handle: "alice.test",
    }),
    // Blocks (issue 37): one kept, one created and deleted again.
    makeCommit(9, [blockOp(CAROL, "3kcarolblock2", BOB)]),
    makeCommit(10, [blockOp(ALICE, "3kaliceblock2", CAROL)], { handle: "alice.test" }),
    makeCommit(11, [deleteOp(ALICE, COLLECTION_BLOCK, "3kaliceblock2")], { handle: "alice.test" }),
  ];
}

/** The `seq` of the scenario's last commit. */
const LAST_SEQ = 11;

function cidText(seed: string): string {
  return makeCommit(1, [postOp(ALICE, "3kaaaaaaaaaa2", seed)]).ops[0].cid!;
}

type Source = "push" | "local" | "jet";

/** One index on `backend` with the three sources wired to fake upstreams. */
async function openHarness(backend: Backend) {
  const { log, lines } = captureLogRecords();
  const ctx = await openIndexContext(await freshIndexEnv(backend, ":memory:"), {
    log,
    now: FIXED_NOW,
  });
  const stream = startFakeRepoStream();
  const js = startFakeJetstream();
  const local = createLocalStreamConsumer(ctx, { url: stream.url, ...FAST_BACKOFF });
  const pub = createJetstreamConsumer(ctx, { url: js.url, ...FAST_BACKOFF })!;
  local.start();
  pub.start();
  await Promise.all([stream.waitForClients(1), js.waitForClients(1)]);
  const push = ingestRoutes(ctx);
  const applied = () => {
    // Every op accounted for: applied, skipped, or passed over with its commit (older rev).
    const s = ctx.store.writer.stats();
    return s.applied + s.skipped + s.staleOps;
  };
  const duplicates = () => lines.filter((l) => l.msg === "Duplicate frame dropped").length;
  return {
    ctx,
    local,
    pub,
    async deliver(commit: TestCommit, source: Source, again: boolean): Promise<void> {
      if (source === "push") {
        const res = await push.request("/internal/ingest-commit", {
          method: "POST",
          body: JSON.stringify(commit.push()),
        });
        assert.equal(res.status, 200);
        await res.body?.cancel();
      } else if (source === "local") {
        if (again) {
          const before = duplicates();
          stream.sendRaw(commit.frame());
          await waitFor(() => duplicates() === before + 1);
        } else {
          stream.append(commit.seq, commit.frame());
          await waitFor(() => local.status().cursor === commit.seq);
        }
      } else {
        const before = applied();
        for (const event of commit.jetstream(T0 + commit.seq * 100)) js.send(event);
        await waitFor(() => applied() === before + commit.ops.length);
      }
    },
    async close(): Promise<void> {
      await local.close();
      await pub.close();
      await stream.close();
      await js.close();
      await ctx[Symbol.asyncDispose]();
    },
  };
}

/**
 * Runs the scenario through `order`: per commit (each commit through every source in turn) or
 * per history (the whole history through one source, then the next). Returns the table dump.
 */
async function runScenario(
  backend: Backend,
  order: readonly Source[],
  by: "commit" | "history" = "commit",
) {
  const h = await openHarness(backend);
  try {
    const commits = scenario();
    if (by === "commit") {
      for (const commit of commits) {
        const seen = new Set<Source>();
        for (const source of order) {
          await h.deliver(commit, source, seen.has(source));
          seen.add(source);
        }
      }
    } else {
      const seen = new Set<Source>();
      for (const source of order) {
        for (const commit of commits) await h.deliver(commit, source, seen.has(source));
        seen.add(source);
      }
    }
    return {
      // The backfill queue holds the gaps the local stream saw (the fixture's `since` names no
      // real commit), which depends on the order; `repo_revs.local` says whether the stream or
      // the push applied a commit before Jetstream did (docs/behaviour.md 6.2 rule 8).
      dump: await h.ctx.dump({
        exclude: ["consumer_status", "ingest_skips", "schema_migrations", "backfill_queue"],
        omitColumns: ["local"],
      }),
      skipped: h.ctx.store.writer.stats().skipped,
    };
  } finally {
    await h.close();
  }
}

const PERMUTATIONS: Source[][] = [
  ["push", "local", "jet"],
  ["push", "jet", "local"],
  ["local", "push", "jet"],
  ["local", "jet", "push"],
  ["jet", "push", "local"],
  ["jet", "local", "push"],
];

forEachBackend(
  "the same commits by push, local stream and Jetstream, in every order and repeated, leave identical tables (spec 6.2 rule 4)",
  async (backend) => {
    const reference = await runScenario(backend, PERMUTATIONS[0]);
    assert.equal(reference.skipped, 0);
    for (
      const order of [
        ...PERMUTATIONS.slice(1),
        ["jet", "push", "local", "jet", "push", "local"] as Source[],
      ]
    ) {
      const run = await runScenario(backend, order);
      assert.equal(run.skipped, 0, order.join(","));
      assert.deepEqual(run.dump, reference.dump, `order ${order.join(",")}`);
    }
    for (const order of PERMUTATIONS) {
      const run = await runScenario(backend, order, "history");
      assert.equal(run.skipped, 0, order.join(","));
      assert.deepEqual(run.dump, reference.dump, `whole histories in order ${order.join(",")}`);
    }
    const dump = reference.dump;
    // Exact counters and one notification per event.
    const p1 = dump.posts.find((p) => p.uri === P1)!;
    assert.deepEqual([p1.like_count, p1.repost_count, p1.handle], [2, 0, "alice.test"]);
    const profiles = Object.fromEntries(dump.profiles.map((p) => [p.did, p]));
    assert.deepEqual(
      [profiles[ALICE].follower_count, profiles[ALICE].following_count, profiles[ALICE].post_count],
      [1, 1, 1],
    );
    assert.deepEqual(
      [profiles[BOB].follower_count, profiles[BOB].following_count, profiles[BOB].post_count],
      [1, 1, 2],
    );
    assert.equal(profiles[ALICE].display_name, "Alice A.");
    assert.equal(profiles[ALICE].handle, "alice.test");
    assert.deepEqual(
      dump.notifications.map((n) =>
        `${n.recipient === ALICE ? "alice" : "bob"} ${n.kind} ${
          n.author_did === BOB ? "bob" : n.author_did === CAROL ? "carol" : "alice"
        }`
      )
        .sort(),
      [
        "alice follow bob",
        "alice like bob",
        "alice like carol",
        "alice reply bob",
        "alice repost bob",
        "bob follow alice",
      ],
    );
    assert.deepEqual(dump.reposts, []);
    assert.deepEqual(
      dump.blocks.map((b) => [b.actor, b.rkey, b.subject]),
      [[CAROL, "3kcarolblock2", BOB]],
    );
    assert.equal(dump.likes.length, 2);
    assert.equal(dump.follows.length, 2);
    assert.deepEqual(
      dump.cursors.map((c) => [c.name, c.value]),
      [[CURSOR_LOCAL_SEQ, LAST_SEQ], [CURSOR_PUBLIC_TIME_US, T0 + LAST_SEQ * 100]],
    );
  },
);

forEachBackend(
  "both stream cursors persist independently across a restart; the public cursor never leaks into the local one (spec 6.2 rule 2)",
  async (backend) => {
    await using dir = await makeTempDir();
    const database = await freshIndexEnv(backend, `${dir.path}/appview.sqlite`);
    const commits = scenario().slice(0, 3);
    {
      await using stream = startFakeRepoStream();
      await using js = startFakeJetstream();
      await using ctx = await openIndexContext(database);
      await using local = startConsumer(
        createLocalStreamConsumer(ctx, { url: stream.url, ...FAST_BACKOFF }),
      );
      await using pub = startConsumer(
        createJetstreamConsumer(ctx, { url: js.url, ...FAST_BACKOFF }),
      );
      await js.waitForClients(1);
      for (const c of commits) stream.append(c.seq, c.frame());
      for (const c of commits) for (const e of c.jetstream(T0 + c.seq * 100)) js.send(e);
      await waitFor(() => local.status().cursor === 3 && pub.status().cursor === T0 + 300);
    }
    await using ctx = await openIndexContext(database);
    assert.equal(await ctx.store.state.readCursor(CURSOR_LOCAL_SEQ), 3);
    assert.equal(await ctx.store.state.readCursor(CURSOR_PUBLIC_TIME_US), T0 + 300);
    await using stream = startFakeRepoStream();
    await using js = startFakeJetstream();
    for (const c of scenario()) stream.append(c.seq, c.frame());
    await using local = startConsumer(
      createLocalStreamConsumer(ctx, { url: stream.url, ...FAST_BACKOFF }),
    );
    await using pub = startConsumer(createJetstreamConsumer(ctx, { url: js.url, ...FAST_BACKOFF }));
    await waitFor(() => local.status().cursor === LAST_SEQ);
    await js.waitForClients(1);
    assert.deepEqual(stream.cursors, ["3"]);
    assert.equal(js.requests[0].get("cursor"), String(T0 + 300 - 5_000_000));
    assert.equal(await ctx.store.state.readCursor(CURSOR_LOCAL_SEQ), LAST_SEQ);
    assert.equal(await ctx.store.state.readCursor(CURSOR_PUBLIC_TIME_US), T0 + 300);
    assert.equal(pub.status().cursor, T0 + 300);
  },
);

function startConsumer(consumer: StreamConsumer | null): StreamConsumer {
  assert.ok(consumer !== null);
  consumer.start();
  return consumer;
}

forEachBackend(
  "with the push target down every post still arrives through the local stream (spec 6.2 rule 5)",
  async (backend) => {
    await using stream = startFakeRepoStream();
    await using ctx = await openIndexContext(await freshIndexEnv(backend, ":memory:"));
    const authors = [ALICE, BOB, CAROL];
    for (let seq = 1; seq <= 60; seq++) {
      const did = authors[seq % 3];
      const rkey = `3kpost${String(seq).padStart(6, "a")}2`.replace(
        /[0-9]/g,
        (d) => "abcdefghij"[+d],
      );
      stream.append(seq, makeCommit(seq, [postOp(did, rkey, `post number ${seq}`)]).frame());
    }
    await using local = startConsumer(
      createLocalStreamConsumer(ctx, { url: stream.url, ...FAST_BACKOFF }),
    );
    await waitFor(() => local.status().cursor === 60);
    assert.deepEqual(await ctx.rows("SELECT count(*) AS n FROM posts"), [{ n: 60 }]);
    for (const did of authors) {
      assert.deepEqual(await ctx.rows("SELECT post_count FROM profiles WHERE did = ?", did), [{
        post_count: 20,
      }]);
    }
  },
);

endBackendTests();
