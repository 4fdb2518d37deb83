import assert from "node:assert/strict";
import { COLLECTION_BLOCK } from "../../../shared/nsid.ts";
import { blockOp, deleteOp, didOf, openTestIndex } from "../../_fixtures.ts";

const ALICE = didOf("alice");
const BOB = didOf("bob");
const CAROL = didOf("carol");

function blockRows(ix: ReturnType<typeof openTestIndex>) {
  return ix.rows(
    `SELECT a.did AS actor, b.rkey, s.did AS subject FROM blocks b
     JOIN actors a ON a.id = b.actor JOIN actors s ON s.id = b.subject ORDER BY b.rkey`,
  );
}

Deno.test("a block record is indexed once however often it is applied", () => {
  using ix = openTestIndex();
  const op = blockOp(ALICE, "3kblock0000001", BOB);
  assert.equal(ix.apply(op, op).applied, 2);
  assert.equal(ix.apply(op).skipped, 0);
  assert.deepEqual(blockRows(ix), [{ actor: ALICE, rkey: "3kblock0000001", subject: BOB }]);
});

Deno.test("a block update moves the row to its new subject; a delete by rkey removes it", () => {
  using ix = openTestIndex();
  ix.apply(blockOp(ALICE, "3kblock0000001", BOB), blockOp(ALICE, "3kblock0000002", CAROL));
  ix.apply({ ...blockOp(ALICE, "3kblock0000001", CAROL), action: "update" });
  assert.deepEqual(blockRows(ix), [
    { actor: ALICE, rkey: "3kblock0000001", subject: CAROL },
    { actor: ALICE, rkey: "3kblock0000002", subject: CAROL },
  ]);
  ix.apply(deleteOp(ALICE, COLLECTION_BLOCK, "3kblock0000001"));
  ix.apply(deleteOp(ALICE, COLLECTION_BLOCK, "3kblock0000001")); // again: a no-op
  ix.apply(deleteOp(BOB, COLLECTION_BLOCK, "3kblock0000002")); // another account's rkey
  assert.deepEqual(blockRows(ix), [{ actor: ALICE, rkey: "3kblock0000002", subject: CAROL }]);
});

Deno.test("a block of one's own DID, or of something not a DID, is skipped as invalid", () => {
  using ix = openTestIndex();
  const self = ix.apply(blockOp(ALICE, "3kblock0000001", ALICE));
  const notDid = ix.apply(blockOp(ALICE, "3kblock0000002", "alice.test"));
  assert.equal(self.skipped, 1);
  assert.equal(notDid.skipped, 1);
  assert.deepEqual(
    ix.rows("SELECT reason, count FROM ingest_skips ORDER BY reason").map((r) => r.reason),
    ["invalid_record"],
  );
  assert.deepEqual(blockRows(ix), []);
});
