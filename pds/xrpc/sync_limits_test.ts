// getRepo is unauthenticated and builds a whole repository in memory: the account host bounds
// how many run and wait at once (spec 4.1 sync endpoints; limits enforced on the server).
import assert from "node:assert/strict";
import { readCar } from "../../shared/car.ts";
import { COLLECTION_POST } from "../../shared/nsid.ts";
import { waitFor } from "../../tests/_util.ts";
import { signUp, startTestServer, xrpcPost } from "../_test_helpers.ts";
import { exportGateFor, EXPORTS_RUNNING, EXPORTS_WAITING } from "./sync.ts";

Deno.test("getRepo beyond the running and waiting exports is 429 RateLimitExceeded; queued ones finish", async () => {
  await using server = await startTestServer();
  const alice = await signUp(server.url, "alice.test");
  for (let i = 0; i < 3; i++) {
    const res = await xrpcPost(server.url, "com.atproto.repo.createRecord", {
      repo: alice.did,
      collection: COLLECTION_POST,
      record: { text: `post ${i}`, createdAt: new Date().toISOString() },
    }, { authorization: `Bearer ${alice.accessJwt}` });
    assert.equal(res.status, 200);
    await res.body?.cancel();
  }
  const getRepo = () => fetch(`${server.url}/xrpc/com.atproto.sync.getRepo?did=${alice.did}`);

  // Take every running place and all but one waiting place with exports that do not end yet.
  const gate = exportGateFor(server.ctx);
  let release!: () => void;
  const hold = new Promise<void>((r) => release = r);
  const holders = Array.from(
    { length: EXPORTS_RUNNING + EXPORTS_WAITING - 1 },
    () => gate.run(() => hold),
  );
  assert.equal(gate.active, EXPORTS_RUNNING);
  assert.equal(gate.queued, EXPORTS_WAITING - 1);

  const queued = getRepo();
  await waitFor(() => gate.queued === EXPORTS_WAITING, {
    message: "the getRepo request never queued",
  });
  const refused = await getRepo();
  assert.equal(refused.status, 429);
  assert.equal(refused.headers.get("retry-after"), "1");
  assert.deepEqual(await refused.json(), {
    error: "RateLimitExceeded",
    message: `Too many repository exports at once (${EXPORTS_RUNNING} running and ` +
      `${EXPORTS_WAITING} waiting (the most allowed)); retry in 1 second`,
  });

  // Other sync methods do not queue behind exports.
  const latest = await fetch(
    `${server.url}/xrpc/com.atproto.sync.getLatestCommit?did=${alice.did}`,
  );
  assert.equal(latest.status, 200);
  const { cid } = await latest.json();

  release();
  await Promise.all(holders);
  const res = await queued;
  assert.equal(res.status, 200);
  assert.equal(res.headers.get("content-type"), "application/vnd.ipld.car");
  const car = readCar(new Uint8Array(await res.arrayBuffer()));
  assert.deepEqual(car.roots.map(String), [cid]);
  assert.equal(gate.active, 0);
  assert.equal(gate.queued, 0);

  // With places free again, an export is served at once.
  const again = await getRepo();
  assert.equal(again.status, 200);
  await again.body?.cancel();
});
