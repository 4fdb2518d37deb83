/**
 * Record takedown over real servers (issue 37, docs/behaviour.md 4.1 rule 15): `deno task admin
 * record takedown <at-uri>`, run in-process on the account host's store while it runs, removes
 * the record from the account host (getRecord says the operator removed it, listRecords,
 * sync.getRecord, getRepo) and from the index (timeline, profile, thread, search) with exact
 * counters, shows it to its author in listRecordTakedowns, keeps its blobs through the blob
 * collection without serving them, and `record restore` brings all of it back with the same CID.
 * The tests whose subject includes the index run on SQLite and on PostgreSQL (issue 40); those of
 * the account host's side alone run once, on the default SQLite index.
 */

import assert from "node:assert/strict";
import { endBackendTests, forEachBackend } from "../appview/_test_helpers.ts";
import { runAdminCli } from "../scripts/admin.ts";
import {
  getRecordTakedown,
  listRecordTakedowns,
  RecordTakedownError,
  takeDownRecord,
} from "../pds/moderation/record_takedown.ts";
import { readCar } from "../shared/car.ts";
import type { Post, SocialClient } from "../shared/client.ts";
import { COLLECTION_POST, COLLECTION_PROFILE } from "../shared/nsid.ts";
import { getBlob } from "../pds/blobs/blob_store.ts";
import { buildBlobRefIndex, sweepUnreferencedBlobs } from "../pds/blobs/blob_gc.ts";
import { startSystem, type TestSystem } from "./_system.ts";
import { runPdsScript, waitFor } from "./_util.ts";

const DAY_MS = 24 * 60 * 60 * 1000;

async function admin(sys: TestSystem, ...args: string[]) {
  const out: string[] = [];
  const err: string[] = [];
  const env = { PDS_KV_PATH: sys.pds.ctx.config.kvPath, PDS_JWT_SECRET: "x".repeat(16) };
  const code = await runAdminCli(args, env, { out: (l) => out.push(l), err: (l) => err.push(l) });
  return { code, out, err };
}

async function xrpc(sys: TestSystem, nsid: string, query: Record<string, string>, token?: string) {
  const res = await fetch(`${sys.pdsUrl}/xrpc/${nsid}?${new URLSearchParams(query)}`, {
    headers: token === undefined ? {} : { authorization: `Bearer ${token}` },
  });
  const type = res.headers.get("content-type") ?? "";
  const body = type.includes("json") ? await res.json() : new Uint8Array(await res.arrayBuffer());
  return { status: res.status, body };
}

function parts(uri: string): { repo: string; collection: string; rkey: string } {
  const [repo, collection, rkey] = uri.slice("at://".length).split("/");
  return { repo, collection, rkey };
}

/** Retries `check` (assertions) until it passes or 5 s went by. */
async function until(message: string, check: () => Promise<void>): Promise<void> {
  let last: unknown;
  await waitFor(async () => {
    try {
      await check();
      return true;
    } catch (err) {
      last = err;
      return false;
    }
  }, { timeoutMs: 5000, intervalMs: 25, message }).catch((err) => {
    throw new Error(`${err.message}: ${last}`, { cause: last });
  });
}

async function accessJwt(client: SocialClient): Promise<string> {
  return (await client.session())!.accessJwt;
}

const uris = (posts: Post[]) => posts.map((p) => p.uri);

forEachBackend(
  "a post taken down by the operator leaves the account host and the index with exact counters, its author sees why, and restore brings it back with the same CID",
  async (backend) => {
    await using sys = await startSystem({ backend });
    const alice = sys.client();
    const bob = sys.client();
    await alice.createAccount({ handle: "alice.test", password: "alice-password-1" });
    const b = await bob.createAccount({ handle: "bob.test", password: "bob-password-12" });
    await alice.follow(b.did);
    const kept = await bob.post({ text: "a harbour morning" });
    const taken = await bob.post({ text: "a harbour scam link" });
    const ref = { uri: taken.uri, cid: taken.cid };
    await alice.like(ref);
    await alice.repost(ref);
    const reply = await alice.post({ text: "is this real?", reply: { parent: ref } });

    const seen = async () => {
      const thread = await alice.thread(taken.uri);
      const replyThread = await alice.thread(reply.uri);
      const profile = await alice.profileByDid(b.did);
      return {
        timeline: uris((await alice.timeline()).posts).filter((u) => u !== reply.uri),
        profile: uris(profile.posts),
        postCount: profile.post_count,
        thread: thread.post?.uri ?? null,
        likes: thread.like_count ?? 0,
        reposts: thread.repost_count ?? 0,
        replies: uris(thread.replies),
        replyParents: uris(replyThread.parents),
        search: uris((await alice.search("harbour")).posts),
      };
    };
    const present = {
      timeline: [taken.uri, kept.uri],
      profile: [taken.uri, kept.uri],
      postCount: 2,
      thread: taken.uri,
      likes: 1,
      reposts: 1,
      replies: [reply.uri],
      replyParents: [taken.uri],
      search: [taken.uri, kept.uri],
    };
    await until("the index caught up", async () => assert.deepEqual(await seen(), present));

    // Read once before, so that the account host's caches hold the record's block.
    const before = await xrpc(sys, "com.atproto.sync.getBlocks", { did: b.did, cids: taken.cid });
    assert.equal(before.status, 200);
    assert.equal(readCar(before.body).blocks.has(taken.cid), true);

    const took = await admin(sys, "record", "takedown", taken.uri, "--reason", "Scam link");
    assert.equal(took.code, 0, took.err.join("\n"));
    assert.deepEqual(took.err, []);
    assert.match(
      took.out[0],
      new RegExp(`^Took down ${taken.uri} \\(${taken.cid}\\); commit rev `),
    );
    assert.equal(took.out.length, 1, took.out.join("\n"));

    // The account host: getRecord says why, the record is in no listing, proof or export.
    const { collection, rkey } = parts(taken.uri);
    const got = await xrpc(sys, "com.atproto.repo.getRecord", { repo: b.did, collection, rkey });
    assert.deepEqual(got, {
      status: 400,
      body: {
        error: "RecordTakendown",
        message: `Record was removed by the server's operator: ${taken.uri}`,
      },
    });
    const byCid = await xrpc(sys, "com.atproto.repo.getRecord", {
      repo: "bob.test",
      collection,
      rkey,
      cid: kept.cid,
    });
    assert.equal(byCid.body.error, "RecordNotFound");
    const listed = await xrpc(sys, "com.atproto.repo.listRecords", { repo: b.did, collection });
    assert.deepEqual(listed.body.records.map((r: { uri: string }) => r.uri), [kept.uri]);
    const proof = await xrpc(sys, "com.atproto.sync.getRecord", { did: b.did, collection, rkey });
    assert.equal(proof.status, 200);
    assert.equal(readCar(proof.body).blocks.has(taken.cid), false);
    const repo = await xrpc(sys, "com.atproto.sync.getRepo", { did: b.did });
    assert.equal(repo.status, 200);
    const exported = readCar(repo.body).blocks;
    assert.equal(exported.has(taken.cid), false);
    assert.equal(exported.has(kept.cid), true);
    const blocks = await xrpc(sys, "com.atproto.sync.getBlocks", { did: b.did, cids: taken.cid });
    assert.equal(blocks.body.error, "BlockNotFound");

    // The index, by the local stream: gone from every view, counters exact.
    await until("the takedown reached the index", async () =>
      assert.deepEqual(await seen(), {
        timeline: [kept.uri],
        profile: [kept.uri],
        postCount: 1,
        thread: null,
        likes: 0,
        reposts: 0,
        replies: [],
        replyParents: [],
        search: [kept.uri],
      }));

    // The author sees what was removed and why; nobody else sees it in their list.
    const own = await xrpc(sys, "app.social.server.listRecordTakedowns", {}, await accessJwt(bob));
    assert.equal(own.status, 200);
    assert.equal(own.body.takedowns.length, 1);
    const [held] = own.body.takedowns;
    assert.deepEqual({ ...held, value: undefined, takenDownAt: undefined }, {
      uri: taken.uri,
      cid: taken.cid,
      reason: "Scam link",
      value: undefined,
      takenDownAt: undefined,
    });
    assert.equal(held.value.text, "a harbour scam link");
    assert.equal(held.value.$type, COLLECTION_POST);
    assert.ok(Math.abs(Date.parse(held.takenDownAt) - Date.now()) < 60_000, held.takenDownAt);
    const others = await xrpc(
      sys,
      "app.social.server.listRecordTakedowns",
      {},
      await accessJwt(alice),
    );
    assert.deepEqual(others.body, { takedowns: [] });
    const anonymous = await xrpc(sys, "app.social.server.listRecordTakedowns", {});
    assert.equal(anonymous.status, 401);

    const list = await admin(sys, "record", "list");
    assert.deepEqual(list, {
      code: 0,
      out: [
        "uri\tcid\ttaken_down\tstate\treason",
        `${taken.uri}\t${taken.cid}\t${held.takenDownAt}\theld\t"Scam link"`,
      ],
      err: [],
    });
    const again = await admin(sys, "record", "takedown", `at://bob.test/${collection}/${rkey}`);
    assert.deepEqual(again, {
      code: 0,
      out: [`${taken.uri} is already taken down (since ${held.takenDownAt})`],
      err: [],
    });

    const restored = await admin(sys, "record", "restore", taken.uri);
    assert.equal(restored.code, 0, restored.err.join("\n"));
    assert.match(restored.out[0], new RegExp(`^Restored ${taken.uri} \\(${taken.cid}\\); commit `));
    const back = await xrpc(sys, "com.atproto.repo.getRecord", { repo: b.did, collection, rkey });
    assert.equal(back.status, 200);
    assert.equal(back.body.cid, taken.cid);
    assert.equal(back.body.value.text, "a harbour scam link");
    const relisted = await xrpc(sys, "com.atproto.repo.listRecords", { repo: b.did, collection });
    assert.deepEqual(relisted.body.records.map((r: { uri: string }) => r.uri), [
      taken.uri,
      kept.uri,
    ]);
    const reserved = await xrpc(sys, "com.atproto.sync.getBlocks", { did: b.did, cids: taken.cid });
    assert.equal(reserved.status, 200);
    assert.equal(readCar(reserved.body).blocks.has(taken.cid), true);
    await until(
      "the restore reached the index",
      async () => assert.deepEqual(await seen(), present),
    );
    const none = await xrpc(sys, "app.social.server.listRecordTakedowns", {}, await accessJwt(bob));
    assert.deepEqual(none.body, { takedowns: [] });
    assert.deepEqual((await admin(sys, "record", "list")).out, [
      "uri\tcid\ttaken_down\tstate\treason",
    ]);
  },
);

forEachBackend(
  "a taken-down like leaves the post's count and comes back on restore",
  async (backend) => {
    await using sys = await startSystem({ backend });
    const alice = sys.client();
    const bob = sys.client();
    await alice.createAccount({ handle: "alice.test", password: "alice-password-1" });
    await bob.createAccount({ handle: "bob.test", password: "bob-password-12" });
    const post = await bob.post({ text: "a post" });
    const like = await alice.like({ uri: post.uri, cid: post.cid });
    const likes = async () => (await bob.thread(post.uri)).like_count ?? 0;
    await until("the like was indexed", async () => assert.equal(await likes(), 1));
    assert.equal((await admin(sys, "record", "takedown", like.uri)).code, 0);
    await until("the like left the count", async () => assert.equal(await likes(), 0));
    assert.equal((await admin(sys, "record", "restore", like.uri)).code, 0);
    await until("the like came back", async () => assert.equal(await likes(), 1));
  },
);

// The account host's side alone from here on: the index is not asked.

Deno.test("the blobs of a taken-down record survive the blob collection unserved while held, and are served again after restore", async () => {
  await using sys = await startSystem();
  const bob = sys.client();
  const b = await bob.createAccount({ handle: "bob.test", password: "bob-password-12" });
  const image = await bob.uploadBlob(new Uint8Array([1, 2, 3, 4, 5]), "image/png");
  const shared = await bob.uploadBlob(new Uint8Array([9, 8, 7]), "image/png");
  const embed = (ref: typeof image) => ({
    $type: "app.social.embed.images",
    images: [{ image: ref, alt: "" }],
  });
  const taken = await bob.post({ text: "two pictures", embed: embed(image) });
  const withShared = await bob.post({ text: "shared picture", embed: embed(shared) });
  const alsoShared = await bob.post({ text: "shared again", embed: embed(shared) });
  const kv = sys.pds.ctx.kv;
  await buildBlobRefIndex(kv, Date.now());
  const served = async (cid: string) =>
    (await fetch(bob.blobUrl(b.did, cid)).then(async (r) => ({
      status: r.status,
      body: await r.arrayBuffer(),
    }))).status;
  assert.equal(await served(image.ref.$link), 200);

  assert.equal((await admin(sys, "record", "takedown", taken.uri)).code, 0);
  assert.equal((await admin(sys, "record", "takedown", withShared.uri)).code, 0);
  // Held: not served (a blob another live record references still is), never collected.
  assert.equal(await served(image.ref.$link), 400);
  assert.equal(await served(shared.ref.$link), 200);
  assert.equal(await sweepUnreferencedBlobs(kv, { now: Date.now() + 2 * DAY_MS }), 0);
  assert.deepEqual(
    (await getBlob(kv, b.did, image.ref.$link))?.bytes,
    new Uint8Array([1, 2, 3, 4, 5]),
  );
  // Deleting the other post leaves the shared blob held only: kept, no longer served.
  await bob.deleteRecord(alsoShared.uri);
  assert.equal(await served(shared.ref.$link), 400);
  assert.equal(await sweepUnreferencedBlobs(kv, { now: Date.now() + 2 * DAY_MS }), 0);
  assert.notEqual(await getBlob(kv, b.did, shared.ref.$link), null);

  // Both holds, a page at a time, for the operator and for the author.
  const [first, second] = [taken.uri, withShared.uri].sort();
  const page1 = await admin(sys, "record", "list", "--limit", "1");
  assert.equal(page1.out.length, 3);
  assert.ok(page1.out[1].startsWith(`${first}\t`), page1.out[1]);
  assert.equal(page1.out[2], `next page: --cursor ${first}`);
  const page2 = await admin(sys, "record", "list", "--limit", "1", "--cursor", first);
  assert.equal(page2.out.length, 2);
  assert.ok(page2.out[1].startsWith(`${second}\t`), page2.out[1]);
  const token = await accessJwt(bob);
  const own1 = await xrpc(sys, "app.social.server.listRecordTakedowns", { limit: "1" }, token);
  assert.deepEqual([own1.body.takedowns.map((t: { uri: string }) => t.uri), own1.body.cursor], [
    [first],
    first,
  ]);
  const own2 = await xrpc(sys, "app.social.server.listRecordTakedowns", {
    limit: "1",
    cursor: first,
  }, token);
  assert.deepEqual([own2.body.takedowns.map((t: { uri: string }) => t.uri), own2.body.cursor], [
    [second],
    undefined,
  ]);
  const badCursor = await xrpc(sys, "app.social.server.listRecordTakedowns", {
    cursor: "at://did:plc:someoneelse/app.social.feed.post/3aaaaaaaaaaaa",
  }, token);
  assert.deepEqual(badCursor, {
    status: 400,
    body: {
      error: "InvalidRequest",
      message: 'Invalid cursor: "at://did:plc:someoneelse/app.social.feed.post/3aaaaaaaaaaaa"',
    },
  });

  assert.equal((await admin(sys, "record", "restore", taken.uri)).code, 0);
  assert.equal((await admin(sys, "record", "restore", withShared.uri)).code, 0);
  assert.equal(await served(image.ref.$link), 200);
  assert.equal(await served(shared.ref.$link), 200);
});

Deno.test("a takedown at a held path the author wrote again replaces the held version, whose own blobs go", async () => {
  await using sys = await startSystem({ push: false });
  const bob = sys.client();
  const b = await bob.createAccount({ handle: "bob.test", password: "bob-password-12" });
  const kv = sys.pds.ctx.kv;
  await buildBlobRefIndex(kv, Date.now());
  const first = await bob.uploadBlob(new Uint8Array([1, 1, 1]), "image/png");
  const second = await bob.uploadBlob(new Uint8Array([2, 2, 2]), "image/png");
  const old = await bob.updateProfile({ displayName: "Bob", avatar: first });
  assert.equal((await admin(sys, "record", "takedown", old.uri, "--reason", "avatar")).code, 0);
  const again = await bob.updateProfile({ displayName: "Bob", avatar: second });
  const took = await admin(sys, "record", "takedown", again.uri, "--reason", "avatar again");
  assert.equal(took.code, 0, took.err.join("\n"));
  assert.deepEqual(took.out.slice(1), [
    `The version taken down before at that path (${old.cid}) is no longer kept`,
  ]);
  assert.equal(await getBlob(kv, b.did, first.ref.$link), null);
  assert.notEqual(await getBlob(kv, b.did, second.ref.$link), null);
  const own = await xrpc(sys, "app.social.server.listRecordTakedowns", {}, await accessJwt(bob));
  assert.deepEqual(
    own.body.takedowns.map((t: { cid: string; reason: string }) => [t.cid, t.reason]),
    [
      [again.cid, "avatar again"],
    ],
  );
  assert.equal((await admin(sys, "record", "restore", again.uri)).code, 0);
  const got = await xrpc(sys, "com.atproto.repo.getRecord", {
    repo: b.did,
    collection: COLLECTION_PROFILE,
    rkey: "self",
  });
  assert.equal(got.body.cid, again.cid);
});

Deno.test("a takedown whose record the author changes before its commit takes nothing down and keeps what was held before", async () => {
  await using sys = await startSystem({ push: false });
  const bob = sys.client();
  await bob.createAccount({ handle: "bob.test", password: "bob-password-12" });
  const deps = { kv: sys.pds.ctx.kv, repos: sys.pds.ctx.repos, now: Date.now };
  const held = async () =>
    (await listRecordTakedowns(deps.kv, { limit: 10 })).takedowns.map((t) => t.cid);

  const profile = await bob.updateProfile({ displayName: "Bob" });
  const post = await bob.post({ text: "a post" });
  let edited = "";
  await assert.rejects(
    takeDownRecord(deps, post.uri, {
      afterHold: async () => void (edited = (await bob.deleteRecord(post.uri)).commit!.rev),
    }),
    (err: RecordTakedownError) => {
      assert.equal(err.code, "RecordChanged");
      assert.equal(
        err.message,
        `Record ${post.uri} changed or went while it was being taken down; nothing was taken down`,
      );
      return true;
    },
  );
  assert.notEqual(edited, "");
  assert.deepEqual(await held(), []);

  // A version held before at the path is put back as it was.
  assert.equal((await takeDownRecord(deps, profile.uri, { reason: "first" })).status, "takendown");
  const again = await bob.updateProfile({ displayName: "Bob again" });
  await assert.rejects(
    takeDownRecord(deps, again.uri, {
      afterHold: async () => void await bob.updateProfile({ displayName: "Bob, third" }),
    }),
    RecordTakedownError,
  );
  assert.deepEqual(await held(), [profile.cid]);
  const back = await getRecordTakedown(
    deps.kv,
    profile.uri.split("/")[2],
    COLLECTION_PROFILE,
    "self",
  );
  assert.equal(back?.reason, "first");
});

Deno.test("record takedown and restore refuse what they cannot do, with exit codes 2 and 1", async () => {
  await using sys = await startSystem({ push: false });
  const bob = sys.client();
  const b = await bob.createAccount({ handle: "bob.test", password: "bob-password-12" });
  const post = await bob.post({ text: "a post" });
  const { collection, rkey } = parts(post.uri);

  const malformed = await admin(sys, "record", "takedown", "https://example.com/post/1");
  assert.equal(malformed.code, 2);
  assert.deepEqual(malformed.err, [
    'admin: Invalid AT-URI: "https://example.com/post/1"',
    "Usage: admin record takedown <at-uri> [--reason <text>]",
  ]);
  const noRkey = await admin(sys, "record", "restore", `at://${b.did}/${collection}`);
  assert.equal(noRkey.code, 2);
  const long = await admin(sys, "record", "takedown", post.uri, "--reason", "x".repeat(1001));
  assert.equal(long.code, 2);
  assert.equal(long.err[0], "admin: --reason is longer than 1000 characters (1001)");
  const reasonOnRestore = await admin(sys, "record", "restore", post.uri, "--reason", "no");
  assert.equal(reasonOnRestore.code, 2);
  assert.equal(reasonOnRestore.err[0], "admin: record restore takes no --reason");

  const unknown = await admin(sys, "record", "takedown", `at://nobody.test/${collection}/${rkey}`);
  assert.deepEqual(unknown, { code: 1, out: [], err: ['admin: No account "nobody.test"'] });
  const missing = `at://${b.did}/${collection}/3aaaaaaaaaaaa`;
  assert.deepEqual(await admin(sys, "record", "takedown", missing), {
    code: 1,
    out: [],
    err: [`admin: No record at ${missing}`],
  });
  assert.deepEqual(await admin(sys, "record", "restore", post.uri), {
    code: 1,
    out: [],
    err: [`admin: No record taken down at ${post.uri}`],
  });

  // A record written again at the held path blocks the restore until it is deleted.
  const profile = await bob.updateProfile({ displayName: "Bob" });
  assert.equal((await admin(sys, "record", "takedown", profile.uri)).code, 0);
  const again = await bob.updateProfile({ displayName: "Bob again" });
  assert.deepEqual(await admin(sys, "record", "restore", profile.uri), {
    code: 1,
    out: [],
    err: [
      `admin: A record now exists at ${profile.uri} (${again.cid}); delete it before restoring ` +
      "the held one",
    ],
  });
  await bob.deleteRecord(again.uri);
  assert.equal((await admin(sys, "record", "restore", profile.uri)).code, 0);
  const got = await xrpc(sys, "com.atproto.repo.getRecord", {
    repo: b.did,
    collection: COLLECTION_PROFILE,
    rkey: "self",
  });
  assert.equal(got.body.cid, profile.cid);

  // A taken-down account: its records are not served already; restore the account first.
  assert.equal((await admin(sys, "account", "takedown", "bob.test")).code, 0);
  assert.deepEqual(await admin(sys, "record", "takedown", post.uri), {
    code: 1,
    out: [],
    err: [
      `admin: Account ${b.did} is taken down; restore the account before you take down ` +
      post.uri,
    ],
  });
  // A deleted account's holds go with it.
  assert.equal((await admin(sys, "account", "restore", "bob.test")).code, 0);
  assert.equal((await admin(sys, "record", "takedown", post.uri)).code, 0);
  assert.equal((await admin(sys, "account", "delete", "bob.test")).code, 0);
  assert.deepEqual(await admin(sys, "record", "restore", post.uri), {
    code: 1,
    out: [],
    err: [`admin: No account "${b.did}"`],
  });
  for (const table of ["record_takedown", "record_takedown_blob", "record_takedown_cid"]) {
    const left = await Array.fromAsync(sys.pds.ctx.kv.list({ prefix: [table, b.did] }));
    assert.deepEqual(left, [], table);
  }
});

Deno.test("deno task admin record takedown runs as its own process with the store's permissions", async () => {
  await using sys = await startSystem({ push: false });
  const bob = sys.client();
  await bob.createAccount({ handle: "bob.test", password: "bob-password-12" });
  const post = await bob.post({ text: "a post" });
  const dir = sys.pds.ctx.config.kvPath.replace(/\/[^/]*$/, "");
  const run = await runPdsScript("admin.ts", dir, ["record", "takedown", post.uri]);
  assert.equal(run.code, 0, run.stderr);
  assert.match(run.stdout, new RegExp(`^Took down ${post.uri} `));
  const { collection, rkey } = parts(post.uri);
  const got = await xrpc(sys, "com.atproto.repo.getRecord", {
    repo: "bob.test",
    collection,
    rkey,
  });
  assert.equal(got.body.error, "RecordTakendown");
});

endBackendTests();
