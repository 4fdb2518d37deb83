// SQLite-only: ActorIds is the synchronous SQLite writer's id cache, driven here with raw
// transactions and savepoints (PostgreSQL interns DIDs in its statements).
import assert from "node:assert/strict";
import { openIndexDb } from "../../db/open.ts";
import { ActorIds } from "./actors.ts";
import { didOf } from "../../_fixtures.ts";

const [A, B, C] = ["alice", "bob", "carol"].map(didOf);

function actorsTable(db: ReturnType<typeof openIndexDb>) {
  return db.prepare("SELECT id, did FROM actors ORDER BY id").all().map((r) => ({ ...r }));
}

Deno.test("actor ids assigned in a rolled-back transaction are forgotten", () => {
  const db = openIndexDb(":memory:");
  try {
    const ids = new ActorIds(db);
    db.exec("BEGIN IMMEDIATE");
    assert.equal(ids.idOf(A), 1);
    assert.equal(ids.idOf(A), 1); // cached while pending
    db.exec("ROLLBACK");
    ids.rollback();
    assert.equal(ids.find(A), null);
    db.exec("BEGIN IMMEDIATE");
    assert.equal(ids.idOf(B), 1); // SQLite gives the freed id to the next DID
    assert.equal(ids.idOf(A), 2);
    db.exec("COMMIT");
    ids.commit();
    assert.deepEqual(actorsTable(db), [{ id: 1, did: B }, { id: 2, did: A }]);
    assert.equal(ids.find(B), 1);
    assert.equal(ids.find(A), 2);
  } finally {
    db.close();
  }
});

Deno.test("actor ids assigned after a savepoint that rolls back are forgotten, earlier ones kept", () => {
  const db = openIndexDb(":memory:");
  try {
    const ids = new ActorIds(db);
    db.exec("BEGIN IMMEDIATE");
    assert.equal(ids.idOf(A), 1);
    const mark = ids.mark();
    db.exec("SAVEPOINT op");
    assert.equal(ids.idOf(B), 2);
    db.exec("ROLLBACK TO op");
    db.exec("RELEASE op");
    ids.undoTo(mark);
    assert.equal(ids.idOf(C), 2);
    assert.equal(ids.idOf(B), 3);
    assert.equal(ids.idOf(A), 1);
    db.exec("COMMIT");
    ids.commit();
    assert.deepEqual(actorsTable(db), [{ id: 1, did: A }, { id: 2, did: C }, { id: 3, did: B }]);
    // A second writer (another process) reads the same ids from the table.
    const other = new ActorIds(db);
    assert.deepEqual([other.find(A), other.find(B), other.find(C)], [1, 3, 2]);
  } finally {
    db.close();
  }
});
