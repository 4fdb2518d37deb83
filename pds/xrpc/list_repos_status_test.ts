// listRepos entries say whether each account is active, and why not (docs/behaviour.md 4.1 rule
// 10; docs/protocol.md 5; issue 38): a relay reads them to know which repositories to fetch.

import assert from "node:assert/strict";
import { createTestApp, signUp, xrpcGet } from "../_test_helpers.ts";
import { setAccountStatus } from "../accounts/account_status.ts";
import { accountKey } from "../store/keys.ts";

Deno.test("listRepos entries carry active and, when inactive, status; an account being deleted is left out", async () => {
  await using t = await createTestApp();
  const dids = [];
  for (const handle of ["active.test", "down.test", "resting.test", "gone.test"]) {
    dids.push((await signUp(t.app, handle)).did);
  }
  const [active, down, resting, gone] = dids;
  const nowMs = t.ctx.now();
  await setAccountStatus(t.ctx.kv, down, { status: "takendown", by: "operator", nowMs });
  await setAccountStatus(t.ctx.kv, resting, { status: "deactivated", by: "member", nowMs });
  for (const did of dids) t.ctx.accountStatuses.invalidate(did);
  // The repository of an account whose record is already gone (a deletion half done).
  await t.ctx.kv.delete(accountKey(gone));

  const res = await xrpcGet(t.app, "com.atproto.sync.listRepos");
  assert.equal(res.status, 200);
  const { repos, cursor } = await res.json();
  assert.equal(cursor, undefined);
  const byDid = new Map(
    repos.map((r: Record<string, unknown>) => [r.did, { active: r.active, status: r.status }]),
  );
  assert.deepEqual(
    Object.fromEntries(byDid),
    Object.fromEntries([
      [active, { active: true, status: undefined }],
      [down, { active: false, status: "takendown" }],
      [resting, { active: false, status: "deactivated" }],
    ]),
  );
  for (const r of repos) {
    assert.deepEqual(
      Object.keys(r).sort(),
      r.active ? ["active", "did", "head", "rev"] : ["active", "did", "head", "rev", "status"],
    );
  }

  // Pages by DID: the cursor is the last DID read, also when that entry is left out.
  const sorted = [...dids].sort();
  const page = await (await xrpcGet(t.app, "com.atproto.sync.listRepos?limit=2")).json();
  assert.equal(page.cursor, sorted[1]);
  assert.deepEqual(
    page.repos.map((r: { did: string }) => r.did),
    sorted.slice(0, 2).filter((d) => d !== gone),
  );

  const status = await (await xrpcGet(t.app, `com.atproto.sync.getRepoStatus?did=${down}`)).json();
  assert.deepEqual(status, { did: down, active: false, status: "takendown" });
});
