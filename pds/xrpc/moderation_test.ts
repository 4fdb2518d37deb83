// com.atproto.moderation.createReport: the lexicon's answer, input validation, authentication and
// the per-account rate limit. Listing and resolving by the operator: scripts/admin_test.ts.

import assert from "node:assert/strict";
import { createTestApp, signUp, type TestApp, xrpcPost } from "../_test_helpers.ts";
import { listReports } from "../moderation/reports.ts";

const CID = "bafyreie5737gdxlw5i64vzichcalba3z2v5n6icifvx5xytvske7mr3hpm";
const SPAM = "com.atproto.moderation.defs#reasonSpam";

function report(t: TestApp, accessJwt: string, body: unknown) {
  return xrpcPost(t.app, "com.atproto.moderation.createReport", body, {
    authorization: `Bearer ${accessJwt}`,
  });
}

Deno.test("createReport stores an account or record report and answers it as the lexicon says", async () => {
  await using t = await createTestApp();
  const alice = await signUp(t.app, "alice.test");
  const bob = await signUp(t.app, "bob.test");
  const uri = `at://${bob.did}/app.social.feed.post/3kabc`;

  const first = await report(t, alice.accessJwt, {
    reasonType: SPAM,
    reason: "buy followers links",
    subject: { $type: "com.atproto.admin.defs#repoRef", did: bob.did },
  });
  assert.equal(first.status, 200);
  const one = await first.json();
  assert.match(one.createdAt, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  assert.deepEqual(one, {
    id: 1,
    reasonType: SPAM,
    reason: "buy followers links",
    subject: { $type: "com.atproto.admin.defs#repoRef", did: bob.did },
    reportedBy: alice.did,
    createdAt: one.createdAt,
  });

  const second = await report(t, alice.accessJwt, {
    reasonType: "com.atproto.moderation.defs#reasonRude",
    subject: { $type: "com.atproto.repo.strongRef", uri, cid: CID },
  });
  assert.equal(second.status, 200);
  const two = await second.json();
  assert.deepEqual(two, {
    id: 2,
    reasonType: "com.atproto.moderation.defs#reasonRude",
    subject: { $type: "com.atproto.repo.strongRef", uri, cid: CID },
    reportedBy: alice.did,
    createdAt: two.createdAt,
  });

  assert.deepEqual(await listReports(t.ctx.kv, { all: false }), [
    { ...one, status: "open" },
    { ...two, status: "open" },
  ]);
});

Deno.test("createReport refuses bad input with 400 InvalidRequest naming the value, and no token with 401", async () => {
  await using t = await createTestApp();
  const alice = await signUp(t.app, "alice.test");
  const repoRef = { $type: "com.atproto.admin.defs#repoRef", did: alice.did };
  const cases: [unknown, string][] = [
    [{ subject: repoRef }, "Member reasonType is required"],
    [{ reasonType: "spam", subject: repoRef }, 'Unknown reasonType: "spam"'],
    [{ reasonType: SPAM, reason: 5, subject: repoRef }, "Member reason must be a string"],
    [
      { reasonType: SPAM, reason: "x".repeat(2001), subject: repoRef },
      "Member reason is longer than 2000 characters or 20000 code units",
    ],
    [{ reasonType: SPAM }, "Member subject must be an object"],
    [
      { reasonType: SPAM, subject: { did: alice.did } },
      "Report subject $type must be com.atproto.admin.defs#repoRef or " +
      "com.atproto.repo.strongRef, got (missing)",
    ],
    [
      { reasonType: SPAM, subject: { ...repoRef, did: "alice" } },
      'Report subject did is not a DID: "alice"',
    ],
    [
      { reasonType: SPAM, subject: { $type: "com.atproto.repo.strongRef", uri: "x", cid: CID } },
      'Report subject uri is not an AT-URI: "x"',
    ],
    [
      {
        reasonType: SPAM,
        subject: { $type: "com.atproto.repo.strongRef", uri: `at://${alice.did}`, cid: "nope" },
      },
      'Report subject cid is not a CID: "nope"',
    ],
  ];
  for (const [body, message] of cases) {
    const res = await report(t, alice.accessJwt, body);
    assert.equal(res.status, 400, message);
    assert.deepEqual(await res.json(), { error: "InvalidRequest", message });
  }
  const anonymous = await xrpcPost(t.app, "com.atproto.moderation.createReport", {
    reasonType: SPAM,
    subject: repoRef,
  });
  assert.equal(anonymous.status, 401);
  assert.equal((await anonymous.json()).error, "AuthMissing");
  assert.deepEqual(await listReports(t.ctx.kv, { all: true }), []);
});

Deno.test("createReport limits each reporting account to PDS_REPORTS_PER_HOUR: 429 with Retry-After", async () => {
  await using t = await createTestApp({ env: { PDS_REPORTS_PER_HOUR: "2" } });
  const alice = await signUp(t.app, "alice.test");
  const bob = await signUp(t.app, "bob.test");
  const body = {
    reasonType: SPAM,
    subject: { $type: "com.atproto.admin.defs#repoRef", did: bob.did },
  };
  // A refused input is not counted.
  const bad = await report(t, alice.accessJwt, { ...body, reasonType: "x" });
  assert.equal(bad.status, 400);
  await bad.body?.cancel();
  for (let i = 0; i < 2; i++) {
    const res = await report(t, alice.accessJwt, body);
    assert.equal(res.status, 200);
    await res.body?.cancel();
  }
  const limited = await report(t, alice.accessJwt, body);
  assert.equal(limited.status, 429);
  assert.equal(limited.headers.get("retry-after"), "1800");
  assert.deepEqual(await limited.json(), {
    error: "RateLimitExceeded",
    message: "Too many reports from this account; retry in 1800 seconds",
  });
  const other = await report(t, bob.accessJwt, body);
  assert.equal(other.status, 200);
  assert.equal((await other.json()).id, 3);
});
