// com.atproto.moderation.createReport: the lexicon's answer, input validation, subjects that exist
// here, authentication and the per-account rate limit. Listing and resolving by the operator:
// scripts/admin_test.ts.

import assert from "node:assert/strict";
import { createTestApp, signUp, type TestApp, xrpcPost } from "../_test_helpers.ts";
import { listReports } from "../moderation/reports.ts";
import { purgeAccount } from "../accounts/account_delete.ts";
import { setAccountStatus } from "../accounts/account_status.ts";
import { takeDownRecord } from "../moderation/record_takedown.ts";

const CID = "bafyreie5737gdxlw5i64vzichcalba3z2v5n6icifvx5xytvske7mr3hpm";
const SPAM = "com.atproto.moderation.defs#reasonSpam";

function report(t: TestApp, accessJwt: string, body: unknown) {
  return xrpcPost(t.app, "com.atproto.moderation.createReport", body, {
    authorization: `Bearer ${accessJwt}`,
  });
}

/** A post by `who`: its strong reference. */
async function postBy(
  t: TestApp,
  who: { did: string; accessJwt: string },
  text = "hello",
): Promise<{ uri: string; cid: string }> {
  const res = await xrpcPost(t.app, "com.atproto.repo.createRecord", {
    repo: who.did,
    collection: "app.social.feed.post",
    record: { text, createdAt: "2024-05-01T12:00:00.000Z" },
  }, { authorization: `Bearer ${who.accessJwt}` });
  assert.equal(res.status, 200);
  const { uri, cid } = await res.json();
  return { uri, cid };
}

Deno.test("createReport stores an account or record report and answers it as the lexicon says", async () => {
  await using t = await createTestApp();
  const alice = await signUp(t.app, "alice.test");
  const bob = await signUp(t.app, "bob.test");
  const { uri, cid } = await postBy(t, bob);

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
    subject: { $type: "com.atproto.repo.strongRef", uri, cid },
  });
  assert.equal(second.status, 200);
  const two = await second.json();
  assert.deepEqual(two, {
    id: 2,
    reasonType: "com.atproto.moderation.defs#reasonRude",
    subject: { $type: "com.atproto.repo.strongRef", uri, cid },
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

Deno.test("createReport refuses a subject that does not exist here: 400 InvalidRequest naming it", async () => {
  await using t = await createTestApp({ env: { PDS_REPORTS_PER_HOUR: "1" } });
  const alice = await signUp(t.app, "alice.test");
  const bob = await signUp(t.app, "bob.test");
  const post = await postBy(t, bob, "first");
  const edited = await xrpcPost(t.app, "com.atproto.repo.putRecord", {
    repo: bob.did,
    collection: "app.social.feed.post",
    rkey: post.uri.split("/").pop(),
    record: { text: "edited", createdAt: "2024-05-01T12:00:00.000Z" },
  }, { authorization: `Bearer ${bob.accessJwt}` });
  const current = (await edited.json()).cid;
  const nobody = "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa";
  const missing = `at://${bob.did}/app.social.feed.post/3kzzzzzzzzzzz`;
  const strongRef = (uri: string, cid: string) => ({
    $type: "com.atproto.repo.strongRef",
    uri,
    cid,
  });
  const cases: [unknown, string][] = [
    [
      { $type: "com.atproto.admin.defs#repoRef", did: nobody },
      `Report subject account not found: "${nobody}"`,
    ],
    [strongRef(missing, CID), `Report subject record not found: "${missing}"`],
    [
      strongRef(`at://${nobody}/app.social.feed.post/3kabc`, CID),
      `Report subject record not found: "at://${nobody}/app.social.feed.post/3kabc" ` +
      "(no such account)",
    ],
    [
      strongRef(`at://carol.test/app.social.feed.post/3kabc`, CID),
      'Report subject record not found: "at://carol.test/app.social.feed.post/3kabc" ' +
      "(no such account)",
    ],
    [
      strongRef(post.uri, post.cid),
      `Report subject record "${post.uri}" is at cid "${current}", not "${post.cid}"`,
    ],
    [
      strongRef(`at://${bob.did}`, CID),
      `Report subject uri is not a record URI: "at://${bob.did}"`,
    ],
  ];
  for (const [subject, message] of cases) {
    const res = await report(t, alice.accessJwt, { reasonType: SPAM, subject });
    assert.equal(res.status, 400, message);
    assert.deepEqual(await res.json(), { error: "InvalidRequest", message });
  }
  assert.deepEqual(await listReports(t.ctx.kv, { all: true }), []);

  // None of those used up alice's one report an hour; the current version, by handle, is fine.
  const byHandle = post.uri.replace(bob.did, "bob.test");
  const ok = await report(t, alice.accessJwt, {
    reasonType: SPAM,
    subject: strongRef(byHandle, current),
  });
  assert.equal(ok.status, 200);
  await ok.body?.cancel();
});

Deno.test("createReport accepts a taken-down or deactivated account, refuses a deleted one", async () => {
  await using t = await createTestApp();
  const alice = await signUp(t.app, "alice.test");
  const bob = await signUp(t.app, "bob.test");
  const carol = await signUp(t.app, "carol.test");
  const dave = await signUp(t.app, "dave.test");
  await setAccountStatus(t.ctx.kv, bob.did, {
    status: "takendown",
    by: "operator",
    nowMs: Date.now(),
  });
  await setAccountStatus(t.ctx.kv, carol.did, {
    status: "deactivated",
    by: "member",
    nowMs: Date.now(),
  });
  await purgeAccount(t.ctx.kv, dave.did, Date.now());
  const repoRef = (did: string) => ({
    reasonType: SPAM,
    subject: { $type: "com.atproto.admin.defs#repoRef", did },
  });
  for (const did of [bob.did, carol.did]) {
    const res = await report(t, alice.accessJwt, repoRef(did));
    assert.equal(res.status, 200, did);
    await res.body?.cancel();
  }
  const gone = await report(t, alice.accessJwt, repoRef(dave.did));
  assert.deepEqual([gone.status, await gone.json()], [400, {
    error: "InvalidRequest",
    message: `Report subject account not found: "${dave.did}"`,
  }]);
});

Deno.test("createReport accepts a record the operator took down and holds, at its held cid", async () => {
  await using t = await createTestApp();
  const alice = await signUp(t.app, "alice.test");
  const bob = await signUp(t.app, "bob.test");
  const post = await postBy(t, bob);
  const taken = await takeDownRecord({ kv: t.ctx.kv, repos: t.ctx.repos, now: Date.now }, post.uri);
  assert.equal(taken.status, "takendown");
  const subject = { $type: "com.atproto.repo.strongRef", ...post };
  const res = await report(t, alice.accessJwt, { reasonType: SPAM, subject });
  assert.equal(res.status, 200);
  assert.deepEqual((await res.json()).subject, subject);
  const other = await report(t, alice.accessJwt, {
    reasonType: SPAM,
    subject: { ...subject, cid: CID },
  });
  assert.deepEqual(await other.json(), {
    error: "InvalidRequest",
    message: `Report subject record "${post.uri}" is at cid "${post.cid}", not "${CID}"`,
  });
});
