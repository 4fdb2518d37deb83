import assert from "node:assert/strict";
import { COLLECTION_POST } from "../../../shared/nsid.ts";
import type { DatabaseSync } from "node:sqlite";
import type { IndexOp } from "../../../shared/ops.ts";
import {
  deleteOp,
  didOf,
  handleOp,
  likeOp,
  openTestIndex,
  postOp,
  profileOp,
  type TestIndex,
  uriOf,
} from "../../_fixtures.ts";
import {
  type BackendIndex,
  endBackendTests,
  forEachBackend,
  openBackendIndex,
} from "../../_test_helpers.ts";

// Full-text writes are queued and written before COMMIT (search_writes.ts); these tests check
// what a search sees afterwards (spec 4.2 search) and that the queue is written in one go.

const ALICE = didOf("alice");
const BOB = didOf("bob");

function search(ix: TestIndex, q: string): string[] {
  return ix.rows(
    `SELECT p.rkey FROM posts_fts f JOIN posts p ON p.id = f.rowid
     WHERE posts_fts MATCH ? ORDER BY f.rowid`,
    q,
  ).map((r) => r.rkey as string);
}

function ftsRowCount(db: DatabaseSync): number {
  return (db.prepare("SELECT count(*) AS n FROM posts_fts").get() as { n: number }).n;
}

/** The rkeys of the posts the store's search view finds for `q`, newest first (both backends). */
async function viewSearch(ix: BackendIndex, q: string): Promise<string[]> {
  const page = await ix.store.views.search.search(q, { limit: 100, before: null });
  return page.rows.map((r) => r.rkey);
}

/** Rows of FTS5's own storage table: one per segment leaf and structure record. */
function ftsDataRows(ix: TestIndex): number {
  return ix.row("SELECT count(*) AS n FROM posts_fts_data")!.n as number;
}

forEachBackend(
  "a batch's net full-text changes are applied: new, updated, deleted, both",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    await ix.apply(postOp(ALICE, "old", "apple banana"), postOp(ALICE, "gone", "cherry"));
    assert.deepEqual(await viewSearch(ix, "apple"), ["old"]);
    // One transaction: update one post twice, delete another, add one and delete it again, add
    // one that stays.
    const result = await ix.apply(
      postOp(ALICE, "old", "damson"),
      postOp(ALICE, "old", "elderberry fig"),
      deleteOp(ALICE, COLLECTION_POST, "gone"),
      postOp(BOB, "brief", "grape"),
      deleteOp(BOB, COLLECTION_POST, "brief"),
      postOp(BOB, "new", "honeydew apple"),
    );
    assert.deepEqual(result, { applied: 6, skipped: 0 });
    assert.deepEqual(await viewSearch(ix, "apple"), ["new"]);
    assert.deepEqual(await viewSearch(ix, "banana"), []);
    assert.deepEqual(await viewSearch(ix, "damson"), []);
    assert.deepEqual(await viewSearch(ix, "elderberry"), ["old"]);
    assert.deepEqual(await viewSearch(ix, "cherry"), []);
    assert.deepEqual(await viewSearch(ix, "grape"), []);
    if (ix.backend === "sqlite") assert.equal(ftsRowCount(ix.db), 2); // FTS5's table
    assert.deepEqual(await ix.rows("SELECT rkey FROM posts ORDER BY id"), [{ rkey: "old" }, {
      rkey: "new",
    }]);
  },
);

// SQLite-only, like the tests below: FTS5's rowids, segments and queued writes (search_writes.ts).
Deno.test("a post id reused within one batch is indexed with the new post's text", () => {
  using ix = openTestIndex();
  ix.apply(postOp(ALICE, "first", "kiwi"), postOp(ALICE, "last", "lemon"));
  const lastId = ix.row("SELECT id FROM posts WHERE rkey = 'last'")!.id;
  // Deleting the newest post frees its rowid; SQLite hands it to the next insert.
  ix.apply(deleteOp(ALICE, COLLECTION_POST, "last"), postOp(BOB, "again", "mango"));
  assert.equal(ix.row("SELECT id FROM posts WHERE rkey = 'again'")!.id, lastId);
  assert.deepEqual(search(ix, "lemon"), []);
  assert.deepEqual(search(ix, "mango"), ["again"]);
  assert.deepEqual(search(ix, "kiwi"), ["first"]);
  assert.equal(ftsRowCount(ix.db), 2);
});

Deno.test("ops that open statement journals no longer split the full-text index per op", () => {
  using ix = openTestIndex();
  ix.apply(postOp(BOB, "seed", "seed"));
  const before = ftsDataRows(ix);
  // Profile upserts (INSERT ... SELECT), handle changes (multi-row UPDATE) and post deletes
  // between the posts: each used to make FTS5 write its pending terms as a segment of its own.
  const ops: IndexOp[] = [];
  for (let i = 0; i < 100; i++) {
    const did = didOf(`user${i}`);
    ops.push(postOp(did, `p${i}`, `word${i} common`));
    ops.push(profileOp(did, { displayName: `User ${i}` }));
    ops.push(handleOp(did, `user${i}.test`));
    if (i % 10 === 9) ops.push(deleteOp(did, COLLECTION_POST, `p${i}`));
  }
  assert.deepEqual(ix.writer.applyOps(ops), { applied: ops.length, skipped: 0 });
  assert.equal(ix.writer.stats().batches, 2);
  assert.equal(ftsRowCount(ix.db), 1 + 90);
  assert.deepEqual(search(ix, "word42"), ["p42"]);
  assert.deepEqual(search(ix, "word49"), []);
  // One new segment: one leaf row (the structure record is rewritten in place). Written per op,
  // this batch added 14 rows (SQLite 3.53, whose merges had already folded most of them).
  assert.equal(ftsDataRows(ix) - before, 1);
});

Deno.test("an op failing after its post row was written leaves no full-text row behind", () => {
  using ix = openTestIndex();
  const poisoned = didOf("poisoned");
  // The op fails after its post row and full-text write were made: at the author's counter.
  ix.db.exec(
    `CREATE TRIGGER boom BEFORE INSERT ON profiles WHEN NEW.did = '${poisoned}'
     BEGIN SELECT RAISE(ABORT, 'boom'); END`,
  );
  const result = ix.writer.applyOps([
    postOp(ALICE, "kept", "strawberry"),
    postOp(poisoned, "failed", "tangerine"),
    likeOp(BOB, "l1", uriOf(ALICE, COLLECTION_POST, "kept")),
  ]);
  assert.deepEqual(result, { applied: 2, skipped: 1 });
  assert.equal(ix.writer.stats().retriedBatches, 1);
  assert.equal(ftsRowCount(ix.db), 1);
  // The failed post's rowid goes to the next post: its text alone must match it.
  ix.apply(postOp(BOB, "next", "ugli"));
  assert.deepEqual(search(ix, "tangerine"), []);
  assert.deepEqual(search(ix, "ugli"), ["next"]);
  assert.deepEqual(search(ix, "strawberry"), ["kept"]);
});

Deno.test("when the full-text writes fail, the batch is re-run op by op: posts skipped", () => {
  using ix = openTestIndex();
  ix.apply(postOp(ALICE, "seed", "seed"));
  ix.db.exec("DROP TABLE posts_fts"); // every queued full-text write now fails
  const result = ix.writer.applyOps([
    postOp(ALICE, "p1", "quince"),
    likeOp(BOB, "l1", uriOf(ALICE, COLLECTION_POST, "seed")),
    postOp(BOB, "p2", "raspberry"),
  ]);
  assert.deepEqual(result, { applied: 1, skipped: 2 });
  const stats = ix.writer.stats();
  assert.equal(stats.retriedBatches, 1);
  assert.equal(stats.skippedByReason.apply_error, 2);
  assert.deepEqual(ix.rows("SELECT rkey, like_count FROM posts ORDER BY id"), [
    { rkey: "seed", like_count: 1 },
  ]);
  assert.equal(ix.db.isTransaction, false);
});

endBackendTests();
