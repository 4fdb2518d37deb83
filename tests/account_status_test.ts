/**
 * Account status over real servers (issue 37, spec 4.2 rule 12, 6.2 rule 7): `deno task admin
 * account takedown` (run in-process on the account host's store while it runs) hides the account
 * from the index's timeline, profile and search through the local stream's `#account` frame alone
 * (the push is off), and `account restore` brings it back; deactivation by the member likewise.
 * The index on SQLite and on PostgreSQL (issue 40).
 */

import assert from "node:assert/strict";
import { endBackendTests, forEachBackend } from "../appview/_test_helpers.ts";
import { runAdminCli } from "../scripts/admin.ts";
import { startSystem, type TestSystem } from "./_system.ts";
import { waitFor } from "./_util.ts";

async function admin(sys: TestSystem, ...args: string[]): Promise<number> {
  const env = { PDS_KV_PATH: sys.pds.ctx.config.kvPath, PDS_JWT_SECRET: "x".repeat(16) };
  return await runAdminCli(args, env, { out: () => {}, err: () => {} });
}

forEachBackend(
  "an account taken down on the account host leaves the index by the local stream alone, and comes back on restore",
  async (backend) => {
    await using sys = await startSystem({ push: false, backend });
    const alice = sys.client();
    const bob = sys.client();
    const a = await alice.createAccount({ handle: "alice.test", password: "alice-password-1" });
    const b = await bob.createAccount({ handle: "bob.test", password: "bob-password-12" });
    await alice.follow(b.did);
    const post = await bob.post({ text: "a post by bob" });

    const seen = async () => ({
      timeline: (await alice.timeline()).posts.map((p) => p.uri),
      profile: (await alice.profileByDid(b.did)).posts.map((p) => p.uri),
      search: (await alice.search("bob", undefined, a.did)).posts.map((p) => p.uri),
      searchPublic: (await alice.search("bob")).posts.map((p) => p.uri),
    });
    const visible = {
      timeline: [post.uri],
      profile: [post.uri],
      search: [post.uri],
      searchPublic: [post.uri],
    };
    const hidden = { timeline: [], profile: [], search: [], searchPublic: [] };
    const until = (want: unknown, message: string) =>
      waitFor(async () => {
        try {
          assert.deepEqual(await seen(), want);
          return true;
        } catch {
          return false;
        }
      }, { timeoutMs: 5000, intervalMs: 25, message });
    await until(visible, "the index caught up");

    assert.equal(await admin(sys, "account", "takedown", "bob.test", "--reason", "spam"), 0);
    await until(hidden, "the takedown reached the index");
    assert.equal((await alice.profileByDid(b.did)).did, "");

    assert.equal(await admin(sys, "account", "restore", b.did), 0);
    await until(visible, "the restore reached the index");

    // The member's own deactivation hides the account the same way, until it reactivates.
    const token = (await bob.session())!.accessJwt;
    const call = async (nsid: string) => {
      const res = await fetch(`${sys.pdsUrl}/xrpc/${nsid}`, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: "{}",
      });
      await res.body?.cancel();
      assert.equal(res.status, 200, nsid);
    };
    await call("com.atproto.server.deactivateAccount");
    await until(hidden, "the deactivation reached the index");
    await call("com.atproto.server.activateAccount");
    await until(visible, "the activation reached the index");
  },
);

endBackendTests();
