// Event retention (PDS_EVENT_RETENTION_DAYS) and cursors older than the oldest kept event
// (spec 6.1 rule 5; docs/protocol.md 6.3).

import assert from "node:assert/strict";
import { makeTempDir, waitFor } from "../../runtime/_test_helpers.ts";
import { offsetClock, signUp, startTestServer, StreamClient } from "../_test_helpers.ts";
import { readHeadSeq, readOldestSeq } from "./event_log.ts";
import { deleteEventsBefore, pruneEvents } from "./retention.ts";
import { seqEventChunkKey } from "../store/keys.ts";
import { applyWrites } from "../repo/service.ts";
import type { PdsContext } from "../context.ts";
import { COLLECTION_POST } from "../../shared/nsid.ts";

const DAY_MS = 24 * 60 * 60 * 1000;

/** Writes `n` posts in-process (the clock moves past access-token lifetimes here). */
async function writePosts(ctx: PdsContext, did: string, n: number): Promise<void> {
  for (let i = 0; i < n; i++) {
    await applyWrites(ctx, did, [{
      action: "create",
      collection: COLLECTION_POST,
      record: { text: `post ${i}`, createdAt: new Date(ctx.now()).toISOString() },
    }]);
  }
}

Deno.test("events older than the retention window are pruned; an older cursor gets OutdatedCursor then the replay from the oldest kept event", async () => {
  const clock = offsetClock();
  await using s = await startTestServer({
    env: { PDS_EVENT_RETENTION_DAYS: "1" },
    now: clock.now,
  });
  const w = await signUp(s.url, "retained.test");
  // Seqs 1-4: the sign-up's #identity, #account, first commit and #sync.
  await writePosts(s.ctx, w.did, 4); // seqs 5-8
  clock.advance(2 * DAY_MS);
  await writePosts(s.ctx, w.did, 3); // seqs 9-11
  await s.ctx.stream!.retention.runOnce();
  assert.equal(await readOldestSeq(s.ctx.kv), 9);
  assert.equal(await readHeadSeq(s.ctx.kv), 11);
  assert.equal(await pruneEvents(s.ctx.kv, { retentionDays: 1, now: clock.now() }), 0);
  assert.ok(s.lines.some((l) => JSON.parse(l).msg === "pruned old stream events"));

  const outdated = await StreamClient.connect(s.url, 2);
  await outdated.waitForSeq(11);
  assert.deepEqual(outdated.frames[0].header, { op: 1, t: "#info" });
  assert.deepEqual(outdated.frames[0].body, {
    name: "OutdatedCursor",
    message: "Cursor 2 is older than the oldest kept event 9: replaying from there",
  });
  assert.deepEqual(outdated.commitSeqs, [9, 10, 11]);
  assert.equal(outdated.frames.length, 4);

  for (const cursor of [0, 8]) {
    const client = await StreamClient.connect(s.url, cursor);
    await client.waitForSeq(11);
    assert.deepEqual(client.frames.map((f) => f.header.t), ["#commit", "#commit", "#commit"]);
    assert.deepEqual(client.commitSeqs, [9, 10, 11]);
    await client.close();
  }
  await outdated.close();
});

Deno.test("when every event has aged out, the head stays, the next commit takes the next seq and an old cursor gets OutdatedCursor", async () => {
  const clock = offsetClock();
  await using s = await startTestServer({
    env: { PDS_EVENT_RETENTION_DAYS: "1" },
    now: clock.now,
  });
  const w = await signUp(s.url, "aged.test");
  await writePosts(s.ctx, w.did, 2); // seqs 5-6, after the sign-up's four events
  clock.advance(2 * DAY_MS);
  assert.equal(await pruneEvents(s.ctx.kv, { retentionDays: 1, now: clock.now() }), 6);
  assert.equal(await readOldestSeq(s.ctx.kv), null);
  assert.equal(await readHeadSeq(s.ctx.kv), 6);

  const client = await StreamClient.connect(s.url, 1);
  await waitFor(() => client.frames.length === 1);
  assert.equal(client.frames[0].body.name, "OutdatedCursor");
  await waitFor(() => s.ctx.stream!.broadcaster.subscriberCount === 1);
  await writePosts(s.ctx, w.did, 1);
  await client.waitForSeq(7);
  assert.deepEqual(client.commitSeqs, [7]);
  await client.close();
});

Deno.test("pruning deletes each multi-chunk event in one atomic operation, never split across two", async () => {
  await using dir = await makeTempDir();
  const kv = await Deno.openKv(`${dir.path}/kv.sqlite3`);
  try {
    // Events 1-4 of two chunks, event 5 of one, event 6 kept.
    for (let seq = 1; seq <= 6; seq++) {
      for (let c = 0; c < (seq === 5 ? 1 : 2); c++) {
        await kv.set(seqEventChunkKey(seq, c), new Uint8Array([seq, c]));
      }
    }
    const commits: string[][] = [];
    const recording = new Proxy(kv, {
      get(target, prop) {
        if (prop === "atomic") {
          return () => {
            const op = target.atomic();
            const keys: string[] = [];
            const spy = {
              delete(key: Deno.KvKey) {
                keys.push(`${String(key[1])}.${String(key[2])}`);
                op.delete(key);
                return spy;
              },
              commit() {
                commits.push(keys);
                return op.commit();
              },
            };
            return spy;
          };
        }
        const value = Reflect.get(target, prop, target);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
    assert.equal(await deleteEventsBefore(recording, 6, 3), 5);
    assert.deepEqual(commits, [["1.0", "1.1"], ["2.0", "2.1"], ["3.0", "3.1"], [
      "4.0",
      "4.1",
      "5.0",
    ]]);
    assert.equal(await readOldestSeq(kv), 6);
  } finally {
    kv.close();
  }
});

Deno.test("a stopped prune deletes no event, or whole events up to where it stopped", async () => {
  await using dir = await makeTempDir("pds-retention-stop-");
  const kv = await Deno.openKv(`${dir.path}/kv`);
  try {
    for (let seq = 1; seq <= 6; seq++) {
      await kv.set(seqEventChunkKey(seq, 0), new Uint8Array([seq]));
      await kv.set(seqEventChunkKey(seq, 1), new Uint8Array([seq]));
    }
    const stop = new AbortController();
    stop.abort();
    assert.equal(await deleteEventsBefore(kv, 6, 500, stop.signal), 0);
    assert.equal(await readOldestSeq(kv), 1);
    // A batch of 4 keys holds two events: stopped once the first batch is written.
    const stopping = new AbortController();
    const counting = {
      atomic: () => {
        const op = kv.atomic();
        const commit = op.commit.bind(op);
        op.commit = () => commit().finally(() => stopping.abort());
        return op;
      },
      list: kv.list.bind(kv),
    } as unknown as Deno.Kv;
    assert.equal(await deleteEventsBefore(counting, 6, 4, stopping.signal), 3);
    assert.equal(await readOldestSeq(kv), 4);
  } finally {
    kv.close();
  }
});
