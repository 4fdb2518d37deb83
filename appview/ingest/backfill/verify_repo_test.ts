import assert from "node:assert/strict";
import { readCar, writeCar } from "../../../shared/car.ts";
import { parseCid } from "../../../shared/cid.ts";
import { decodeFrame } from "../../../shared/frame.ts";
import { importVerifyKey } from "../../../shared/jwt.ts";
import { COLLECTION_POST } from "../../../shared/nsid.ts";
import type { RecordOp } from "../../../shared/ops.ts";
import { didOf, followOp, postOp } from "../../_fixtures.ts";
import { makeCommit, testAccountKey } from "../../_test_helpers.ts";
import type { RepoLocation } from "./repo_source.ts";
import { verifyRepo } from "./verify_repo.ts";

const ALICE = didOf("alice");
const BOB = didOf("bob");

/** A whole repository as `getRepo` answers it: the commit, its tree and every record. */
function repoCar(ops: RecordOp[], opts: { sign?: boolean } = {}): Uint8Array {
  const body = decodeFrame(makeCommit(1, ops, opts).frame()).body;
  return body.blocks as Uint8Array;
}

async function at(did: string, keyOf = did): Promise<RepoLocation> {
  const key = await importVerifyKey(testAccountKey(keyOf).publicKey);
  return { did, key, handle: null, host: "http://127.0.0.1", local: true };
}

const other: RecordOp = {
  kind: "record",
  action: "create",
  did: ALICE,
  collection: "com.example.thing",
  rkey: "3kaaaaaaaaaa2",
  cid: null,
  record: { $type: "com.example.thing", any: 1 },
};

Deno.test("verifyRepo gives the indexed collections' records of a signed repository in key order", async () => {
  const ops = [
    postOp(ALICE, "3kalicepost22", "second"),
    postOp(ALICE, "3kalicepost11", "first"),
    followOp(ALICE, "3kalicefollo1", BOB),
    other,
  ];
  const repo = await verifyRepo(repoCar(ops), await at(ALICE), { maxBytes: 1 << 20 });
  assert.equal(repo.did, ALICE);
  assert.equal(repo.otherRecords, 1);
  assert.equal(repo.invalidRecords, 0);
  assert.deepEqual(
    repo.records.map((r) => [r.collection, r.rkey, r.record?.text ?? null, r.checked]),
    [
      [COLLECTION_POST, "3kalicepost11", "first", true],
      [COLLECTION_POST, "3kalicepost22", "second", true],
      ["app.social.graph.follow", "3kalicefollo1", null, true],
    ],
  );
});

Deno.test("verifyRepo refuses a repository signed by another key, one of another account, one missing a record, and one too large", async () => {
  const ops = [postOp(ALICE, "3kalicepost11", "first")];
  const car = repoCar(ops);
  const refused = async (bytes: Uint8Array, location: RepoLocation, message: string | RegExp) =>
    await assert.rejects(() => verifyRepo(bytes, location, { maxBytes: 1 << 20 }), {
      name: "RepoFetchError",
      kind: "invalid",
      message,
    });
  await refused(
    car,
    await at(ALICE, BOB),
    `Commit signature of ${ALICE} does not verify against its DID document's key`,
  );
  await refused(car, await at(BOB), `Commit is signed for ${ALICE}, not ${BOB}`);
  // The same repository without its record block.
  const { roots, blocks } = readCar(car);
  const record = makeCommit(1, ops).ops[0].cid!;
  const kept = [...blocks].filter(([cid]) => cid !== record)
    .map(([cid, bytes]) => ({ cid: parseCid(cid), bytes }));
  await refused(writeCar(roots, kept), await at(ALICE), /lacks the record/);
  await assert.rejects(() => verifyRepo(car, { did: ALICE } as RepoLocation, { maxBytes: 10 }), {
    name: "RepoFetchError",
    kind: "invalid",
    message: /is not a readable CAR: CAR is \d+ bytes, over the 10 byte limit/,
  });
});
