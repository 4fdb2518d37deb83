import assert from "node:assert/strict";
import { COLLECTION_BLOCK } from "../../../shared/nsid.ts";
import { blockOp, deleteOp, didOf } from "../../_fixtures.ts";
import {
  type BackendIndex,
  endBackendTests,
  forEachBackend,
  openBackendIndex,
} from "../../_test_helpers.ts";

const ALICE = didOf("alice");
const BOB = didOf("bob");
const CAROL = didOf("carol");

function blockRows(ix: BackendIndex) {
  return ix.rows(
    `SELECT a.did AS actor, b.rkey, s.did AS subject FROM blocks b
     JOIN actors a ON a.id = b.actor JOIN actors s ON s.id = b.subject ORDER BY b.rkey`,
  );
}

forEachBackend("a block record is indexed once however often it is applied", async (backend) => {
  await using ix = await openBackendIndex(backend);
  const op = blockOp(ALICE, "3kblock0000001", BOB);
  assert.equal((await ix.apply(op, op)).applied, 2);
  assert.equal((await ix.apply(op)).skipped, 0);
  assert.deepEqual(await blockRows(ix), [{ actor: ALICE, rkey: "3kblock0000001", subject: BOB }]);
});

forEachBackend(
  "a block update moves the row to its new subject; a delete by rkey removes it",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    await ix.apply(blockOp(ALICE, "3kblock0000001", BOB), blockOp(ALICE, "3kblock0000002", CAROL));
    await ix.apply({ ...blockOp(ALICE, "3kblock0000001", CAROL), action: "update" });
    assert.deepEqual(await blockRows(ix), [
      { actor: ALICE, rkey: "3kblock0000001", subject: CAROL },
      { actor: ALICE, rkey: "3kblock0000002", subject: CAROL },
    ]);
    await ix.apply(deleteOp(ALICE, COLLECTION_BLOCK, "3kblock0000001"));
    await ix.apply(deleteOp(ALICE, COLLECTION_BLOCK, "3kblock0000001")); // again: a no-op
    await ix.apply(deleteOp(BOB, COLLECTION_BLOCK, "3kblock0000002")); // another account's rkey
    assert.deepEqual(await blockRows(ix), [{
      actor: ALICE,
      rkey: "3kblock0000002",
      subject: CAROL,
    }]);
  },
);

forEachBackend(
  "a block of one's own DID, or of something not a DID, is skipped as invalid",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    const self = await ix.apply(blockOp(ALICE, "3kblock0000001", ALICE));
    const notDid = await ix.apply(blockOp(ALICE, "3kblock0000002", "alice.test"));
    assert.equal(self.skipped, 1);
    assert.equal(notDid.skipped, 1);
    assert.deepEqual(
      (await ix.rows("SELECT reason, count FROM ingest_skips ORDER BY reason")).map((r) =>
        r.reason
      ),
      ["invalid_record"],
    );
    assert.deepEqual(await blockRows(ix), []);
  },
);

endBackendTests();
