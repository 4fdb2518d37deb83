import assert from "node:assert/strict";
import { COLLECTION_FOLLOW } from "../../../shared/nsid.ts";
import { deleteOp, didOf, followOp, openTestIndex, type TestIndex } from "../../_fixtures.ts";

const ALICE = didOf("alice");
const BOB = didOf("bob");
const CAROL = didOf("carol");

function counts(ix: TestIndex, did: string) {
  return ix.row("SELECT follower_count, following_count FROM profiles WHERE did = ?", did);
}

function follows(ix: TestIndex) {
  return ix.rows(
    `SELECT fa.did AS follower, sa.did AS subject, f.rkey
     FROM follows f JOIN actors fa ON fa.id = f.follower JOIN actors sa ON sa.id = f.subject
     ORDER BY fa.did, sa.did`,
  );
}

Deno.test("a follow applied twice is one row and counts 1 (spec 2.11)", () => {
  using ix = openTestIndex();
  const op = followOp(ALICE, "f1", BOB);
  assert.deepEqual(ix.apply(op), { applied: 1, skipped: 0 });
  assert.deepEqual(ix.apply(op), { applied: 1, skipped: 0 });
  assert.deepEqual(follows(ix), [{ follower: ALICE, subject: BOB, rkey: "f1" }]);
  assert.deepEqual(counts(ix, BOB), { follower_count: 1, following_count: 0 });
  assert.deepEqual(counts(ix, ALICE), { follower_count: 0, following_count: 1 });
});

Deno.test("a follow delete by (did, rkey) removes the row and both counts", () => {
  using ix = openTestIndex();
  ix.apply(followOp(ALICE, "f1", BOB), followOp(ALICE, "f2", CAROL));
  ix.apply(deleteOp(ALICE, COLLECTION_FOLLOW, "f1"));
  assert.deepEqual(follows(ix), [{ follower: ALICE, subject: CAROL, rkey: "f2" }]);
  assert.deepEqual(counts(ix, BOB), { follower_count: 0, following_count: 0 });
  assert.deepEqual(counts(ix, ALICE), { follower_count: 0, following_count: 1 });
});

Deno.test("follow deletes that find nothing are no-ops: stale rkey, already deleted, row without rkey", () => {
  using ix = openTestIndex();
  ix.apply(followOp(ALICE, "f1", BOB));
  ix.db.prepare("INSERT OR IGNORE INTO actors (did) VALUES (?)").run(CAROL);
  ix.db.prepare(
    `INSERT INTO follows (follower, subject, rkey, created_at, indexed_at)
     VALUES ((SELECT id FROM actors WHERE did = ?), (SELECT id FROM actors WHERE did = ?), NULL,
       '2020-01-01T00:00:00.000Z', '2020-01-01T00:00:00.000Z')`,
  ).run(CAROL, BOB);
  ix.db.prepare("UPDATE profiles SET follower_count = 2 WHERE did = ?").run(BOB);
  const before = follows(ix);
  assert.deepEqual(ix.apply(deleteOp(ALICE, COLLECTION_FOLLOW, "stale")), {
    applied: 1,
    skipped: 0,
  });
  assert.deepEqual(ix.apply(deleteOp(CAROL, COLLECTION_FOLLOW, "f1")).applied, 1);
  assert.deepEqual(follows(ix), before);
  ix.apply(deleteOp(ALICE, COLLECTION_FOLLOW, "f1"));
  ix.apply(deleteOp(ALICE, COLLECTION_FOLLOW, "f1"));
  assert.deepEqual(follows(ix), [{ follower: CAROL, subject: BOB, rkey: null }]);
  assert.deepEqual(counts(ix, BOB), { follower_count: 1, following_count: 0 });
  assert.deepEqual(counts(ix, ALICE), { follower_count: 0, following_count: 0 });
});

Deno.test("a second follow record of the same subject keeps one row with the newest rkey", () => {
  using ix = openTestIndex();
  ix.apply(followOp(ALICE, "f1", BOB), followOp(ALICE, "f2", BOB));
  assert.deepEqual(follows(ix), [{ follower: ALICE, subject: BOB, rkey: "f2" }]);
  assert.deepEqual(counts(ix, BOB), { follower_count: 1, following_count: 0 });
  ix.apply(deleteOp(ALICE, COLLECTION_FOLLOW, "f2"));
  assert.deepEqual(follows(ix), []);
  assert.deepEqual(counts(ix, BOB), { follower_count: 0, following_count: 0 });
});

Deno.test("a follow record key reused for another subject moves the follow and its counts", () => {
  using ix = openTestIndex();
  ix.apply(followOp(ALICE, "f1", BOB));
  ix.apply({ ...followOp(ALICE, "f1", CAROL), action: "update" });
  assert.deepEqual(follows(ix), [{ follower: ALICE, subject: CAROL, rkey: "f1" }]);
  assert.deepEqual(counts(ix, BOB), { follower_count: 0, following_count: 0 });
  assert.deepEqual(counts(ix, CAROL), { follower_count: 1, following_count: 0 });
  assert.deepEqual(counts(ix, ALICE), { follower_count: 0, following_count: 1 });
});

Deno.test("follow, unfollow, follow leaves exact counts", () => {
  using ix = openTestIndex();
  ix.apply(
    followOp(ALICE, "f1", BOB),
    deleteOp(ALICE, COLLECTION_FOLLOW, "f1"),
    followOp(ALICE, "f3", BOB),
    followOp(CAROL, "c1", BOB),
    followOp(CAROL, "c1", BOB),
  );
  assert.deepEqual(counts(ix, BOB), { follower_count: 2, following_count: 0 });
  const subjectCount = ix.row(
    `SELECT count(*) AS n FROM follows f JOIN actors sa ON sa.id = f.subject WHERE sa.did = ?`,
    BOB,
  );
  assert.deepEqual(subjectCount, { n: 2 });
});
