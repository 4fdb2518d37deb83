// The compaction command line as a real subprocess against the KV file an account host is
// serving from (spec 1 rule 2: the repository stays a valid signed repository throughout).

import assert from "node:assert/strict";
import { verifyRepoCar } from "@atproto/repo";
import { makeTempDir, runPdsScript } from "../tests/_util.ts";
import { signUp, startTestServer, xrpcGet, xrpcPost } from "../pds/_test_helpers.ts";
import { readCar } from "../shared/car.ts";
import { COLLECTION_POST } from "../shared/nsid.ts";
import { BlockStore } from "../pds/repo/block_store.ts";
import type { RepoRoot } from "../pds/repo/repo_root.ts";
import { repoRootKey } from "../pds/store/keys.ts";

/** Runs the command line on the KV file `kvPath` (`<dir>/pds.kv`, as the test server's). */
function compact(kvPath: string, ...args: string[]) {
  return runPdsScript("compact.ts", kvPath.slice(0, kvPath.lastIndexOf("/")), args);
}

/** Stored block copies and the root of `did`, read from the KV file the server uses. */
async function storage(kvPath: string, did: string) {
  const kv = await Deno.openKv(kvPath);
  try {
    let copies = 0;
    for (const pack of await new BlockStore(kv).source(did).packs()) copies += pack.blocks.size;
    const root = (await kv.get<RepoRoot>(repoRootKey(did))).value!;
    return { copies, root };
  } finally {
    kv.close();
  }
}

Deno.test("compact CLI compacts the repositories with garbage while the account host serves them", async () => {
  await using s = await startTestServer();
  const alice = await signUp(s.url, "alice.test");
  const auth = { authorization: `Bearer ${alice.accessJwt}` };
  const post = async (text: string) => {
    const res = await xrpcPost(s.url, "com.atproto.repo.createRecord", {
      repo: alice.did,
      collection: COLLECTION_POST,
      record: { text, createdAt: "2024-05-01T12:00:00.000Z" },
    }, auth);
    assert.equal(res.status, 200);
    return (await res.json()).uri.split("/").pop() as string;
  };
  const rkeys: string[] = [];
  for (let i = 0; i < 30; i++) rkeys.push(await post(`post ${i}`));
  for (const rkey of rkeys.slice(0, 5)) {
    const res = await xrpcPost(s.url, "com.atproto.repo.deleteRecord", {
      repo: alice.did,
      collection: COLLECTION_POST,
      rkey,
    }, auth);
    assert.equal(res.status, 200);
  }
  // A second account with nothing but its initial commit has no garbage: not listed.
  const bob = await signUp(s.url, "bob.test");
  const exportCar = async () => {
    const res = await xrpcGet(s.url, `com.atproto.sync.getRepo?did=${alice.did}`);
    assert.equal(res.status, 200);
    return new Uint8Array(await res.arrayBuffer());
  };
  const before = await exportCar();
  const reachable = readCar(before).blocks.size;
  const stored = await storage(s.kvPath, alice.did);
  const garbage = stored.copies - reachable;
  assert.equal(stored.root.garbage, garbage);

  const run = await compact(s.kvPath);
  assert.equal(run.code, 0, run.stderr);
  const lines = run.stdout.trim().split("\n");
  assert.equal(lines.length, 2, run.stdout);
  assert.match(
    lines[0],
    new RegExp(
      `^${alice.did}\tremoved ${garbage} blocks \\(\\d+ bytes\\)\tkept ${reachable}\t\\d+ ms$`,
    ),
  );
  assert.match(lines[1], new RegExp(`^Compacted 1 repository: removed ${garbage} blocks`));
  assert.equal(run.stderr, "");
  const after = await storage(s.kvPath, alice.did);
  assert.equal(after.copies, reachable);
  assert.deepEqual({ garbage: after.root.garbage, kept: after.root.kept }, {
    garbage: 0,
    kept: reachable,
  });

  // The server reads and writes on: the same export, and a new commit on the rewritten root.
  assert.deepEqual(await exportCar(), before);
  await post("after the compaction");
  const verified = await verifyRepoCar(await exportCar(), alice.did);
  assert.equal(verified.creates.length, 26);

  // Named repositories are compacted whatever their count; nothing left to remove in bob's.
  const named = await compact(s.kvPath, bob.did);
  assert.equal(named.code, 0, named.stderr);
  assert.match(named.stdout, new RegExp(`^${bob.did}\tremoved 0 blocks \\(0 bytes\\)\tkept 2\t`));
});

Deno.test("compact CLI: a bad argument exits 2, an unknown repository exits 1", async () => {
  await using s = await startTestServer();
  const usage = await compact(s.kvPath, "not-a-did");
  assert.equal(usage.code, 2);
  assert.match(usage.stderr, /^compact: not a DID: "not-a-did"\nUsage:/);
  const option = await compact(s.kvPath, "--all");
  assert.equal(option.code, 2);
  assert.match(option.stderr, /^compact: Unknown option '--all'/);
  const unknown = await compact(s.kvPath, "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa");
  assert.equal(unknown.code, 1);
  assert.equal(
    unknown.stderr,
    "compact: repository not found: did:plc:aaaaaaaaaaaaaaaaaaaaaaaa\n",
  );
  assert.equal(unknown.stdout, "Compacted 0 repositories: removed 0 blocks (0 bytes)\n");
});

Deno.test("compact CLI refuses a store that does not exist, saying where it looked, and creates nothing (issue 36)", async () => {
  await using dir = await makeTempDir("compact-cli-");
  const wrong = `${dir.path}/wrong`;
  const res = await runPdsScript("compact.ts", dir.path, [], { DATA_DIR: wrong });
  assert.equal(res.code, 1);
  assert.equal(res.stdout, "");
  assert.equal(
    res.stderr,
    `compact: no account host store at ${wrong}/pds.kv (from DATA_DIR); ` +
      "set DATA_DIR or PDS_KV_PATH to the account host's\n",
  );
  assert.deepEqual([...Deno.readDirSync(dir.path)], []);
});
