// Per-repository ordering in the write path (`apply_ops.ts`, `repo_revs`): each commit is gated by
// its rev against the latest rev applied for its repository, so the three sources (spec 6.2 rule
// 4: push, local stream, public stream) cannot undo a newer commit with an older one.

import assert from "node:assert/strict";
import { COLLECTION_LIKE, COLLECTION_POST } from "../../shared/nsid.ts";
import type { RecordOp } from "../../shared/ops.ts";
import { openIndexDb } from "../db/open.ts";
import { CURSOR_LOCAL_SEQ } from "../db/state.ts";
import {
  deleteOp,
  didOf,
  handleOp,
  likeOp,
  openTestIndex,
  postOp,
  repostOp,
  uriOf,
} from "../_fixtures.ts";
import {
  type BackendIndex,
  endBackendTests,
  forEachBackend,
  openBackendIndex,
  revOf,
} from "../_test_helpers.ts";
import { type CommitRef, IndexWriter, type RevGate } from "./apply_ops.ts";

const ALICE = didOf("alice");
const BOB = didOf("bob");
const POST = uriOf(ALICE, COLLECTION_POST, "3kalicepost12");
const post = postOp(ALICE, "3kalicepost12", "hello");
const like = likeOp(BOB, "3kboblike1232", POST);
const unlike = deleteOp(BOB, COLLECTION_LIKE, "3kboblike1232");

function commit(did: string, seq: number, mode: RevGate, since?: number | null): CommitRef {
  return { did, rev: revOf(seq), since: since == null ? since : revOf(since), mode };
}

async function likeState(ix: BackendIndex) {
  return {
    likes: (await ix.row("SELECT count(*) AS n FROM likes"))?.n,
    likeCount: (await ix.row("SELECT like_count FROM posts WHERE uri = ?", POST))?.like_count,
  };
}

async function storedRev(ix: BackendIndex, did: string): Promise<unknown> {
  return (await ix.row("SELECT rev FROM repo_revs WHERE did = ?", did))?.rev ?? null;
}

forEachBackend(
  "a late push of a commit the local stream already superseded leaves the like deleted and the counter exact",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    const stream = (ops: RecordOp[], c: CommitRef) => ix.writer.applyOps(ops, { commit: c });
    assert.deepEqual(await stream([post], commit(ALICE, 1, "newer", null)), {
      applied: 1,
      skipped: 0,
      stale: 0,
    });
    await stream([like], commit(BOB, 2, "newer", null));
    assert.deepEqual(await likeState(ix), { likes: 1, likeCount: 1 });
    await stream([unlike], commit(BOB, 3, "newer", 2));
    assert.deepEqual(await likeState(ix), { likes: 0, likeCount: 0 });
    assert.equal(await storedRev(ix, BOB), revOf(3));

    // The push of commit 2 arrives now: its record ops are passed over, its handle still applies.
    const late = await ix.writer.applyOps([handleOp(BOB, "bob.test"), like], {
      commit: commit(BOB, 2, "next", null),
    });
    assert.deepEqual(late, { applied: 1, skipped: 0, stale: 1 });
    // Without `since` (an older account host) it is placed by its rev: older, so passed over too.
    assert.equal((await ix.writer.applyOps([like], { commit: commit(BOB, 2, "next") })).stale, 1);
    // The local stream redelivering commit 2 or 3 changes nothing either.
    assert.equal((await stream([like], commit(BOB, 2, "newer", null))).stale, 1);
    assert.equal((await stream([unlike], commit(BOB, 3, "newer", 2))).stale, 1);

    assert.deepEqual(await likeState(ix), { likes: 0, likeCount: 0 });
    assert.equal(
      (await ix.row("SELECT handle FROM profiles WHERE did = ?", BOB))?.handle,
      "bob.test",
    );
    assert.equal(await storedRev(ix, BOB), revOf(3));
    const stats = ix.writer.stats();
    assert.deepEqual([stats.stale, stats.staleOps, stats.skipped], [4, 4, 0]);
  },
);

forEachBackend(
  "a push applies only as the repository's next commit: since equal to the stored rev, null for the first",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    const push = (ops: RecordOp[], c: CommitRef) => ix.writer.applyOps(ops, { commit: c });
    await push([post], commit(ALICE, 1, "next", null));
    // Commit 3 before commit 2: not the next one, passed over.
    const repost = repostOp(BOB, "3kbobrepost12", POST);
    assert.deepEqual(await push([repost], commit(BOB, 3, "next", 2)), {
      applied: 0,
      skipped: 0,
      stale: 1,
    });
    assert.equal(await storedRev(ix, BOB), null);
    assert.deepEqual(await push([like], commit(BOB, 2, "next", null)), {
      applied: 1,
      skipped: 0,
      stale: 0,
    });
    assert.deepEqual((await push([repost], commit(BOB, 3, "next", 2))).stale, 0);
    assert.deepEqual(
      (await push([repost], commit(BOB, 3, "next", 2))).stale,
      1,
      "applied once only",
    );
    // A first commit (since null) once the repository has a rev is not the next one.
    assert.equal((await push([unlike], commit(BOB, 4, "next", null))).stale, 1);
    // Without `since`: applied when its rev is newer than the stored one.
    assert.equal((await push([unlike], commit(BOB, 4, "next"))).stale, 0);
    assert.deepEqual(await likeState(ix), { likes: 0, likeCount: 0 });
    assert.equal((await ix.row("SELECT repost_count FROM posts"))?.repost_count, 1);
    assert.equal(await storedRev(ix, BOB), revOf(4));
  },
);

forEachBackend(
  "public-stream events apply at or above the stored rev, so the ops of one commit all apply and older ones do not",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    const jet = (op: RecordOp, seq: number) =>
      ix.writer.applyOps([op], { commit: commit(op.did, seq, "newer-or-equal") });
    await jet(post, 1);
    await jet(like, 2);
    // Commit 5 holds two ops: two events with the same rev.
    assert.equal((await jet(unlike, 5)).stale, 0);
    assert.equal((await jet(repostOp(BOB, "3kbobrepost12", POST), 5)).stale, 0);
    // A rewound stream redelivers commit 2: older, passed over; commit 5 again is harmless.
    assert.equal((await jet(like, 2)).stale, 1);
    assert.equal((await jet(unlike, 5)).stale, 0);
    assert.deepEqual(await likeState(ix), { likes: 0, likeCount: 0 });
    assert.equal((await ix.row("SELECT repost_count FROM posts"))?.repost_count, 1);
    assert.equal(await storedRev(ix, BOB), revOf(5));
  },
);

forEachBackend(
  "commits folded into one call are gated one by one, in order, and a commit is never split across transactions",
  async (backend) => {
    await using ix = await openBackendIndex(backend, { batchSize: 2 });
    const repost = repostOp(BOB, "3kbobrepost12", POST);
    const before = ix.writer.stats().batches;
    const result = await ix.writer.applyOps(
      [handleOp(ALICE, "alice.test"), post, like, repost, like, unlike],
      {
        cursor: { name: CURSOR_LOCAL_SEQ, value: 9 },
        commits: [
          // ops[0] (identity) is outside every commit: not gated.
          { start: 1, end: 2, commit: commit(ALICE, 1, "newer", null) },
          { start: 2, end: 4, commit: commit(BOB, 2, "newer", null) },
          { start: 4, end: 5, commit: commit(BOB, 2, "newer", null) }, // the same commit again
          { start: 5, end: 6, commit: commit(BOB, 3, "newer", 2) },
        ],
      },
    );
    assert.deepEqual(result, { applied: 5, skipped: 0, stale: 1 });
    // Transactions [0, 2), [2, 4), [4, 6): spans end on batch bounds here (see below otherwise).
    assert.equal(ix.writer.stats().batches - before, 3);
    assert.deepEqual(await likeState(ix), { likes: 0, likeCount: 0 });
    assert.equal((await ix.row("SELECT repost_count FROM posts"))?.repost_count, 1);
    assert.deepEqual([await storedRev(ix, ALICE), await storedRev(ix, BOB)], [revOf(1), revOf(3)]);
    assert.equal(await ix.store.state.readCursor(CURSOR_LOCAL_SEQ), 9);

    // A commit that straddles the batch size is one transaction.
    await using big = await openBackendIndex(backend, { batchSize: 1 });
    const start = big.writer.stats().batches;
    await big.writer.applyOps([post, postOp(ALICE, "3kalicepost22", "two"), like], {
      commits: [{ start: 0, end: 2, commit: commit(ALICE, 1, "newer") }],
    });
    assert.equal(big.writer.stats().batches - start, 2);
  },
);

forEachBackend(
  "a commit without ops still advances its repository's rev, also at the end of a call",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    const result = await ix.writer.applyOps([], {
      cursor: { name: CURSOR_LOCAL_SEQ, value: 1 },
      commits: [{ start: 0, end: 0, commit: commit(BOB, 1, "newer", null) }],
    });
    assert.deepEqual(result, { applied: 0, skipped: 0, stale: 0 });
    assert.equal(await storedRev(ix, BOB), revOf(1));
    await ix.writer.applyOps([like], {
      commits: [
        { start: 0, end: 1, commit: commit(BOB, 2, "newer", 1) },
        { start: 1, end: 1, commit: commit(BOB, 3, "newer", 2) },
      ],
    });
    assert.equal(await storedRev(ix, BOB), revOf(3));
    assert.equal(
      (await ix.writer.applyOps([unlike], { commit: commit(BOB, 4, "next", 3) })).stale,
      0,
    );
    assert.equal(await storedRev(ix, BOB), revOf(4));
  },
);

forEachBackend(
  "a rolled-back transaction leaves no rev behind, in the table or in the writer",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    await assert.rejects(
      () =>
        ix.writer.applyOps([like], {
          cursor: { name: CURSOR_LOCAL_SEQ, value: 0.5 },
          commit: commit(BOB, 2, "newer", null),
        }),
      RangeError,
    );
    assert.equal(await storedRev(ix, BOB), null);
    assert.equal(
      (await ix.writer.applyOps([like], { commit: commit(BOB, 2, "next", null) })).stale,
      0,
    );
    assert.equal(await storedRev(ix, BOB), revOf(2));
    assert.equal((await ix.row("SELECT count(*) AS n FROM likes"))?.n, 1);
  },
);

forEachBackend(
  "an op that fails inside a commit is skipped on the op-by-op re-run and the commit's rev is kept",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    // Marked checked (as the parse worker marks validated records), so the indexer, not
    // validation, meets the value JSON cannot encode.
    const poison: RecordOp = {
      ...postOp(BOB, "poison", "boom", { embed: { $type: "x.y.z" } }),
      checked: true,
    };
    (poison.record as { embed: Record<string, unknown> }).embed.big = 1n;
    const ops = [post, poison, postOp(BOB, "3kbobpost1232", "fine")];
    const commits = [
      { start: 0, end: 1, commit: commit(ALICE, 1, "newer") },
      { start: 1, end: 3, commit: commit(BOB, 2, "newer") },
    ];
    assert.deepEqual(await ix.writer.applyOps(ops, { commits }), {
      applied: 2,
      skipped: 1,
      stale: 0,
    });
    // SQLite re-runs the batch op by op; PostgreSQL's writer skips an op whose checking throws
    // before its batch runs.
    if (backend === "sqlite") assert.equal(ix.writer.stats().retriedBatches, 1);
    assert.deepEqual([await storedRev(ix, ALICE), await storedRev(ix, BOB)], [revOf(1), revOf(2)]);
    assert.deepEqual(await ix.writer.applyOps(ops, { commits }), {
      applied: 0,
      skipped: 0,
      stale: 2,
    });
  },
);

forEachBackend(
  "applyOps refuses commit spans out of order or out of bounds, applying nothing",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    const c = commit(BOB, 2, "newer");
    for (
      const commits of [
        [{ start: 0, end: 2, commit: c }, { start: 1, end: 2, commit: c }],
        [{ start: 1, end: 0, commit: c }],
        [{ start: 0, end: 3, commit: c }],
      ]
    ) {
      await assert.rejects(() => ix.writer.applyOps([post, like], { commits }), RangeError);
    }
    await assert.rejects(() => ix.writer.applyOps([like], { commit: c, commits: [] }), {
      name: "RangeError",
      message: "Options commit and commits cannot be given together",
    });
    assert.deepEqual(await ix.row("SELECT count(*) AS n FROM posts"), { n: 0 });
    assert.equal(await storedRev(ix, BOB), null);
  },
);

// SQLite's own: two synchronous writers on two connections to one file (PostgreSQL's two
// writers at once are ingest/pg/pg_writer_test's).
Deno.test("a writer's remembered revs give way to commits by another connection (a consumer process)", async () => {
  const dir = await Deno.makeTempDir({ prefix: "revs-two-writers-" });
  const server = openIndexDb(`${dir}/index.sqlite`);
  const consumer = openIndexDb(`${dir}/index.sqlite`);
  try {
    const serverWriter = new IndexWriter(server);
    const consumerWriter = new IndexWriter(consumer);
    const rev = () => server.prepare("SELECT rev FROM repo_revs WHERE did = ?").get(BOB)?.rev;
    // The server's writer applies commit 2 by push and remembers rev 2 for Bob.
    assert.equal(serverWriter.applyOps([like], { commit: commit(BOB, 2, "next", null) }).stale, 0);
    // The consumer process applies commit 3 from the local stream.
    assert.equal(
      consumerWriter.applyOps([unlike], { commit: commit(BOB, 3, "newer", 2) }).stale,
      0,
    );
    assert.equal(rev(), revOf(3));
    // A late push of commit 3 and a redelivered commit 2 are passed over by the server: it reads
    // rev 3, although it last wrote rev 2 itself.
    assert.equal(serverWriter.applyOps([unlike], { commit: commit(BOB, 3, "next", 2) }).stale, 1);
    assert.equal(serverWriter.applyOps([like], { commit: commit(BOB, 2, "newer", null) }).stale, 1);
    assert.equal(server.prepare("SELECT count(*) AS n FROM likes").get()?.n, 0);
    // And the next commit applies on either side.
    assert.equal(serverWriter.applyOps([like], { commit: commit(BOB, 4, "next", 3) }).stale, 0);
    assert.equal(consumerWriter.applyOps([like], { commit: commit(BOB, 4, "newer", 3) }).stale, 1);
    assert.equal(
      consumerWriter.applyOps([unlike], { commit: commit(BOB, 5, "newer", 4) }).stale,
      0,
    );
    assert.deepEqual([rev(), server.prepare("SELECT count(*) AS n FROM likes").get()?.n], [
      revOf(5),
      0,
    ]);
  } finally {
    consumer.close();
    server.close();
    await Deno.remove(dir, { recursive: true });
  }
});

// Gaps and snapshots (docs/behaviour.md 6.2 rules 8-10).

function queued(ix: BackendIndex) {
  return ix.rows("SELECT did, reason FROM backfill_queue ORDER BY did");
}

forEachBackend(
  "a local-stream commit whose since is not the stored rev is applied and queues its repository in the same transaction",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    const heard: string[][] = [];
    ix.writer.listenForGaps((dids) => heard.push([...dids]));
    // A first commit (since null) and the next one: no gap.
    await ix.writer.applyOps([post], { commit: commit(ALICE, 1, "newer", null) });
    await ix.writer.applyOps([like], { commit: commit(BOB, 1, "newer", null) });
    await ix.writer.applyOps([unlike], { commit: commit(BOB, 2, "newer", 1) });
    assert.deepEqual(await queued(ix), []);
    // Alice's commit 2 was missed; Carol's history starts before what the index saw.
    const carol = didOf("carol");
    const carols = postOp(carol, "3kcarolpost12", "hi");
    await ix.writer.applyOps([deleteOp(ALICE, COLLECTION_POST, "3kalicepost12"), carols], {
      commits: [
        { start: 0, end: 1, commit: commit(ALICE, 3, "newer", 2) },
        { start: 1, end: 2, commit: commit(carol, 7, "newer", 6) },
      ],
      cursor: { name: CURSOR_LOCAL_SEQ, value: 9 },
    });
    assert.equal((await ix.row("SELECT count(*) AS n FROM posts"))?.n, 1); // applied all the same
    assert.deepEqual(await queued(ix), [{ did: ALICE, reason: "gap" }, {
      did: carol,
      reason: "unknown",
    }]);
    assert.deepEqual(heard, [[ALICE, carol]]);
    // Push ("next") and Jetstream commits never queue: they are passed over or carry no since.
    await ix.writer.applyOps([], { commit: commit(BOB, 5, "next", 4) });
    await ix.writer.applyOps([], { commit: commit(BOB, 6, "newer-or-equal") });
    assert.equal((await queued(ix)).length, 2);
    assert.deepEqual(await ix.rows("SELECT did, local FROM repo_revs ORDER BY did"), [
      { did: ALICE, local: 1 },
      { did: BOB, local: 1 },
      { did: carol, local: 1 },
    ]);
  },
);

forEachBackend("a rolled-back batch queues nothing and tells no listener", async (backend) => {
  await using ix = await openBackendIndex(backend);
  const heard: string[][] = [];
  ix.writer.listenForGaps((dids) => heard.push([...dids]));
  await assert.rejects(() =>
    ix.writer.applyOps([post], {
      commit: commit(ALICE, 3, "newer", 2),
      cursor: { name: CURSOR_LOCAL_SEQ, value: 1.5 },
    })
  );
  assert.deepEqual(await queued(ix), []);
  assert.deepEqual(heard, []);
});

// SQLite's own: the synchronous writer's applySnapshot with a plan of ops (the store's takes a
// verified snapshot; PostgreSQL's is compared with SQLite's by ingest/pg/pg_writer_test).
Deno.test("applySnapshot applies a newer snapshot, refuses one older than a rev applied meanwhile, and takes an older one as the host's truth when nothing was applied meanwhile", () => {
  using ix = openTestIndex();
  ix.writer.applyOps([post], { commit: commit(ALICE, 5, "newer", null) });
  const snap = (seq: number, expected: number | null, ops = [post]) => ({
    did: ALICE,
    rev: revOf(seq),
    expectedRev: expected === null ? null : revOf(expected),
    plan: () => ops,
  });
  // Stale: the stream applied rev 5 after the snapshot (rev 4) was fetched at rev 3.
  assert.deepEqual(ix.writer.applySnapshot(snap(4, 3, [])), {
    applied: 0,
    skipped: 0,
    stale: true,
    previousRev: revOf(5),
  });
  assert.equal(ix.writer.storedRev(ALICE), revOf(5));
  // Newer: applied, rev moves on.
  const result = ix.writer.applySnapshot(snap(6, 5));
  assert.deepEqual(result, { applied: 1, skipped: 0, stale: false, previousRev: revOf(5) });
  assert.equal(ix.writer.storedRev(ALICE), revOf(6));
  // Older while nothing was applied since it was read: the host went back (a restored backup).
  const gone = deleteOp(ALICE, COLLECTION_POST, "3kalicepost12");
  assert.equal(ix.writer.applySnapshot(snap(2, 6, [gone])).stale, false);
  assert.equal(ix.writer.storedRev(ALICE), revOf(2));
  assert.equal(ix.row("SELECT count(*) AS n FROM posts")?.n, 0);
  // The stream then goes on from the host's rev.
  ix.writer.applyOps([post], { commit: commit(ALICE, 7, "newer", 2) });
  assert.deepEqual(ix.rows("SELECT did, reason FROM backfill_queue"), []);
});

forEachBackend(
  "records a snapshot applies are indexed at their createdAt when that is earlier than now",
  async (backend) => {
    await using ix = await openBackendIndex(backend, { fixedClock: true }); // now: 2024-06-01
    const old = postOp(ALICE, "3kalicepost12", "old");
    const future = postOp(BOB, "3kbobpost1234", "from the future");
    const at = (op: RecordOp, createdAt: string): RecordOp => ({
      ...op,
      record: { ...op.record, createdAt },
    });
    for (
      const [did, op] of [[ALICE, at(old, "2023-01-02T03:04:05Z")], [
        BOB,
        at(future, "2030-01-01T00:00:00.000Z"),
      ]] as const
    ) {
      await ix.writer.applySnapshot({
        did,
        rev: revOf(1),
        expectedRev: null,
        facts: [],
        records: [op],
      });
    }
    assert.deepEqual(await ix.rows("SELECT text, indexed_at FROM posts ORDER BY indexed_at"), [
      { text: "old", indexed_at: "2023-01-02T03:04:05.000Z" },
      { text: "from the future", indexed_at: "2024-06-01T00:00:00.000Z" },
    ]);
  },
);

endBackendTests();
