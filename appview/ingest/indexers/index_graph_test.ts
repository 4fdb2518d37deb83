import assert from "node:assert/strict";
import { COLLECTION_FOLLOW } from "../../../shared/nsid.ts";
import { deleteOp, didOf, followOp } from "../../_fixtures.ts";
import {
  type BackendIndex,
  endBackendTests,
  forEachBackend,
  openBackendIndex,
} from "../../_test_helpers.ts";

const ALICE = didOf("alice");
const BOB = didOf("bob");
const CAROL = didOf("carol");

function counts(ix: BackendIndex, did: string) {
  return ix.row("SELECT follower_count, following_count FROM profiles WHERE did = ?", did);
}

function follows(ix: BackendIndex) {
  return ix.rows(
    `SELECT fa.did AS follower, sa.did AS subject, f.rkey
     FROM follows f JOIN actors fa ON fa.id = f.follower JOIN actors sa ON sa.id = f.subject
     ORDER BY fa.did, sa.did`,
  );
}

forEachBackend("a follow applied twice is one row and counts 1 (spec 2.11)", async (backend) => {
  await using ix = await openBackendIndex(backend);
  const op = followOp(ALICE, "f1", BOB);
  assert.deepEqual(await ix.apply(op), { applied: 1, skipped: 0 });
  assert.deepEqual(await ix.apply(op), { applied: 1, skipped: 0 });
  assert.deepEqual(await follows(ix), [{ follower: ALICE, subject: BOB, rkey: "f1" }]);
  assert.deepEqual(await counts(ix, BOB), { follower_count: 1, following_count: 0 });
  assert.deepEqual(await counts(ix, ALICE), { follower_count: 0, following_count: 1 });
});

forEachBackend(
  "a follow delete by (did, rkey) removes the row and both counts",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    await ix.apply(followOp(ALICE, "f1", BOB), followOp(ALICE, "f2", CAROL));
    await ix.apply(deleteOp(ALICE, COLLECTION_FOLLOW, "f1"));
    assert.deepEqual(await follows(ix), [{ follower: ALICE, subject: CAROL, rkey: "f2" }]);
    assert.deepEqual(await counts(ix, BOB), { follower_count: 0, following_count: 0 });
    assert.deepEqual(await counts(ix, ALICE), { follower_count: 0, following_count: 1 });
  },
);

forEachBackend(
  "follow deletes that find nothing are no-ops: stale rkey, already deleted, row without rkey",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    await ix.apply(followOp(ALICE, "f1", BOB));
    await ix.rows("INSERT INTO actors (did) VALUES (?) ON CONFLICT DO NOTHING", CAROL);
    await ix.rows(
      `INSERT INTO follows (follower, subject, rkey, created_at, indexed_at)
     VALUES ((SELECT id FROM actors WHERE did = ?), (SELECT id FROM actors WHERE did = ?), NULL,
       '2020-01-01T00:00:00.000Z', '2020-01-01T00:00:00.000Z')`,
      CAROL,
      BOB,
    );
    await ix.rows("UPDATE profiles SET follower_count = 2 WHERE did = ?", BOB);
    const before = await follows(ix);
    assert.deepEqual(await ix.apply(deleteOp(ALICE, COLLECTION_FOLLOW, "stale")), {
      applied: 1,
      skipped: 0,
    });
    assert.deepEqual((await ix.apply(deleteOp(CAROL, COLLECTION_FOLLOW, "f1"))).applied, 1);
    assert.deepEqual(await follows(ix), before);
    await ix.apply(deleteOp(ALICE, COLLECTION_FOLLOW, "f1"));
    await ix.apply(deleteOp(ALICE, COLLECTION_FOLLOW, "f1"));
    assert.deepEqual(await follows(ix), [{ follower: CAROL, subject: BOB, rkey: null }]);
    assert.deepEqual(await counts(ix, BOB), { follower_count: 1, following_count: 0 });
    assert.deepEqual(await counts(ix, ALICE), { follower_count: 0, following_count: 0 });
  },
);

forEachBackend(
  "a second follow record of the same subject keeps one row with the newest rkey",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    await ix.apply(followOp(ALICE, "f1", BOB), followOp(ALICE, "f2", BOB));
    assert.deepEqual(await follows(ix), [{ follower: ALICE, subject: BOB, rkey: "f2" }]);
    assert.deepEqual(await counts(ix, BOB), { follower_count: 1, following_count: 0 });
    await ix.apply(deleteOp(ALICE, COLLECTION_FOLLOW, "f2"));
    assert.deepEqual(await follows(ix), []);
    assert.deepEqual(await counts(ix, BOB), { follower_count: 0, following_count: 0 });
  },
);

forEachBackend(
  "a follow record key reused for another subject moves the follow and its counts",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    await ix.apply(followOp(ALICE, "f1", BOB));
    await ix.apply({ ...followOp(ALICE, "f1", CAROL), action: "update" });
    assert.deepEqual(await follows(ix), [{ follower: ALICE, subject: CAROL, rkey: "f1" }]);
    assert.deepEqual(await counts(ix, BOB), { follower_count: 0, following_count: 0 });
    assert.deepEqual(await counts(ix, CAROL), { follower_count: 1, following_count: 0 });
    assert.deepEqual(await counts(ix, ALICE), { follower_count: 0, following_count: 1 });
  },
);

forEachBackend("follow, unfollow, follow leaves exact counts", async (backend) => {
  await using ix = await openBackendIndex(backend);
  await ix.apply(
    followOp(ALICE, "f1", BOB),
    deleteOp(ALICE, COLLECTION_FOLLOW, "f1"),
    followOp(ALICE, "f3", BOB),
    followOp(CAROL, "c1", BOB),
    followOp(CAROL, "c1", BOB),
  );
  assert.deepEqual(await counts(ix, BOB), { follower_count: 2, following_count: 0 });
  const subjectCount = await ix.row(
    `SELECT count(*) AS n FROM follows f JOIN actors sa ON sa.id = f.subject WHERE sa.did = ?`,
    BOB,
  );
  assert.deepEqual(subjectCount, { n: 2 });
});

endBackendTests();
