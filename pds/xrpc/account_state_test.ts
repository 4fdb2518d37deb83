// Account status on a real account host: takedown and restore by the operator's command line
// (on the running host's store), deactivation by the member; what XRPC, the store and the
// stream (#account frames, decoded as a foreign consumer would) show after each step.

import assert from "node:assert/strict";
import { readCar } from "../../shared/car.ts";
import { decodeFrame } from "../../shared/frame.ts";
import { COLLECTION_POST } from "../../shared/nsid.ts";
import { waitFor } from "../../runtime/_test_helpers.ts";
import {
  signUp,
  startTestServer,
  StreamClient,
  type TestServer,
  xrpcGet,
  xrpcPost,
} from "../_test_helpers.ts";
import { getAccount } from "../accounts/accounts.ts";
import { type AccountWithStatus } from "../accounts/account_status.ts";
import { runAdminCli } from "../../scripts/admin.ts";

const PASSWORD = "correct horse battery";

async function admin(s: TestServer, ...args: string[]) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runAdminCli(args, { PDS_KV_PATH: s.kvPath, PDS_JWT_SECRET: "x".repeat(16) }, {
    out: (l) => out.push(l),
    err: (l) => err.push(l),
  });
  return { code, out, err };
}

async function answer(res: Promise<Response>): Promise<[number, Record<string, unknown>]> {
  const r = await res;
  if (!(r.headers.get("content-type") ?? "").includes("json")) {
    await r.body?.cancel();
    return [r.status, {}];
  }
  return [r.status, await r.json()];
}

function post(s: TestServer, session: { did: string; accessJwt: string }, text: string) {
  return xrpcPost(s.url, "com.atproto.repo.createRecord", {
    repo: session.did,
    collection: COLLECTION_POST,
    record: { $type: COLLECTION_POST, text, createdAt: new Date().toISOString() },
  }, { authorization: `Bearer ${session.accessJwt}` });
}

/** The #account frames a client received, as decoded bodies. */
function accountFrames(client: StreamClient): Record<string, unknown>[] {
  return client.frames.filter((f) => f.header.t === "#account").map((f) => f.body);
}

async function syncAnswers(s: TestServer, did: string, rkey: string) {
  const q = `did=${encodeURIComponent(did)}`;
  return [
    (await answer(xrpcGet(s.url, `com.atproto.sync.getRepo?${q}`)))[1].error,
    (await answer(xrpcGet(s.url, `com.atproto.sync.getLatestCommit?${q}`)))[1].error,
    (await answer(xrpcGet(
      s.url,
      `com.atproto.sync.getRecord?${q}&collection=${COLLECTION_POST}&rkey=${rkey}`,
    )))[1].error,
  ];
}

Deno.test("admin account takedown sequences an #account frame, locks the account out and hides its repository; restore reverses it", async () => {
  await using s = await startTestServer();
  const alice = await signUp(s.url, "alice.test");
  const created = await answer(post(s, alice, "before"));
  assert.equal(created[0], 200);
  const rkey = String(created[1].uri).split("/").pop()!;
  const live = await StreamClient.connect(s.url);
  try {
    const down = await admin(s, "account", "takedown", "alice.test", "--reason", "spam");
    assert.equal(down.code, 0, down.err.join("\n"));
    // Seqs 1-4 are the sign-up's #identity, #account, first #commit and #sync; 5 the post.
    assert.match(
      down.out[0],
      /^Took down alice\.test \(did:plc:[a-z2-7]{24}\); #account event seq 6$/,
    );

    // The store, XRPC and the stream.
    const stored = (await getAccount(s.ctx.kv, alice.did)) as AccountWithStatus;
    assert.equal(stored.status, "takendown");
    assert.equal(stored.takedownReason, "spam");
    await waitFor(() => accountFrames(live).length === 1, { message: "#account frame" });
    const [frame] = accountFrames(live);
    assert.deepEqual(Object.keys(frame).sort(), ["active", "did", "seq", "status", "time"]);
    assert.equal(frame.did, alice.did);
    assert.equal(frame.seq, 6);
    assert.equal(frame.active, false);
    assert.equal(frame.status, "takendown");

    assert.deepEqual(
      await answer(xrpcPost(s.url, "com.atproto.server.createSession", {
        identifier: "alice.test",
        password: PASSWORD,
      })),
      [401, { error: "AccountTakedown", message: `Account has been taken down: ${alice.did}` }],
    );
    const refresh = await answer(xrpcPost(s.url, "com.atproto.server.refreshSession", undefined, {
      authorization: `Bearer ${alice.refreshJwt}`,
    }));
    assert.deepEqual([refresh[0], refresh[1].error], [401, "AccountTakedown"]);
    const write = await answer(post(s, alice, "during"));
    assert.deepEqual([write[0], write[1].error], [401, "AccountTakedown"]);
    assert.deepEqual(await syncAnswers(s, alice.did, rkey), [
      "RepoTakendown",
      "RepoTakendown",
      "RepoTakendown",
    ]);
    assert.deepEqual(
      await answer(xrpcGet(s.url, `com.atproto.sync.getRepoStatus?did=${alice.did}`)),
      [200, { did: alice.did, active: false, status: "takendown" }],
    );
    const list = await admin(s, "accounts", "list");
    assert.equal(list.out[1].split("\t")[3], "takendown");
    // A member cannot lift a takedown by activating.
    const relog = await answer(xrpcPost(s.url, "com.atproto.server.activateAccount", {}, {
      authorization: `Bearer ${alice.accessJwt}`,
    }));
    assert.deepEqual([relog[0], relog[1].error], [401, "AccountTakedown"]);

    // Restore.
    const up = await admin(s, "account", "restore", alice.did);
    assert.equal(up.code, 0, up.err.join("\n"));
    await waitFor(() => accountFrames(live).length === 2, { message: "second #account frame" });
    assert.deepEqual(
      { ...accountFrames(live)[1], time: "-" },
      { did: alice.did, seq: 7, time: "-", active: true },
    );
    assert.equal(((await getAccount(s.ctx.kv, alice.did)) as AccountWithStatus).status, undefined);
    const login = await answer(xrpcPost(s.url, "com.atproto.server.createSession", {
      identifier: "alice.test",
      password: PASSWORD,
    }));
    assert.deepEqual([login[0], login[1].active], [200, true]);
    // The host's own sequencer continues after the events the other writer sequenced.
    const after = await answer(
      post(s, { did: alice.did, accessJwt: String(login[1].accessJwt) }, "after"),
    );
    assert.equal(after[0], 200);
    await live.waitForSeq(5);
    assert.deepEqual(await syncAnswers(s, alice.did, rkey), [undefined, undefined, undefined]);
    const status = await answer(xrpcGet(s.url, `com.atproto.sync.getRepoStatus?did=${alice.did}`));
    assert.deepEqual([status[1].active, status[1].status, typeof status[1].rev], [
      true,
      undefined,
      "string",
    ]);
    assert.equal(
      (await admin(s, "account", "restore", "alice.test")).out[0],
      `alice.test (${alice.did}) is already active`,
    );
  } finally {
    await live.close();
  }

  // A consumer replaying from the start gets the same frames, in seq order.
  const replay = await StreamClient.connect(s.url, 0);
  try {
    await waitFor(() => replay.frames.length >= 8, { message: "replayed frames" });
    assert.deepEqual(
      replay.frames.map((f) => [f.header.t, f.body.seq]),
      [
        ["#identity", 1],
        ["#account", 2],
        ["#commit", 3],
        ["#sync", 4],
        ["#commit", 5],
        ["#account", 6],
        ["#account", 7],
        ["#commit", 8],
      ],
    );
    assert.deepEqual(decodeFrame(replay.raw[5]).body.status, "takendown");
  } finally {
    await replay.close();
  }
});

Deno.test("deactivateAccount hides the member's repository and refuses writes until activateAccount; login still works", async () => {
  await using s = await startTestServer();
  const bob = await signUp(s.url, "bob.test");
  const auth = { authorization: `Bearer ${bob.accessJwt}` };
  const created = await answer(post(s, bob, "hello"));
  const rkey = String(created[1].uri).split("/").pop()!;
  const live = await StreamClient.connect(s.url);
  try {
    assert.equal(
      (await answer(xrpcPost(s.url, "com.atproto.server.deactivateAccount", {}, auth)))[0],
      200,
    );
    await waitFor(() => accountFrames(live).length === 1, { message: "#account frame" });
    assert.deepEqual({ ...accountFrames(live)[0], time: "-" }, {
      did: bob.did,
      seq: 6, // after the sign-up's four events and the post
      time: "-",
      active: false,
      status: "deactivated",
    });
    assert.equal(
      ((await getAccount(s.ctx.kv, bob.did)) as AccountWithStatus).status,
      "deactivated",
    );
    assert.deepEqual(await syncAnswers(s, bob.did, rkey), [
      "RepoDeactivated",
      "RepoDeactivated",
      "RepoDeactivated",
    ]);
    const write = await answer(post(s, bob, "hidden"));
    assert.deepEqual(write, [401, {
      error: "AccountDeactivated",
      message: `Account is deactivated: ${bob.did}`,
    }]);
    const login = await answer(xrpcPost(s.url, "com.atproto.server.createSession", {
      identifier: "bob.test",
      password: PASSWORD,
    }));
    assert.deepEqual([login[0], login[1].active, login[1].status], [200, false, "deactivated"]);
    const session = await answer(xrpcGet(s.url, "com.atproto.server.getSession", auth));
    assert.deepEqual([session[0], session[1].active, session[1].status], [
      200,
      false,
      "deactivated",
    ]);

    assert.equal(
      (await answer(xrpcPost(s.url, "com.atproto.server.activateAccount", {}, auth)))[0],
      200,
    );
    await waitFor(() => accountFrames(live).length === 2, { message: "second #account frame" });
    assert.deepEqual([accountFrames(live)[1].active, accountFrames(live)[1].status], [
      true,
      undefined,
    ]);
    // Activation announces the identity, the status and the repository's state, in that order
    // at consecutive seqs, as the reference host does (docs/behaviour.md 6.1 rule 10).
    const activation = live.frames.slice(-3);
    assert.deepEqual(activation.map((f) => [f.header.t, f.body.seq]), [
      ["#identity", 7],
      ["#account", 8],
      ["#sync", 9],
    ]);
    assert.equal(activation[0].body.handle, "bob.test");
    const root = await answer(
      xrpcGet(s.url, `com.atproto.sync.getLatestCommit?did=${encodeURIComponent(bob.did)}`),
    );
    assert.equal(activation[2].body.rev, root[1].rev);
    const car = readCar(activation[2].body.blocks as Uint8Array);
    assert.deepEqual(car.roots.map(String), [root[1].cid]);
    assert.equal((await answer(post(s, bob, "back")))[0], 200);
    assert.deepEqual(await syncAnswers(s, bob.did, rkey), [undefined, undefined, undefined]);
  } finally {
    await live.close();
  }
});
