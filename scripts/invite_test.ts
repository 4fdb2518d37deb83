// The invite command line (spec 4.1 rule 6, 3.2) as a real subprocess against a KV file, while
// an account host uses the same file.

import assert from "node:assert/strict";
import { makeTempDir, runPdsScript } from "../tests/_util.ts";
import { startTestServer, xrpcPost } from "../pds/_test_helpers.ts";

function invite(dir: string, ...args: string[]) {
  return runPdsScript("invite.ts", dir, args);
}

Deno.test("invite CLI round trip: create, list, disable, then the disabled code is refused with 400", async () => {
  await using dir = await makeTempDir("invite-cli-");
  const created = await invite(
    dir.path,
    "create",
    "--count",
    "2",
    "--uses",
    "1",
    "--create-store",
  );
  assert.equal(created.code, 0, created.stderr);
  const codes = created.stdout.trim().split("\n");
  assert.equal(codes.length, 2);
  for (const code of codes) assert.match(code, /^[a-z2-7]{5}-[a-z2-7]{5}-[a-z2-7]{5}$/);

  const listed = await invite(dir.path, "list", "--json");
  assert.equal(listed.code, 0, listed.stderr);
  const rows = listed.stdout.trim().split("\n").map((l) => JSON.parse(l));
  assert.deepEqual(rows.map((r) => r.code).sort(), [...codes].sort());
  for (const row of rows) {
    assert.equal(row.used_count, 0);
    assert.equal(row.max_uses, 1);
    assert.equal(row.disabled, false);
    assert.deepEqual(row.redeemed_by, []);
  }

  // The server runs on the same KV file while the CLI disables a code.
  await using s = await startTestServer({
    env: { PDS_INVITE_REQUIRED: "true", PDS_KV_PATH: `${dir.path}/pds.kv` },
  });
  const disabled = await invite(dir.path, "disable", codes[0]);
  assert.equal(disabled.code, 0, disabled.stderr);
  assert.equal(disabled.stdout, `Disabled ${codes[0]}\n`);

  const refused = await xrpcPost(s.url, "com.atproto.server.createAccount", {
    handle: "late.test",
    password: "correct horse battery",
    inviteCode: codes[0],
  });
  assert.equal(refused.status, 400);
  assert.equal((await refused.json()).error, "InvalidInviteCode");
  const accepted = await xrpcPost(s.url, "com.atproto.server.createAccount", {
    handle: "early.test",
    password: "correct horse battery",
    inviteCode: codes[1],
  });
  assert.equal(accepted.status, 200);
  const { did } = await accepted.json();

  const table = await invite(dir.path, "list");
  assert.equal(table.code, 0, table.stderr);
  const lines = table.stdout.trim().split("\n").sort((a, b) => a.localeCompare(b));
  assert.deepEqual(
    lines,
    [`${codes[0]}\t0/1\tdisabled\t-`, `${codes[1]}\t1/1\tenabled\t${did}`].sort((a, b) =>
      a.localeCompare(b)
    ),
  );
});

Deno.test("invite CLI rejects bad arguments with exit code 2 and an unknown code with exit code 1", async () => {
  await using dir = await makeTempDir("invite-cli-");
  const cases: [string[], string][] = [
    [[], "invite: missing command"],
    [["frobnicate"], 'invite: unknown command "frobnicate"'],
    [["create", "--uses", "1"], "invite: --count is required"],
    [
      ["create", "--count", "0", "--uses", "1"],
      'invite: --count must be an integer from 1 to 1000, got "0"',
    ],
    [
      ["create", "--count", "2", "--uses", "many"],
      'invite: --uses must be an integer from 1 to 1000000, got "many"',
    ],
    [["disable"], "invite: disable takes exactly one invite code"],
    [["list", "extra"], 'invite: unexpected argument "extra"'],
    [["list", "--create-store"], "invite: --create-store applies to create only"],
    [["disable", "x", "--create-store"], "invite: disable takes no options"],
  ];
  for (const [args, message] of cases) {
    const res = await invite(dir.path, ...args);
    assert.equal(res.code, 2, args.join(" "));
    assert.equal(res.stdout, "");
    assert.equal(res.stderr.split("\n")[0], message, args.join(" "));
    assert.match(res.stderr, /Usage:\n {2}invite create --count <n> --uses <n>/);
  }
  const flag = await invite(dir.path, "create", "--count", "1", "--uses", "1", "--bogus");
  assert.equal(flag.code, 2);
  assert.match(flag.stderr, /^invite: Unknown option '--bogus'/);

  const store = await invite(dir.path, "create", "--count", "1", "--uses", "1", "--create-store");
  assert.equal(store.code, 0, store.stderr);
  const unknown = await invite(dir.path, "disable", "nope0-nope0-nope0");
  assert.equal(unknown.code, 1);
  assert.equal(unknown.stderr, 'invite: invite code not found: "nope0-nope0-nope0"\n');
});

Deno.test("invite CLI refuses a store that does not exist, saying where it looked, and creates nothing (issue 36)", async () => {
  await using dir = await makeTempDir("invite-cli-");
  const wrong = `${dir.path}/wrong`;
  const hint = "set DATA_DIR or PDS_KV_PATH to the account host's, or pass --create-store " +
    "to start a new one";
  const cases: [Record<string, string>, string[], string][] = [
    [
      { DATA_DIR: wrong },
      ["create", "--count", "1", "--uses", "1"],
      `invite: no account host store at ${wrong}/pds.kv (from DATA_DIR); ${hint}\n`,
    ],
    [
      { DATA_DIR: dir.path, PDS_KV_PATH: `${wrong}/other.kv` },
      ["list"],
      `invite: no account host store at ${wrong}/other.kv (from PDS_KV_PATH); ${hint}\n`,
    ],
    [
      { DATA_DIR: wrong },
      ["disable", "aaaaa-bbbbb-ccccc"],
      `invite: no account host store at ${wrong}/pds.kv (from DATA_DIR); ${hint}\n`,
    ],
  ];
  for (const [env, args, stderr] of cases) {
    const res = await runPdsScript("invite.ts", dir.path, args, env);
    assert.equal(res.code, 1, args.join(" "));
    assert.equal(res.stdout, "", args.join(" "));
    assert.equal(res.stderr, stderr, args.join(" "));
  }
  assert.deepEqual([...Deno.readDirSync(dir.path)], []);
});
