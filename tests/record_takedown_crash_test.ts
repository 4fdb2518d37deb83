/**
 * Crash claim of record takedown (docs/behaviour.md 4.1 rule 15): the hold is stored before the
 * takedown's commit and dropped after the restore's, so a process killed with SIGKILL between the
 * two steps leaves a pending hold, which changes nothing anyone sees (the record is served and
 * indexed, its author's list leaves it out, getBlocks serves its block) and which running the same
 * command again finishes. The index on SQLite and on PostgreSQL (issue 40): it serves the record
 * throughout the interrupted steps and drops and restores it with the finished ones.
 */

import assert from "node:assert/strict";
import { endBackendTests, forEachBackend } from "../appview/_test_helpers.ts";
import { runAdminCli } from "../scripts/admin.ts";
import { startSystem, type TestSystem } from "./_system.ts";
import { REPO_ROOT, waitFor } from "./_util.ts";

async function admin(sys: TestSystem, ...args: string[]) {
  const out: string[] = [];
  const err: string[] = [];
  const env = { PDS_KV_PATH: sys.pds.ctx.config.kvPath, PDS_JWT_SECRET: "x".repeat(16) };
  const code = await runAdminCli(args, env, { out: (l) => out.push(l), err: (l) => err.push(l) });
  return { code, out, err };
}

/** Runs the step `action` in a process of its own, which kills itself halfway. */
async function interrupted(sys: TestSystem, action: "takedown" | "restore", uri: string) {
  const kvPath = sys.pds.ctx.config.kvPath;
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--quiet",
      "--allow-read",
      `--allow-write=${kvPath.replace(/\/[^/]*$/, "")}`,
      "--allow-run",
      new URL("tests/_record_takedown_interrupted.ts", REPO_ROOT).pathname,
      kvPath,
      action,
      uri,
    ],
    cwd: REPO_ROOT.pathname,
    clearEnv: true,
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(out.signal, "SIGKILL", new TextDecoder().decode(out.stderr));
}

async function get(sys: TestSystem, nsid: string, query: Record<string, string>, token?: string) {
  const res = await fetch(`${sys.pdsUrl}/xrpc/${nsid}?${new URLSearchParams(query)}`, {
    headers: token === undefined ? {} : { authorization: `Bearer ${token}` },
  });
  const json = res.headers.get("content-type")?.includes("json");
  const body = json ? await res.json() : (await res.body?.cancel(), null);
  return { status: res.status, body };
}

forEachBackend(
  "a takedown or restore killed between its hold and its commit leaves a pending hold that nobody sees, and running it again finishes it",
  async (backend) => {
    await using sys = await startSystem({ push: false, backend });
    const bob = sys.client();
    const b = await bob.createAccount({ handle: "bob.test", password: "bob-password-12" });
    const post = await bob.post({ text: "a harbour post" });
    const [, collection, rkey] = post.uri.slice("at://".length).split("/");
    const token = (await bob.session())!.accessJwt;
    const indexed = async () => (await bob.search("harbour")).posts.map((p) => p.uri);
    await waitFor(async () => (await indexed()).length === 1, { message: "the post was indexed" });

    // Seen by everyone as before: the record, its block, the author's list, the index.
    const unchanged = async () => {
      const got = await get(sys, "com.atproto.repo.getRecord", { repo: b.did, collection, rkey });
      assert.equal(got.status, 200);
      assert.equal(got.body.cid, post.cid);
      const blocks = await get(sys, "com.atproto.sync.getBlocks", { did: b.did, cids: post.cid });
      assert.equal(blocks.status, 200);
      const own = await get(sys, "app.social.server.listRecordTakedowns", {}, token);
      assert.deepEqual(own.body, { takedowns: [] });
      const list = await admin(sys, "record", "list");
      assert.equal(list.out.length, 2);
      assert.match(list.out[1], new RegExp(`^${post.uri}\t${post.cid}\t\\S+\tpending\t"spam"$`));
    };

    const head = await get(sys, "com.atproto.sync.getLatestCommit", { did: b.did });
    await interrupted(sys, "takedown", post.uri);
    await unchanged();
    assert.deepEqual(
      (await get(sys, "com.atproto.sync.getLatestCommit", { did: b.did })).body,
      head.body,
    );
    assert.deepEqual(await indexed(), [post.uri]);

    const finished = await admin(sys, "record", "takedown", post.uri);
    assert.equal(finished.code, 0, finished.err.join("\n"));
    assert.match(finished.out[0], /^Took down /);
    const gone = await get(sys, "com.atproto.repo.getRecord", { repo: b.did, collection, rkey });
    assert.equal(gone.body.error, "RecordTakendown");
    await waitFor(async () => (await indexed()).length === 0, {
      message: "the takedown was indexed",
    });
    const own = await get(sys, "app.social.server.listRecordTakedowns", {}, token);
    assert.equal(own.body.takedowns[0].reason, "spam");

    await interrupted(sys, "restore", post.uri);
    await unchanged();
    await waitFor(async () => (await indexed()).length === 1, {
      message: "the restore was indexed",
    });

    const restored = await admin(sys, "record", "restore", post.uri);
    assert.deepEqual(restored, {
      code: 0,
      out: [
        `Restored ${post.uri} (${post.cid}): it was still in the repository; the hold is dropped`,
      ],
      err: [],
    });
    assert.deepEqual((await admin(sys, "record", "list")).out, [
      "uri\tcid\ttaken_down\tstate\treason",
    ]);
  },
);

endBackendTests();
