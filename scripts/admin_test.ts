// The operator's command line (`deno task admin`) on a real KV file that a running account host
// uses too: exact output, paging, usage errors.

import assert from "node:assert/strict";
import { runPdsScript } from "../tests/_util.ts";
import { signUp, startTestServer, type TestServer, xrpcPost } from "../pds/_test_helpers.ts";
import { getAccount } from "../pds/accounts/accounts.ts";
import { COLLECTION_POST } from "../shared/nsid.ts";
import { runAdminCli } from "./admin.ts";

/** Runs the CLI in this process on the server's store; returns the exit code and lines. */
async function admin(s: TestServer, ...args: string[]) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runAdminCli(args, { PDS_KV_PATH: s.kvPath, PDS_JWT_SECRET: "x".repeat(16) }, {
    out: (l) => out.push(l),
    err: (l) => err.push(l),
  });
  return { code, out, err };
}

async function post(s: TestServer, session: { did: string; accessJwt: string }, text: string) {
  const res = await xrpcPost(s.url, "com.atproto.repo.createRecord", {
    repo: session.did,
    collection: COLLECTION_POST,
    record: { $type: COLLECTION_POST, text, createdAt: new Date().toISOString() },
  }, { authorization: `Bearer ${session.accessJwt}` });
  assert.equal(res.status, 200, await res.clone().text());
  await res.body?.cancel();
}

const HEADER = "handle\tdid\tcreated\tstatus\trecords";

Deno.test("admin accounts list prints handle, DID, created, status and record count by handle, paged with a cursor", async () => {
  await using s = await startTestServer();
  const carol = await signUp(s.url, "carol.test");
  const alice = await signUp(s.url, "alice.test");
  const bob = await signUp(s.url, "bob.test");
  await post(s, alice, "one");
  await post(s, alice, "two");
  await post(s, bob, "three");
  const row = async (session: { did: string; handle: string }, records: number) => {
    const account = await getAccount(s.ctx.kv, session.did);
    return `${session.handle}\t${session.did}\t${account!.createdAt}\tactive\t${records}`;
  };

  const all = await admin(s, "accounts", "list");
  assert.deepEqual(all, {
    code: 0,
    out: [HEADER, await row(alice, 2), await row(bob, 1), await row(carol, 0)],
    err: [],
  });

  const first = await admin(s, "accounts", "list", "--limit", "2");
  assert.deepEqual(first.out, [
    HEADER,
    await row(alice, 2),
    await row(bob, 1),
    "next page: --cursor bob.test",
  ]);
  const second = await admin(s, "accounts", "list", "--limit", "2", "--cursor", "bob.test");
  assert.deepEqual(second.out, [HEADER, await row(carol, 0)]);

  const prefixed = await admin(s, "accounts", "list", "--handle-prefix", "B");
  assert.deepEqual(prefixed.out, [HEADER, await row(bob, 1)]);
});

Deno.test("admin usage errors exit 2 naming the bad value; --help prints each command's usage", async () => {
  await using s = await startTestServer();
  const badLimit = await admin(s, "accounts", "list", "--limit", "0");
  assert.equal(badLimit.code, 2);
  assert.deepEqual(badLimit.err, [
    'admin: --limit must be an integer from 1 to 1000, got "0"',
    "Usage: admin accounts list [--handle-prefix <prefix>] [--limit <n>] [--cursor <handle>]",
  ]);
  const unknown = await admin(s, "accounts", "purge");
  assert.equal(unknown.code, 2);
  assert.equal(unknown.err[0], 'admin: unknown command "accounts purge"');
  const noTarget = await admin(s, "account", "reset-password");
  assert.equal(noTarget.code, 2);
  assert.deepEqual(noTarget.err, [
    "admin: reset-password takes exactly one handle or DID",
    "Usage: admin account reset-password <handle|DID>",
  ]);

  const help = await admin(s, "account", "reset-password", "--help");
  assert.equal(help.code, 0);
  assert.equal(help.out[0], "Usage: admin account reset-password <handle|DID>");
  const top = await admin(s, "--help");
  assert.equal(top.code, 0);
  assert.equal(top.out[0], "Usage:");
});

Deno.test("admin account reset-password prints a token for a handle or DID and refuses an unknown account", async () => {
  await using s = await startTestServer();
  const alice = await signUp(s.url, "alice.test");
  for (const target of ["Alice.test", alice.did]) {
    const { code, out, err } = await admin(s, "account", "reset-password", target);
    assert.equal(code, 0, err.join("\n"));
    assert.equal(out.length, 2);
    assert.match(
      out[0],
      new RegExp(
        `^Reset token for alice\\.test \\(${alice.did}\\), single use, valid until \\d{4}-.*Z:$`,
      ),
    );
    assert.match(out[1], /^[a-z2-7]{5}-[a-z2-7]{5}-[a-z2-7]{5}-[a-z2-7]{5}$/);
  }
  const missing = await admin(s, "account", "reset-password", "nobody.test");
  assert.deepEqual(missing, { code: 1, out: [], err: ['admin: no account "nobody.test"'] });
});

Deno.test("admin runs as its own process on the store and refuses a directory without one", async () => {
  await using s = await startTestServer();
  await signUp(s.url, "alice.test");
  const dir = s.kvPath.slice(0, s.kvPath.lastIndexOf("/"));
  const listed = await runPdsScript("admin.ts", dir, ["accounts", "list"]);
  assert.equal(listed.code, 0, listed.stderr);
  assert.equal(listed.stdout.split("\n")[1].split("\t")[0], "alice.test");
  const empty = await Deno.makeTempDir({ prefix: "admin-none-" });
  try {
    const refused = await runPdsScript("admin.ts", empty, ["accounts", "list"]);
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /^admin: no account host store at /);
  } finally {
    await Deno.remove(empty, { recursive: true });
  }
});

Deno.test("a token from admin account reset-password sets a new password once and ends every session of the account", async () => {
  await using s = await startTestServer();
  const alice = await signUp(s.url, "alice.test");
  const { out } = await admin(s, "account", "reset-password", "alice.test");
  const token = out[1];

  const reset = await xrpcPost(s.url, "com.atproto.server.resetPassword", {
    token,
    password: "a brand new password",
  });
  assert.equal(reset.status, 200, await reset.clone().text());
  await reset.body?.cancel();

  const login = (password: string) =>
    xrpcPost(s.url, "com.atproto.server.createSession", { identifier: "alice.test", password });
  const old = await login("correct horse battery");
  assert.equal(old.status, 401);
  assert.equal((await old.json()).error, "AuthenticationRequired");
  const fresh = await login("a brand new password");
  assert.equal(fresh.status, 200);
  const session = await fresh.json();

  const refreshOld = await xrpcPost(s.url, "com.atproto.server.refreshSession", undefined, {
    authorization: `Bearer ${alice.refreshJwt}`,
  });
  assert.equal(refreshOld.status, 400);
  assert.deepEqual(await refreshOld.json(), {
    error: "ExpiredToken",
    message: "Token has been revoked",
  });
  const refreshNew = await xrpcPost(s.url, "com.atproto.server.refreshSession", undefined, {
    authorization: `Bearer ${session.refreshJwt}`,
  });
  assert.equal(refreshNew.status, 200);
  await refreshNew.body?.cancel();

  const again = await xrpcPost(s.url, "com.atproto.server.resetPassword", {
    token,
    password: "yet another password",
  });
  assert.equal(again.status, 400);
  assert.deepEqual(await again.json(), {
    error: "InvalidToken",
    message: "Reset token is invalid or was already used",
  });
});

Deno.test("admin reports list shows the members' open reports; reports resolve closes one with a note", async () => {
  await using s = await startTestServer();
  const alice = await signUp(s.url, "alice.test");
  const bob = await signUp(s.url, "bob.test");
  // A report's subject must exist on the host (docs/behaviour.md 4.1 rule 8).
  const posted = await xrpcPost(s.url, "com.atproto.repo.createRecord", {
    repo: bob.did,
    collection: "app.social.feed.post",
    record: { text: "rude words", createdAt: "2024-05-01T12:00:00.000Z" },
  }, { authorization: `Bearer ${bob.accessJwt}` });
  const { uri, cid } = await posted.json();
  const send = async (body: unknown) => {
    const res = await xrpcPost(s.url, "com.atproto.moderation.createReport", body, {
      authorization: `Bearer ${alice.accessJwt}`,
    });
    assert.equal(res.status, 200);
    return (await res.json()).createdAt as string;
  };
  const at1 = await send({
    reasonType: "com.atproto.moderation.defs#reasonSpam",
    reason: "sells\tfollowers\nlinks",
    subject: { $type: "com.atproto.admin.defs#repoRef", did: bob.did },
  });
  const at2 = await send({
    reasonType: "com.atproto.moderation.defs#reasonRude",
    subject: { $type: "com.atproto.repo.strongRef", uri, cid },
  });
  const header = "id\tcreated\tstatus\tby\treason_type\tsubject\treason\tnote";
  const first =
    `1\t${at1}\topen\t${alice.did}\tcom.atproto.moderation.defs#reasonSpam\t${bob.did}\t` +
    `"sells\\tfollowers\\nlinks"\t-`;
  const second =
    `2\t${at2}\topen\t${alice.did}\tcom.atproto.moderation.defs#reasonRude\t${uri}\t-\t-`;

  assert.deepEqual(await admin(s, "reports", "list"), {
    code: 0,
    out: [header, first, second],
    err: [],
  });
  assert.deepEqual(await admin(s, "reports", "resolve", "1", "--note", "warned bob"), {
    code: 0,
    out: ["Resolved report 1"],
    err: [],
  });
  assert.deepEqual((await admin(s, "reports", "list")).out, [header, second]);
  const all = await admin(s, "reports", "list", "--all");
  assert.equal(all.out.length, 3);
  assert.match(
    all.out[1],
    new RegExp(`^1\\t${at1}\\tresolved\\t.*\\t"warned bob"$`),
  );

  assert.deepEqual(await admin(s, "reports", "resolve", "1"), {
    code: 1,
    out: [],
    err: ["admin: report 1 is already resolved"],
  });
  assert.deepEqual(await admin(s, "reports", "resolve", "9"), {
    code: 1,
    out: [],
    err: ["admin: no report 9"],
  });
  const bad = await admin(s, "reports", "resolve", "one");
  assert.equal(bad.code, 2);
  assert.deepEqual(bad.err, [
    'admin: report id must be a positive integer, got "one"',
    "Usage: admin reports resolve <id> [--note <text>]",
  ]);
  const wrongOption = await admin(s, "reports", "list", "--note", "x");
  assert.equal(wrongOption.code, 2);
  assert.equal(wrongOption.err[0], "admin: reports list takes no --note");
});
