// The stream frames of the current protocol, read by a foreign consumer (docs/behaviour.md 6.1
// rules 7-10, issue 38): @atproto/sync's Firehose validates every message against the
// subscribeRepos lexicon and verifies each commit with the key it resolves from the account's
// DID at a PLC directory on loopback (@did-plc/server), where the account host published it.

import assert from "node:assert/strict";
import { IdResolver } from "@atproto/identity";
import { type Event, Firehose } from "@atproto/sync";
import { COLLECTION_POST } from "../shared/nsid.ts";
import { signUp, startTestServer, xrpcPost } from "../pds/_test_helpers.ts";
import { waitFor } from "./_util.ts";
import { loadPlcServer, startPlcDirectory } from "./_plc_directory.ts";

const plc = await loadPlcServer();
if (typeof plc === "string") console.warn(`Skipping the Firehose test: ${plc}`);

Deno.test({
  name:
    "@atproto/sync's Firehose reads #identity, #account and #sync of a new account, its verified commits, a handle change and a deactivation",
  ignore: typeof plc === "string",
  sanitizeOps: false, // the library's WebSocket (npm `ws`) ends its timers after the test
  sanitizeResources: false,
  async fn() {
    if (typeof plc === "string") return;
    await using directory = await startPlcDirectory(plc);
    await using s = await startTestServer({ env: { PDS_PLC_URL: directory.url } });
    const events: Event[] = [];
    const errors: unknown[] = [];
    const firehose = new Firehose({
      service: s.url.replace(/^http/, "ws"),
      idResolver: new IdResolver({ plcUrl: directory.url, fetch: globalThis.fetch }),
      // The handles end in .test, which no DNS or HTTPS lookup resolves.
      unauthenticatedHandles: true,
      getCursor: () => 0,
      handleEvent: (evt) => void events.push(evt),
      onError: (err) => void errors.push(err),
    });
    void firehose.start();
    try {
      const alice = await signUp(s.url, "alice.test");
      const first = await (await fetch(
        `${s.url}/xrpc/com.atproto.sync.getLatestCommit?did=${alice.did}`,
      )).json();
      const auth = { authorization: `Bearer ${alice.accessJwt}` };
      const created = await xrpcPost(s.url, "com.atproto.repo.createRecord", {
        repo: alice.did,
        collection: COLLECTION_POST,
        record: { $type: COLLECTION_POST, text: "hello", createdAt: new Date().toISOString() },
      }, auth);
      const post = await created.json();
      assert.equal(created.status, 200);
      const moved = await xrpcPost(s.url, "com.atproto.identity.updateHandle", {
        handle: "alicia.test",
      }, auth);
      assert.equal(moved.status, 200);
      const off = await xrpcPost(s.url, "com.atproto.server.deactivateAccount", {}, auth);
      assert.equal(off.status, 200);
      await waitFor(() => events.length >= 6 || errors.length > 0, {
        message: `6 events (have ${events.map((e) => e.event)})`,
      });
      assert.deepEqual(errors, []);
      assert.deepEqual(events.map((e) => [e.event, e.seq]), [
        ["identity", 1],
        ["account", 2],
        // seq 3, the empty first commit, has no op to report
        ["sync", 4],
        ["create", 5],
        ["identity", 6],
        ["account", 7],
      ]);
      const [identity, account, sync, create, renamed, deactivated] = events;
      assert.ok(identity.event === "identity");
      assert.equal(identity.did, alice.did);
      assert.deepEqual(identity.didDocument?.alsoKnownAs, ["at://alice.test"]);
      assert.ok(account.event === "account");
      assert.deepEqual([account.did, account.active, account.status], [alice.did, true, undefined]);
      assert.ok(sync.event === "sync");
      // The #sync names the account's first commit: its CAR's root and its rev.
      assert.deepEqual([sync.did, sync.cid.toString(), sync.rev], [
        alice.did,
        first.cid,
        first.rev,
      ]);
      assert.ok(create.event === "create");
      assert.equal(create.uri.toString(), post.uri);
      assert.equal(create.cid.toString(), post.cid);
      assert.equal(create.commit.toString(), post.commit.cid);
      assert.ok(renamed.event === "identity");
      assert.deepEqual(renamed.didDocument?.alsoKnownAs, ["at://alicia.test"]);
      assert.ok(deactivated.event === "account");
      assert.deepEqual([deactivated.active, deactivated.status], [false, "deactivated"]);
    } finally {
      await firehose.destroy();
    }
  },
});
