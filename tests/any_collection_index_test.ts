// Records of other applications (issue 38 item 4; docs/behaviour.md 4.1 rule 14, 6.2): the
// account host stores a com.example.thing record and streams and pushes its commit like any
// other; the index indexes only app.social.*: no row for it, no warning, and a skip counted as
// an unsupported collection, never as a malformed record. Also through Jetstream. The index on
// SQLite and on PostgreSQL (issue 40).

import assert from "node:assert/strict";
import { endBackendTests, FAST_BACKOFF, forEachBackend } from "../appview/_test_helpers.ts";
import { createJetstreamConsumer } from "../appview/ingest/sources/jetstream.ts";
import { encodeBlock, formatCid } from "../shared/cid.ts";
import { fromLexJson } from "../shared/lex_json.ts";
import { COLLECTION_POST } from "../shared/nsid.ts";
import { encodeTid } from "../shared/tid.ts";
import { freshIndexEnv, openIndexContext, startSystem } from "./_system.ts";
import { startFakeJetstream, waitFor } from "./_util.ts";

const THING = "com.example.thing";

/** Log lines at warn or error level. */
function problems(lines: readonly string[]): string[] {
  return lines.filter((l) => /"level":"(warn|error)"/.test(l));
}

for (const push of [true, false]) {
  forEachBackend(
    `the index ignores a com.example.thing record (local stream${push ? " and push" : " alone"})`,
    async (backend) => {
      await using s = await startSystem({ push, handleSync: false, backend });
      const startup = s.lines.length; // the startup warnings of relaxed settings come before
      const client = s.client();
      await client.createAccount({
        handle: "alice.test",
        password: "correct horse battery",
      });
      const blob = await client.uploadBlob(new Uint8Array(64).fill(1), "application/octet-stream");
      const thing = await client.createRecord(THING, { note: "another app", file: blob });
      const post = await client.post({ text: "after the thing" });
      const seq = await s.pds.ctx.sequencer.headSeq();
      await waitFor(() => s.appview.localConsumer?.status().cursor === seq);
      assert.equal((await client.getPost(post.uri)).post?.uri, post.uri);

      const dump = JSON.stringify(await s.dump({ exclude: ["ingest_skips"] }));
      assert.equal(dump.includes(THING), false, "no index row names the record");
      assert.equal(dump.includes(thing.cid), false);
      const skips = await s.rows("SELECT reason, collection, count, last_uri FROM ingest_skips");
      // Counted apart from malformed input, once: the later of push and stream is passed over.
      assert.deepEqual(skips, [{
        reason: "unsupported_collection",
        collection: "*",
        count: 1,
        last_uri: thing.uri,
      }]);
      assert.deepEqual(problems(s.lines.slice(startup)), []);
    },
  );
}

forEachBackend("the index ignores a com.example.thing record from Jetstream", async (backend) => {
  await using js = startFakeJetstream();
  await using ctx = await openIndexContext(await freshIndexEnv(backend, ":memory:"));
  const consumer = createJetstreamConsumer(ctx, { url: js.url, ...FAST_BACKOFF });
  assert.ok(consumer !== null);
  consumer.start();
  await using _ = consumer;
  await js.waitForClients(1);
  const did = "did:plc:alice234567abcdefghijklm";
  const event = (timeUs: number, collection: string, record: Record<string, unknown>) => ({
    did,
    time_us: timeUs,
    kind: "commit",
    commit: {
      rev: encodeTid(timeUs, 1),
      operation: "create",
      collection,
      rkey: encodeTid(timeUs, 2),
      record,
      cid: formatCid(encodeBlock(fromLexJson(record)).cid),
    },
  });
  const t0 = 1_714_564_800_000_000;
  js.send(event(t0, THING, { $type: THING, note: "x" }));
  js.send(event(t0 + 1, COLLECTION_POST, {
    $type: COLLECTION_POST,
    text: "hi",
    createdAt: "2024-05-01T12:00:00.000Z",
  }));
  await waitFor(() => consumer.status().cursor === t0 + 1);
  assert.deepEqual(await ctx.rows("SELECT count(*) AS n FROM posts"), [{ n: 1 }]);
  const dump = JSON.stringify(await ctx.dump({ exclude: ["ingest_skips"] }));
  assert.equal(dump.includes(THING), false);
  const skips = await ctx.rows("SELECT reason, collection, count FROM ingest_skips");
  assert.deepEqual(skips, [{
    reason: "unsupported_collection",
    collection: "*",
    count: 1,
  }]);
});

endBackendTests();
