/**
 * The parity test of the PostgreSQL write path: the same op sequences applied to SQLite
 * (`IndexWriter`) and to PostgreSQL (`PgIndexWriter`) give the same results per call, the same
 * totals and the same table contents (every table, ids mapped, timestamps from one clock each
 * ticking alike).
 */

import assert from "node:assert/strict";
import { openIndexDb } from "../../db/open.ts";
import { IndexWriter } from "../apply_ops.ts";
import { openPgIndex } from "../../db/pg/open.ts";
import { openSqliteIndexStore } from "../../db/sqlite_store.ts";
import type { IndexWriterApi } from "../../db/store.ts";
import type { ApplyOptions, CommitRef, CommitSpan, RevGate } from "../apply_ops.ts";
import {
  accountStatusOp,
  blockOp,
  cidOf,
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
  COLLECTION_BLOCK,
  COLLECTION_FOLLOW,
  COLLECTION_LIKE,
  COLLECTION_POST,
  COLLECTION_PROFILE,
  COLLECTION_REPOST,
} from "../../../shared/nsid.ts";
import type { IndexOp, RecordOp } from "../../../shared/ops.ts";
import {
  type Dump,
  dumpPgIndex,
  dumpSqliteIndex,
  freshPgDatabase,
  openFreshPgIndex,
  pgTest,
  stopPgClusterAfterTests,
} from "../../db/pg/_test_helpers.ts";
import { arrayLiteral, PgIndexWriter } from "./pg_writer.ts";
import { generateOps } from "../../../scripts/bench/ingest_bench.ts";

/** A clock ticking one second per reading, from the same instant on both sides. */
function tickingClock(): () => Date {
  let t = Date.parse("2024-06-01T00:00:00.000Z");
  return () => new Date(t += 1000);
}

/** One applyOps call. */
interface Step {
  ops: readonly IndexOp[];
  opts?: ApplyOptions;
}

/**
 * Applies `steps` to a fresh SQLite index and a fresh PostgreSQL index and checks that results,
 * totals and every table agree.
 */
async function assertParity(
  steps: readonly Step[],
  opts: {
    batchSize?: number;
    fastPath?: boolean;
    /** SQL run first on each backend. */
    setup?: { sqlite: string; pg: string };
    /** Every reading of the clock gives the same instant (the clocks cannot tick alike). */
    fixedClock?: boolean;
    /** Columns left out of the comparison, by table. */
    omit?: Readonly<Record<string, readonly string[]>>;
  } = {},
): Promise<void> {
  const db = openIndexDb(":memory:");
  const sql = await openFreshPgIndex();
  const clock = () => opts.fixedClock ? () => new Date("2024-06-01T00:00:00.000Z") : tickingClock();
  try {
    if (opts.setup !== undefined) {
      db.exec(opts.setup.sqlite);
      await sql.unsafe(opts.setup.pg);
    }
    const lite = new IndexWriter(db, { now: clock(), batchSize: opts.batchSize });
    const pg = new PgIndexWriter(sql, {
      now: clock(),
      batchSize: opts.batchSize,
      fastPath: opts.fastPath,
    });
    for (const [i, step] of steps.entries()) {
      const expected = await lite.applyOps(step.ops, step.opts);
      const actual = await pg.applyOps(step.ops, step.opts);
      assert.deepEqual(actual, expected, `results of call ${i}`);
    }
    assert.deepEqual(pg.stats(), lite.stats(), "totals");
    const want = dumpSqliteIndex(db);
    const got = await dumpPgIndex(sql);
    for (const [table, columns] of Object.entries(opts.omit ?? {})) {
      for (const row of [...want[table], ...got[table]]) {
        for (const column of columns) delete row[column];
      }
    }
    for (const table of Object.keys(want)) {
      assert.deepEqual(got[table], want[table], `table ${table}`);
    }
    assert.deepEqual(Object.keys(got).sort(), Object.keys(want).sort());
  } finally {
    db.close();
    await sql.end();
  }
}

const [ALICE, BOB, CAROL, DAN] = ["alice", "bob", "carol", "dan"].map(didOf);
const postUri = (did: string, rkey: string) => uriOf(did, COLLECTION_POST, rkey);

for (const fastPath of [false, true]) {
  const path = fastPath ? "set-based runs" : "op by op";

  pgTest(
    `${path}: posts, likes, reposts, follows, deletes and re-applied ops give SQLite's rows`,
    async () => {
      const A1 = postUri(ALICE, "3kaaaaaaaaa22");
      const B1 = postUri(BOB, "3kbbbbbbbbb22");
      const ops: IndexOp[] = [
        handleOp(ALICE, "alice.test"),
        postOp(ALICE, "3kaaaaaaaaa22", "hello world from alice", { langs: ["en"] }),
        // A like and a reply before the post they name.
        likeOp(CAROL, "3klike0000001", B1),
        postOp(CAROL, "3kccccccccc22", "a reply to bob", { parent: B1 }),
        postOp(BOB, "3kbbbbbbbbb22", "bob's post", { embed: { $type: "x", v: 1 } }),
        likeOp(BOB, "3klike0000002", A1),
        repostOp(BOB, "3krepost00001", A1),
        followOp(BOB, "3kfollow00001", ALICE),
        followOp(ALICE, "3kfollow00002", BOB),
        followOp(DAN, "3kfollow00003", CAROL), // Carol posted: she is known
        // Unlike + relike: one notification; the counter follows the rows.
        deleteOp(BOB, COLLECTION_LIKE, "3klike0000002"),
        likeOp(BOB, "3klike0000003", A1),
        // Unfollow + refollow under another rkey.
        deleteOp(BOB, COLLECTION_FOLLOW, "3kfollow00001"),
        followOp(BOB, "3kfollow00004", ALICE),
        // A second follow record of the same subject: the newest rkey is kept.
        followOp(BOB, "3kfollow00005", ALICE),
        // An rkey reused for another subject moves the row.
        followOp(ALICE, "3kfollow00002", CAROL),
        // An update of a post (new CID) and a redelivery (same CID).
        postOp(ALICE, "3kaaaaaaaaa22", "hello again", { update: true }),
        postOp(ALICE, "3kaaaaaaaaa22", "hello again", { update: true }),
        // A like pointing elsewhere on update.
        { ...likeOp(CAROL, "3klike0000001", A1), action: "update" },
        deleteOp(BOB, COLLECTION_REPOST, "3krepost00001"),
        deleteOp(CAROL, COLLECTION_POST, "3kccccccccc22"),
        deleteOp(DAN, COLLECTION_POST, "3knothere0000"), // unknown: a no-op
        deleteOp(didOf("nobody"), COLLECTION_LIKE, "3knothere0000"),
        profileOp(BOB, { displayName: "Bob", avatar: cidOf("bob-avatar") }),
        postOp(BOB, "3kbbbbbbbbc22", "a later post by bob"),
      ];
      await assertParity([
        { ops: ops.slice(0, 9) },
        { ops: ops.slice(9) },
        { ops }, // everything again
        { ops: [...ops].reverse() },
      ], { fastPath });
    },
  );

  pgTest(`${path}: ops that depend on each other inside one call give SQLite's rows`, async () => {
    const E = didOf("erin");
    const A1 = postUri(ALICE, "3kaaaaaaaaa22");
    const E1 = postUri(E, "3keeeeeeeee22");
    await assertParity([
      { ops: [followOp(BOB, "3kfollow00001", ALICE), postOp(CAROL, "3kccccccccc22", "c")] },
      {
        ops: [
          // A follow record under a new rkey, then the delete of the old record.
          followOp(BOB, "3kfollow00002", ALICE),
          deleteOp(BOB, COLLECTION_FOLLOW, "3kfollow00001"),
          // Two follow records of one subject.
          followOp(CAROL, "3kfollow00003", DAN),
          followOp(CAROL, "3kfollow00004", DAN),
          // Follow and unfollow of an account the index did not know.
          followOp(DAN, "3kfollow00005", didOf("frank")),
          deleteOp(DAN, COLLECTION_FOLLOW, "3kfollow00005"),
          // A like and a reply to a post of an unknown account, which then posts it: the like
          // notifies nobody (Erin was not known yet), the reply after her post does.
          likeOp(BOB, "3klike0000001", E1),
          postOp(E, "3keeeeeeeee22", "erin's first post"),
          postOp(CAROL, "3kccccccccc23", "reply to erin", { parent: E1 }),
          // Two like records of one post by one account: one notification.
          likeOp(CAROL, "3klike0000002", A1),
          likeOp(CAROL, "3klike0000003", A1),
          // Like, unlike, relike; post, delete, post again.
          likeOp(DAN, "3klike0000004", E1),
          deleteOp(DAN, COLLECTION_LIKE, "3klike0000004"),
          likeOp(DAN, "3klike0000004", E1),
          postOp(ALICE, "3kaaaaaaaaa22", "alice"),
          deleteOp(ALICE, COLLECTION_POST, "3kaaaaaaaaa22"),
          postOp(ALICE, "3kaaaaaaaaa22", "alice again"),
          // A repost before its post, a follow of an account that posts afterwards.
          repostOp(BOB, "3krepost00001", postUri(DAN, "3kddddddddd22")),
          followOp(E, "3kfollow00006", DAN),
          postOp(DAN, "3kddddddddd22", "dan"),
          followOp(ALICE, "3kfollow00007", DAN),
          // A profile record, then the account's post (it copies the avatar), then a like that
          // notifies it (the profile row made it known); a block and a status in between.
          profileOp(didOf("gina"), { displayName: "Gina", avatar: cidOf("gina-avatar") }),
          blockOp(BOB, "3kblock000001", didOf("gina")),
          postOp(didOf("gina"), "3kggggggggg22", "gina"),
          profileOp(didOf("hank"), { displayName: "Hank" }),
          accountStatusOp(didOf("hank"), "takendown"),
          likeOp(BOB, "3klike0000009", postUri(didOf("hank"), "3khhhhhhhhh22")),
        ],
      },
    ], { fastPath });
  });

  pgTest(
    `${path}: handles, take-over, blocks, profiles, account status and purge give SQLite's rows`,
    async () => {
      const A1 = postUri(ALICE, "3kaaaaaaaaa22");
      const ops: IndexOp[] = [
        handleOp(ALICE, "alice.test"),
        postOp(ALICE, "3kaaaaaaaaa22", "alice posts"),
        postOp(BOB, "3kbbbbbbbbb22", "bob posts"),
        likeOp(BOB, "3klike0000001", A1),
        likeOp(CAROL, "3klike0000002", A1),
        repostOp(CAROL, "3krepost00001", A1),
        followOp(CAROL, "3kfollow00001", ALICE),
        followOp(ALICE, "3kfollow00002", CAROL),
        followOp(ALICE, "3kfollow00003", BOB),
        // Bob claims Alice's handle: refused (not authoritative), then taken (authoritative).
        handleOp(BOB, "alice.test"),
        { kind: "handle", did: BOB, handle: "ALICE.test", authoritative: true },
        handleOp(CAROL, "Carol.Test"),
        handleOp(CAROL, null),
        handleOp(DAN, "not a handle"),
        // Blocks: create, change subject, refused self-block, delete.
        blockOp(ALICE, "3kblock000001", BOB),
        blockOp(ALICE, "3kblock000001", CAROL),
        blockOp(ALICE, "3kblock000002", ALICE),
        blockOp(BOB, "3kblock000003", ALICE),
        deleteOp(BOB, COLLECTION_BLOCK, "3kblock000003"),
        // Profiles: a record, a change, a delete, a record under a wrong key.
        profileOp(ALICE, { displayName: "Alice", description: "hi", avatar: cidOf("a1") }),
        profileOp(ALICE, { displayName: "Alice A.", banner: cidOf("b1") }),
        profileOp(CAROL, { displayName: "Carol" }),
        deleteOp(CAROL, COLLECTION_PROFILE, "self"),
        { ...profileOp(DAN, { displayName: "Dan" }), rkey: "other" },
        deleteOp(DAN, COLLECTION_PROFILE, "other"),
        { kind: "account", did: DAN },
        // Takedown and back; deactivation; deletion purges Alice's rows and fixes counters.
        accountStatusOp(BOB, "takendown"),
        accountStatusOp(BOB, "deactivated"),
        accountStatusOp(BOB, null),
        accountStatusOp(CAROL, "deactivated"),
        accountStatusOp(didOf("ghost"), null),
        { kind: "account_status", did: ALICE, active: false, status: "deleted" },
        { kind: "account_status", did: didOf("ghost"), active: false, status: "deleted" },
        postOp(CAROL, "3kccccccccc22", "carol still here"),
      ];
      await assertParity([{ ops: ops.slice(0, 14) }, { ops: ops.slice(14) }, { ops }], {
        fastPath,
      });
    },
  );

  pgTest(`${path}: invalid and unsupported ops are skipped and counted as on SQLite`, async () => {
    const good = postOp(ALICE, "3kaaaaaaaaa22", "fine");
    const ops: IndexOp[] = [
      { ...good, did: "not-a-did" },
      { ...good, rkey: "bad key" },
      { ...good, cid: null },
      { ...good, record: { $type: COLLECTION_POST } },
      { ...good, collection: "com.example.other" },
      { ...likeOp(BOB, "3klike0000001", uriOf(ALICE, COLLECTION_LIKE, "x")) },
      { ...likeOp(BOB, "3klike0000002", "at://alice.test/app.social.feed.post/x") },
      good,
    ];
    await assertParity([{ ops }, { ops }], { fastPath });
  });

  pgTest(
    `${path}: an op whose SQL fails is skipped alone, after its batch is re-run op by op`,
    async () => {
      const A1 = postUri(ALICE, "3kaaaaaaaaa22");
      const ops: IndexOp[] = [
        postOp(ALICE, "3kaaaaaaaaa22", "before"),
        likeOp(BOB, "3klike0000001", A1),
        postOp(ALICE, "boom", "this one fails"),
        followOp(BOB, "3kfollow00001", ALICE),
        handleOp(ALICE, "alice.test"),
      ];
      // With a handle op, the writes wait for the ops' answer; without, they go behind them.
      for (const batch of [ops, ops.slice(0, 4)]) {
        await assertParity([
          { ops: batch, opts: { cursor: { name: "local_seq", value: 7 } } },
          { ops: [postOp(BOB, "3kbbbbbbbbb22", "after")] },
        ], {
          fastPath,
          // A failure SQLite and PostgreSQL both raise: a trigger refusing the record key "boom".
          setup: {
            sqlite: `CREATE TRIGGER boom BEFORE INSERT ON posts WHEN NEW.rkey = 'boom'
          BEGIN SELECT RAISE(ABORT, 'boom'); END;`,
            pg: `CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$
          BEGIN IF NEW.rkey = 'boom' THEN RAISE EXCEPTION 'boom'; END IF; RETURN NEW; END $$;
          CREATE TRIGGER boom BEFORE INSERT ON posts FOR EACH ROW EXECUTE FUNCTION boom();`,
          },
          // SQLite stops reading the clock at the failing op, PostgreSQL learns of it later.
          fixedClock: true,
          // The engines word the error differently.
          omit: { ingest_skips: ["last_detail"] },
        });
      }
    },
  );

  pgTest(`${path}: the rev gate, gaps and cursors give SQLite's rows and results`, async () => {
    const rev = (n: number) => `3k${String(n).padStart(11, "0")}`;
    const commit = (did: string, n: number, mode: RevGate, since?: number | null): CommitRef => ({
      did,
      rev: rev(n),
      since: since === undefined ? undefined : since === null ? null : rev(since),
      mode,
    });
    const A1 = postUri(ALICE, "3kaaaaaaaaa22");
    const post = postOp(ALICE, "3kaaaaaaaaa22", "gated");
    const like = likeOp(BOB, "3klike0000001", A1);
    const unlike = deleteOp(BOB, COLLECTION_LIKE, "3klike0000001");
    const spans = (...list: [number, number, CommitRef][]): CommitSpan[] =>
      list.map(([start, end, commit]) => ({ start, end, commit }));
    await assertParity([
      { ops: [post], opts: { commit: commit(ALICE, 1, "newer", null) } },
      {
        ops: [like],
        opts: { commit: commit(BOB, 2, "newer", null), cursor: { name: "c", value: 5 } },
      },
      { ops: [unlike], opts: { commit: commit(BOB, 3, "newer", 2) } },
      // Late push of commit 2, a push out of order, and one without since.
      { ops: [handleOp(BOB, "bob.test"), like], opts: { commit: commit(BOB, 2, "next", null) } },
      { ops: [like], opts: { commit: commit(BOB, 5, "next", 4) } },
      { ops: [like], opts: { commit: commit(BOB, 6, "next") } },
      // A gap (since not the stored rev) and an unknown repository.
      { ops: [unlike], opts: { commit: commit(BOB, 9, "newer", 7) } },
      { ops: [like], opts: { commit: commit(CAROL, 4, "newer", 3) } },
      // Jetstream: equal revs apply, older do not.
      { ops: [like], opts: { commit: commit(BOB, 9, "newer-or-equal") } },
      { ops: [unlike], opts: { commit: commit(BOB, 8, "newer-or-equal") } },
      // Spans: several commits in one call, empty spans, ops outside spans.
      {
        ops: [post, like, unlike, like, handleOp(ALICE, "alice.test")],
        opts: {
          commits: spans(
            [0, 1, commit(ALICE, 2, "newer", 1)],
            [1, 2, commit(BOB, 10, "newer", 9)],
            [2, 3, commit(BOB, 4, "newer", 3)],
            [3, 3, commit(CAROL, 9, "newer", 4)],
            [5, 5, commit(DAN, 1, "newer", null)],
          ),
          cursor: { name: "c", value: 9 },
        },
      },
      { ops: [], opts: { cursor: { name: "d", value: 1 } } },
    ], { fastPath });
  });

  pgTest(
    `${path}: the realistic mix in small batches, then again, gives SQLite's rows`,
    async () => {
      const ops = generateOps(6_000);
      const steps: Step[] = [];
      for (let i = 0; i < ops.length; i += 1_000) steps.push({ ops: ops.slice(i, i + 1_000) });
      steps.push({ ops: ops.slice(0, 3_000) });
      await assertParity(steps, { batchSize: 700, fastPath });
    },
  );

  pgTest(`${path}: random op sequences over a few accounts give SQLite's rows`, async () => {
    for (const seed of [1, 2, 3]) {
      await assertParity(randomSteps(seed, 1_500), { batchSize: 97, fastPath });
    }
  });

  pgTest(
    `${path}: random sequences over more accounts, mostly posts, likes and follows, give SQLite's rows`,
    async () => {
      for (const seed of [4, 5]) {
        await assertParity(randomSteps(seed, 4_000, { accounts: 40, rkeys: 30, rare: 0.05 }), {
          fastPath,
        });
      }
    },
  );
}

pgTest(
  "a verified repository applied whole gives SQLite's rows: creates, updates, deletes, stale and restored snapshots",
  async () => {
    const db = openIndexDb(":memory:");
    const sql = await openFreshPgIndex();
    try {
      const lite = openSqliteIndexStore(db, { now: tickingClock() }).writer;
      const pg = new PgIndexWriter(sql, { now: tickingClock() });
      const both = async <T>(fn: (w: IndexWriterApi) => Promise<T>): Promise<T> => {
        const expected = await fn(lite);
        assert.deepEqual(await fn(pg), expected);
        return expected;
      };
      const rev = (n: number) => `3k${String(n).padStart(11, "0")}`;
      const B1 = postUri(BOB, "3kbbbbbbbbb22");
      const commit = (did: string, n: number): ApplyOptions => ({
        commit: { did, rev: rev(n), since: n === 1 ? null : rev(n - 1), mode: "newer" },
      });
      await both((w) => w.applyOps([postOp(BOB, "3kbbbbbbbbb22", "bob")], commit(BOB, 1)));
      await both((w) =>
        w.applyOps([
          postOp(ALICE, "3kaaaaaaaaa21", "kept"),
          postOp(ALICE, "3kaaaaaaaaa22", "changed later"),
          postOp(ALICE, "3kaaaaaaaaa23", "deleted later"),
          likeOp(ALICE, "3klike0000001", B1),
          followOp(ALICE, "3kfollow00001", BOB),
          blockOp(ALICE, "3kblock000001", CAROL),
          profileOp(ALICE, { displayName: "Alice" }),
        ], commit(ALICE, 1))
      );
      const facts: IndexOp[] = [
        handleOp(ALICE, "alice.test"),
        { kind: "account", did: ALICE },
      ];
      const records = [
        postOp(ALICE, "3kaaaaaaaaa21", "kept"),
        postOp(ALICE, "3kaaaaaaaaa22", "changed", { parent: B1 }),
        postOp(ALICE, "3kaaaaaaaaa24", "new, older than the index"),
        profileOp(ALICE, { displayName: "Alice A." }),
        likeOp(ALICE, "3klike0000001", B1),
        repostOp(ALICE, "3krepost00001", B1),
        followOp(ALICE, "3kfollow00001", BOB),
        followOp(ALICE, "3kfollow00002", DAN),
        followOp(ALICE, "3kfollow00003", DAN),
      ].sort((a, b) => `${a.collection}/${a.rkey}` < `${b.collection}/${b.rkey}` ? -1 : 1);
      // Applied: the account's rows become the repository's.
      await both((w) =>
        w.applySnapshot({ did: ALICE, rev: rev(5), expectedRev: rev(1), facts, records })
      );
      // Stale: older than the stored rev, which moved since it was read.
      await both((w) =>
        w.applySnapshot({ did: ALICE, rev: rev(3), expectedRev: rev(1), facts, records: [] })
      );
      // Restored: older than the stored rev, which did not move: the account host is the truth.
      await both((w) =>
        w.applySnapshot({
          did: ALICE,
          rev: rev(4),
          expectedRev: rev(5),
          facts,
          records: records.slice(0, 3),
        })
      );
      // An account the index never saw.
      await both((w) =>
        w.applySnapshot({
          did: CAROL,
          rev: rev(2),
          expectedRev: null,
          facts: [{ kind: "account", did: CAROL }],
          records: [postOp(CAROL, "3kccccccccc22", "carol"), likeOp(CAROL, "3klike0000009", B1)],
        })
      );
      assert.deepEqual(await pg.storedRev(ALICE), rev(4));
      assert.deepEqual(pg.stats(), lite.stats());
      assert.deepEqual(await dumpPgIndex(sql), dumpSqliteIndex(db));
    } finally {
      db.close();
      await sql.end();
    }
  },
);

pgTest(
  "writers in two pools at once take turns: counters they both move add up, as one writer after the other on SQLite",
  async () => {
    const url = await freshPgDatabase();
    const pools = [await openPgIndex(url, { max: 2 }), await openPgIndex(url, { max: 2 })];
    const db = openIndexDb(":memory:");
    try {
      const fixed = () => new Date("2024-06-01T00:00:00.000Z");
      const SHARED = postUri(ALICE, "3kaaaaaaaaa22");
      const setup = [handleOp(ALICE, "alice.test"), postOp(ALICE, "3kaaaaaaaaa22", "shared")];
      // Each writer's accounts like, repost and reply to the shared post, follow its author and
      // each other: the shared rows (the post's counters, Alice's profile, her notifications)
      // are written by both.
      const streams = [0, 1].map((w) => {
        const users = Array.from({ length: 40 }, (_, i) => didOf(`w${w}user${i}`));
        return users.flatMap((did, i): IndexOp[] => [
          likeOp(did, "3klike0000001", SHARED),
          repostOp(did, "3krepost00001", SHARED),
          postOp(did, "3kpost0000001", `reply ${i}`, { parent: SHARED }),
          followOp(did, "3kfollow00001", ALICE),
          followOp(did, "3kfollow00002", users[(i + 1) % users.length]),
          ...(i % 3 === 0 ? [deleteOp(did, COLLECTION_LIKE, "3klike0000001")] : []),
        ]);
      });
      const lite = new IndexWriter(db, { now: fixed });
      lite.applyOps(setup);
      for (const ops of streams) lite.applyOps(ops);
      const writers = pools.map((sql) => new PgIndexWriter(sql, { now: fixed, batchSize: 7 }));
      await writers[0].applyOps(setup);
      await Promise.all(writers.map(async (writer, w) => {
        for (let i = 0; i < streams[w].length; i += 13) {
          await writer.applyOps(streams[w].slice(i, i + 13));
        }
      }));
      // Ids follow the order the two writers' transactions took turns in: left out.
      const omitIds = (dump: Dump) => {
        for (const table of ["posts", "notifications"]) {
          for (const row of dump[table]) delete row.id;
          dump[table].sort((a, b) => JSON.stringify(a) < JSON.stringify(b) ? -1 : 1);
        }
        return dump;
      };
      assert.deepEqual(omitIds(await dumpPgIndex(pools[0])), omitIds(dumpSqliteIndex(db)));
    } finally {
      db.close();
      await Promise.all(pools.map((sql) => sql.end()));
    }
  },
);

pgTest("array literals carry every text as it is", async () => {
  const sql = await openFreshPgIndex({ migrate: false });
  try {
    const values = [
      "plain",
      "",
      "NULL",
      null,
      'a "quoted" word',
      'back\\slash \\"',
      "comma, {braces} and spaces  ",
      "line\nbreak\ttab",
      "ünïcödé 😀",
    ];
    // Compared on the server (postgres.js reads a NULL element of an array back as "NULL").
    const [{ same }] = await sql.unsafe(
      "SELECT $1::text::text[] IS NOT DISTINCT FROM $2::text[] AS same",
      [arrayLiteral(values), values],
    );
    assert.equal(same, true);
    const [{ numbers }] = await sql.unsafe(
      "SELECT $1::text::bigint[] IS NOT DISTINCT FROM ARRAY[1, NULL, 9007199254740991, -3] AS numbers",
      [arrayLiteral([1, null, 9007199254740991, -3])],
    );
    assert.equal(numbers, true);
  } finally {
    await sql.end();
  }
});

/** Deterministic pseudo-random numbers (mulberry32). */
function makeRandom(seed: number): (n: number) => number {
  let s = seed;
  return (n) => {
    s = (s + 0x6d2b79f5) | 0;
    let t = Math.imul(s ^ (s >>> 15), 1 | s);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return Math.floor((((t ^ (t >>> 14)) >>> 0) / 4294967296) * n);
  };
}

/**
 * Random calls over 6 accounts and 6 record keys, so ops collide often: every kind of op, now
 * and then a commit (gated, sometimes stale or with a gap) or a cursor.
 */
function randomSteps(
  seed: number,
  total: number,
  shape: { accounts?: number; rkeys?: number; rare?: number } = {},
): Step[] {
  const rand = makeRandom(seed);
  const dids = Array.from({ length: shape.accounts ?? 6 }, (_, i) => didOf(`user${i}`));
  const rkeys = [
    "self",
    ...Array.from({ length: (shape.rkeys ?? 6) - 1 }, (_, i) => `3k${String(i).padStart(11, "0")}`),
  ];
  /** Share of the ops that are neither posts, likes, reposts, follows nor their deletes. */
  const rare = shape.rare ?? 1;
  const pick = <T>(xs: readonly T[]) => xs[rand(xs.length)];
  const anyPost = () => postUri(pick(dids), pick(rkeys));
  const handles = ["one.test", "two.test", "One.Test", "three.test"];
  const makeOp = (): IndexOp => {
    const did = pick(dids);
    const rkey = pick(rkeys);
    let roll = rand(100);
    // The common kinds are rolls 0-45 and 54-69: squeeze the others into `rare`.
    if (rand(1000) >= rare * 1000) {
      roll = rand(2) === 0 ? rand(46) : 54 + rand(16);
    }
    if (roll < 18) {
      const parent = rand(3) === 0 ? anyPost() : undefined;
      return postOp(did, rkey, `post ${rand(3)} words ${rand(4)}`, { parent });
    }
    if (roll < 30) return likeOp(did, rkey, anyPost());
    if (roll < 36) return repostOp(did, rkey, anyPost());
    if (roll < 46) return followOp(did, rkey, pick(dids));
    if (roll < 50) return blockOp(did, rkey, pick(dids));
    if (roll < 54) {
      const op = likeOp(did, rkey, anyPost());
      return { ...op, action: "update" } as RecordOp;
    }
    if (roll < 70) {
      const collection = pick([
        COLLECTION_POST,
        COLLECTION_LIKE,
        COLLECTION_REPOST,
        COLLECTION_FOLLOW,
        COLLECTION_BLOCK,
        COLLECTION_PROFILE,
      ]);
      return deleteOp(did, collection, rkey);
    }
    if (roll < 76) {
      return profileOp(did, {
        displayName: rand(2) === 0 ? `name ${rand(3)}` : undefined,
        avatar: rand(2) === 0 ? cidOf(`avatar ${rand(3)}`) : undefined,
      });
    }
    if (roll < 84) {
      const handle = rand(5) === 0 ? null : pick(handles);
      return { kind: "handle", did, handle, authoritative: rand(2) === 0 };
    }
    if (roll < 86) return { kind: "account", did };
    if (roll < 92) return accountStatusOp(did, pick(["takendown", "deactivated", null] as const));
    if (roll < 93) return { kind: "account_status", did, active: false, status: "deleted" };
    return postOp(did, rkey, `again ${rand(2)}`);
  };
  const steps: Step[] = [];
  const revs = new Map<string, number>();
  let n = 0;
  let cursor = 0;
  while (n < total) {
    const size = 1 + rand(rand(4) === 0 ? 150 : 12);
    const ops = Array.from({ length: size }, makeOp);
    n += size;
    const opts: ApplyOptions = {};
    const roll = rand(4);
    if (roll === 0) {
      // One commit of one repository: ops of other DIDs still ride along (ungated kinds too).
      const did = ops[0].did;
      const last = revs.get(did) ?? 0;
      const next = rand(5) === 0 ? Math.max(1, last - rand(3)) : last + 1 + rand(2);
      const mode = pick(["newer", "next", "newer-or-equal"] as const);
      const since = rand(4) === 0 ? undefined : rand(3) === 0 ? null : last === 0 ? null : last;
      revs.set(did, Math.max(last, next));
      opts.commit = {
        did,
        rev: `3k${String(next).padStart(11, "0")}`,
        since: since === undefined || since === null
          ? since
          : `3k${String(since).padStart(11, "0")}`,
        mode,
      };
    } else if (roll === 1 && ops.length > 2) {
      const cut = 1 + rand(ops.length - 1);
      const mk = (did: string, k: number): CommitRef => ({
        did,
        rev: `3k${String(k).padStart(11, "0")}`,
        mode: "newer",
        since: null,
      });
      opts.commits = [
        { start: 0, end: cut, commit: mk(pick(dids), 1 + rand(9)) },
        { start: cut, end: ops.length, commit: mk(pick(dids), 1 + rand(9)) },
      ];
    }
    if (rand(3) === 0) opts.cursor = { name: "local_seq", value: ++cursor };
    steps.push({ ops, opts });
  }
  return steps;
}

stopPgClusterAfterTests();
