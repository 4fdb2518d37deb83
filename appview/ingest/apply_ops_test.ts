import assert from "node:assert/strict";
import {
  COLLECTION_FOLLOW,
  COLLECTION_LIKE,
  COLLECTION_POST,
  COLLECTION_PROFILE,
  PROFILE_RKEY,
} from "../../shared/nsid.ts";
import type { IndexOp, RecordOp } from "../../shared/ops.ts";
import { CURSOR_LOCAL_SEQ } from "../db/state.ts";
import { MAX_EMBED_JSON_LENGTH } from "../../shared/records.ts";
import { IndexWriter } from "./apply_ops.ts";
import {
  cidOf,
  deleteOp,
  didOf,
  followOp,
  handleOp,
  likeOp,
  openTestIndex,
  postOp,
  profileOp,
  repostOp,
  uriOf,
} from "../_fixtures.ts";
import { endBackendTests, forEachBackend, openBackendIndex } from "../_test_helpers.ts";

const USERS = ["alice", "bob", "carol", "dave"].map(didOf);
const [ALICE, BOB, CAROL, DAVE] = USERS;
const post = (did: string, rkey: string) => uriOf(did, COLLECTION_POST, rkey);

/** Ops that make every user known: handles and profile records. */
function identities(): IndexOp[] {
  return USERS.flatMap((did, i) => [
    handleOp(did, `user${i}.test`),
    profileOp(did, { displayName: `User ${i}`, avatar: cidOf(`avatar${i}`) }),
  ]);
}

/** Creates only (no deletes), so any arrival order gives the same state. */
function activity(): IndexOp[] {
  return [
    postOp(ALICE, "a1", "hello from alice"),
    postOp(BOB, "b1", "bob replies", { parent: post(ALICE, "a1") }),
    postOp(CAROL, "c1", "carol in the thread", {
      parent: post(BOB, "b1"),
      root: post(ALICE, "a1"),
    }),
    postOp(DAVE, "d1", "dave posts", { embed: { $type: "x.y.z", v: 1 }, langs: ["en", "de"] }),
    likeOp(BOB, "l1", post(ALICE, "a1")),
    likeOp(CAROL, "l1", post(ALICE, "a1")),
    likeOp(ALICE, "l2", post(DAVE, "d1")),
    repostOp(DAVE, "r1", post(ALICE, "a1")),
    repostOp(ALICE, "r1", post(BOB, "b1")),
    followOp(ALICE, "f1", BOB),
    followOp(BOB, "f1", ALICE),
    followOp(CAROL, "f1", ALICE),
    followOp(DAVE, "f1", CAROL),
  ];
}

/** Everything, including deletes and updates. */
function scenario(): IndexOp[] {
  return [
    ...identities(),
    ...activity(),
    deleteOp(CAROL, COLLECTION_LIKE, "l1"),
    deleteOp(DAVE, COLLECTION_FOLLOW, "f1"),
    deleteOp(DAVE, COLLECTION_POST, "d1"),
    postOp(ALICE, "a1", "hello again from alice", { update: true }),
    deleteOp(BOB, COLLECTION_PROFILE, PROFILE_RKEY),
    handleOp(CAROL, "carol.test"),
  ];
}

/** `dump` with the `id` of `tables` replaced by its rank in id order (1 for the smallest). */
function idsAsRanks(
  dump: Record<string, Record<string, unknown>[]>,
  tables: readonly string[],
): Record<string, Record<string, unknown>[]> {
  const out = { ...dump };
  for (const table of tables) {
    const ids = dump[table].map((r) => r.id as number).sort((a, b) => a - b);
    out[table] = dump[table].map((r) => ({ ...r, id: ids.indexOf(r.id as number) + 1 }));
  }
  return out;
}

/** A seeded shuffle (mulberry32), so a failure is reproducible. */
function shuffled<T>(items: readonly T[], seed: number): T[] {
  let s = seed;
  const rand = () => {
    s = (s + 0x6d2b79f5) | 0;
    let t = Math.imul(s ^ (s >>> 15), 1 | s);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [out[i], out[j]] = [out[j], out[i]];
  }
  return out;
}

forEachBackend(
  "applying the same ops twice leaves identical tables (spec 6.2 rule 4)",
  async (backend) => {
    await using ix = await openBackendIndex(backend); // the clock ticks: a second pass must not touch any timestamp
    const ops = [...identities(), ...activity()];
    assert.deepEqual(await ix.writer.applyOps(ops), { applied: ops.length, skipped: 0 });
    const once = await ix.dump();
    assert.equal(once.notifications.length, 11);
    await ix.writer.applyOps(ops);
    for (const op of ops) await ix.writer.applyOps([op]);
    assert.deepEqual(await ix.dump(), once);
  },
);

forEachBackend(
  "each op applied twice in a row gives the tables of each op applied once",
  async (backend) => {
    const run = async (times: number) => {
      await using ix = await openBackendIndex(backend, { fixedClock: true });
      for (const op of scenario()) await ix.writer.applyOps(Array(times).fill(op));
      const dump = await ix.dump({ exclude: ["schema_migrations"] });
      // PostgreSQL's id sequences advance on every insert attempt, a redelivered one included:
      // there the ids of posts and notifications compare by their order.
      return backend === "postgres" ? idsAsRanks(dump, ["posts", "notifications"]) : dump;
    };
    assert.deepEqual(await run(2), await run(1));
  },
);

forEachBackend(
  "replaying a history with deletes changes no row content or indexing time",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    const ops = scenario();
    assert.deepEqual(await ix.writer.applyOps(ops), { applied: ops.length, skipped: 0 });
    // A replay re-runs the history (a profile re-created then deleted again), so only the
    // profiles' updated_at may move.
    const omit = { omitColumns: ["updated_at"] };
    const once = await ix.dump(omit);
    await ix.writer.applyOps(ops);
    assert.deepEqual(await ix.dump(omit), once);
  },
);

forEachBackend("creates give the same tables in any arrival order", async (backend) => {
  const omit = { omitColumns: ["id", "rowid"], exclude: ["schema_migrations"] };
  const run = async (ops: IndexOp[]) => {
    await using ix = await openBackendIndex(backend, { fixedClock: true });
    await ix.writer.applyOps([...identities(), ...ops]);
    return await ix.dump(omit);
  };
  const expected = await run(activity());
  assert.equal(expected.notifications.length, 11);
  for (const seed of [1, 2, 3, 4, 5]) {
    assert.deepEqual(await run(shuffled(activity(), seed)), expected, `seed ${seed}`);
  }
});

forEachBackend("one batch and one op per batch give identical tables", async (backend) => {
  const run = async (batchSize: number) => {
    await using ix = await openBackendIndex(backend, { fixedClock: true, batchSize });
    await ix.writer.applyOps(scenario());
    assert.equal(ix.writer.stats().batches, Math.ceil(scenario().length / batchSize));
    return await ix.dump({ exclude: ["schema_migrations"] });
  };
  assert.deepEqual(await run(1), await run(1000));
});

forEachBackend(
  "invalid ops are skipped and counted by reason while later good ops apply",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    const tooLong = postOp(ALICE, "bad", "x".repeat(161));
    const ops: IndexOp[] = [
      tooLong,
      postOp(ALICE, "good", "fine"),
      { ...postOp(ALICE, "g2", "other"), collection: "app.social.graph.list" },
      { ...postOp(ALICE, "g3", "x"), collection: "com.example.anything" },
      { ...likeOp(BOB, "l1", post(ALICE, "good")), did: "not-a-did" },
      { ...likeOp(BOB, "l2", post(ALICE, "good")), cid: null },
      { ...followOp(BOB, "f1", ALICE), record: { subject: "nobody", createdAt: "yesterday" } },
      { ...profileOp(BOB, {}), rkey: "other" },
      handleOp(BOB, "not a handle"),
      likeOp(BOB, "l3", post(ALICE, "good")),
    ];
    assert.deepEqual(await ix.writer.applyOps(ops), { applied: 2, skipped: 8 });
    assert.deepEqual(await ix.rows("SELECT rkey, like_count FROM posts"), [{
      rkey: "good",
      like_count: 1,
    }]);
    assert.deepEqual(ix.writer.stats().skippedByReason, {
      invalid_op: 3,
      invalid_record: 3,
      unsupported_collection: 2,
      apply_error: 0,
      handle_conflict: 0,
    });
    const skips = await ix.rows(
      "SELECT reason, collection, count FROM ingest_skips ORDER BY reason, collection",
    );
    assert.deepEqual(skips, [
      { reason: "invalid_op", collection: "#handle", count: 1 },
      { reason: "invalid_op", collection: COLLECTION_LIKE, count: 2 },
      { reason: "invalid_record", collection: COLLECTION_PROFILE, count: 1 },
      { reason: "invalid_record", collection: COLLECTION_POST, count: 1 },
      { reason: "invalid_record", collection: COLLECTION_FOLLOW, count: 1 },
      { reason: "unsupported_collection", collection: "*", count: 2 },
    ]);
    const detail = await ix.row(
      "SELECT last_detail, last_uri FROM ingest_skips WHERE collection = ?",
      COLLECTION_POST,
    );
    assert.match(String(detail?.last_detail), /^Invalid text, 161 graphemes \(max 160\): "x/);
    assert.equal(detail?.last_uri, post(ALICE, "bad"));
  },
);

forEachBackend(
  "a post whose embed is over the JSON limit is skipped and counted; the rest apply",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    // Jetstream and the push carry whatever a remote server signed: one post with a megabyte of
    // alt text would otherwise be served in every timeline that shows it (spec 2.2).
    const image = { $type: "blob", ref: { $link: cidOf("img") }, mimeType: "image/png", size: 10 };
    const huge = { $type: "app.social.embed.images", images: [{ alt: "a".repeat(1e6), image }] };
    const unknownType = { $type: "com.example.big", pad: "p".repeat(MAX_EMBED_JSON_LENGTH) };
    const ops: IndexOp[] = [
      postOp(ALICE, "huge", "look", { embed: huge }),
      postOp(ALICE, "big", "poll", { embed: unknownType }),
      postOp(ALICE, "ok", "fine", { embed: { $type: "com.example.small", pad: "p" } }),
    ];
    assert.deepEqual(await ix.writer.applyOps(ops), { applied: 1, skipped: 2 });
    assert.deepEqual(await ix.rows("SELECT rkey, embed FROM posts"), [
      { rkey: "ok", embed: '{"$type":"com.example.small","pad":"p"}' },
    ]);
    assert.deepEqual(
      await ix.rows("SELECT reason, count, last_detail, last_uri FROM ingest_skips"),
      [{
        reason: "invalid_record",
        count: 2,
        last_detail: `Embed is ${
          MAX_EMBED_JSON_LENGTH + 36
        } characters as JSON, over the ${MAX_EMBED_JSON_LENGTH} limit`,
        last_uri: post(ALICE, "big"),
      }],
    );
  },
);

forEachBackend(
  "a record op marked checked is not validated again; unmarked, the same record is skipped",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    // The mark is the parse worker's promise that validateRecord accepted the record there, so
    // the write path takes it at its word (an op from input never carries it: shared/ops.ts).
    const tooLong = postOp(ALICE, "bad", "x".repeat(161));
    assert.deepEqual(await ix.writer.applyOps([tooLong]), { applied: 0, skipped: 1 });
    assert.deepEqual(await ix.writer.applyOps([{ ...tooLong, checked: true }]), {
      applied: 1,
      skipped: 0,
    });
    assert.deepEqual(await ix.rows("SELECT rkey, length(text) AS n FROM posts"), [{
      rkey: "bad",
      n: 161,
    }]);
    assert.equal(ix.writer.stats().skippedByReason.invalid_record, 1);
  },
);

forEachBackend(
  "a like or repost of anything but a post URI with a DID is skipped as invalid",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    const ops: IndexOp[] = [
      postOp(ALICE, "p1", "hello"),
      likeOp(BOB, "l1", uriOf(ALICE, COLLECTION_LIKE, "x1")),
      repostOp(BOB, "r1", "at://alice.test/app.social.feed.post/p1"),
      likeOp(BOB, "l2", post(ALICE, "p1")),
    ];
    assert.deepEqual(await ix.writer.applyOps(ops), { applied: 2, skipped: 2 });
    assert.deepEqual(await ix.rows("SELECT rkey, like_count, repost_count FROM posts"), [
      { rkey: "p1", like_count: 1, repost_count: 0 },
    ]);
    assert.deepEqual(await ix.rows("SELECT rkey FROM likes"), [{ rkey: "l2" }]);
    assert.deepEqual(await ix.rows("SELECT count(*) AS n FROM reposts"), [{ n: 0 }]);
    assert.deepEqual(
      await ix.rows(
        "SELECT reason, collection, count, last_detail FROM ingest_skips ORDER BY collection",
      ),
      [
        {
          reason: "invalid_record",
          collection: COLLECTION_LIKE,
          count: 1,
          last_detail: `Subject is not a post URI with a DID: ${
            uriOf(ALICE, COLLECTION_LIKE, "x1")
          }`,
        },
        {
          reason: "invalid_record",
          collection: "app.social.feed.repost",
          count: 1,
          last_detail:
            "Subject is not a post URI with a DID: at://alice.test/app.social.feed.post/p1",
        },
      ],
    );
  },
);

forEachBackend(
  "an op that throws is skipped alone; the rest of its batch still applies",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    // Marked checked (as the parse worker marks validated records), so validation does not refuse
    // it first and the indexer meets the value JSON cannot encode.
    const poison: RecordOp = {
      ...postOp(ALICE, "poison", "boom", { embed: { $type: "x.y.z" } }),
      checked: true,
    };
    (poison.record as { embed: Record<string, unknown> }).embed.big = 1n;
    const result = await ix.writer.applyOps([
      postOp(ALICE, "before", "one"),
      poison,
      postOp(ALICE, "after", "two"),
    ]);
    assert.deepEqual(result, { applied: 2, skipped: 1 });
    assert.deepEqual(await ix.rows("SELECT rkey FROM posts ORDER BY rkey"), [
      { rkey: "after" },
      { rkey: "before" },
    ]);
    assert.deepEqual(await ix.row("SELECT post_count FROM profiles"), { post_count: 2 });
    const stats = ix.writer.stats();
    assert.equal(stats.skippedByReason.apply_error, 1);
    // SQLite's own: the batch re-run op by op (PostgreSQL's writer skips an op whose checking
    // throws before its batch runs), its queued full-text rows and its connection's transaction.
    if (ix.backend === "sqlite") {
      assert.equal(stats.retriedBatches, 1);
      // The full-text rows queued before the failure were dropped with the batch and written again
      // by the op-by-op run; the failing op's never were.
      assert.deepEqual(
        await ix.rows(
          `SELECT p.rkey FROM posts_fts f JOIN posts p ON p.id = f.rowid
         WHERE posts_fts MATCH 'one OR two OR boom' ORDER BY p.rkey`,
        ),
        [{ rkey: "after" }, { rkey: "before" }],
      );
      assert.deepEqual(await ix.row("SELECT count(*) AS n FROM posts_fts"), { n: 2 });
      assert.equal(ix.db.isTransaction, false);
    }
  },
);

forEachBackend(
  "applyOps stores the cursor in the transaction of the last batch",
  async (backend) => {
    await using ix = await openBackendIndex(backend, { batchSize: 2 });
    const ops = [postOp(ALICE, "a", "1"), postOp(ALICE, "b", "2"), postOp(ALICE, "c", "3")];
    await ix.writer.applyOps(ops, { cursor: { name: CURSOR_LOCAL_SEQ, value: 17 } });
    assert.equal(await ix.store.state.readCursor(CURSOR_LOCAL_SEQ), 17);
    await ix.writer.applyOps([], { cursor: { name: CURSOR_LOCAL_SEQ, value: 18 } });
    assert.equal(await ix.store.state.readCursor(CURSOR_LOCAL_SEQ), 18);
    await assert.rejects(
      () => ix.writer.applyOps([postOp(ALICE, "d", "4")], { cursor: { name: "x", value: 0.5 } }),
      RangeError,
    );
    assert.deepEqual(
      await ix.row("SELECT count(*) AS n FROM posts"),
      { n: 3 },
      "rolled back with it",
    );
  },
);

// The synchronous SQLite writer's own constructor.
Deno.test("IndexWriter refuses a batch size outside 1 to 100000", () => {
  using ix = openTestIndex();
  assert.throws(() => new IndexWriter(ix.db, { batchSize: 0 }), {
    name: "RangeError",
    message: "Batch size must be an integer from 1 to 100000: 0",
  });
});

endBackendTests();
