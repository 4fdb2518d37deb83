// Crash and multi-process claims with real account-host processes (spec 6.1 rules 1-2; docs/behaviour.md
// 10.6 "Event stream"): SIGKILL during writes loses no acknowledged write, leaves one
// event per commit and no seq gap; a second process on the same KV file streams every commit.

import assert from "node:assert/strict";
import { verifyRepoCar } from "@atproto/repo";
import { type CID, formatCid } from "../../shared/cid.ts";
import { COLLECTION_POST } from "../../shared/nsid.ts";
import { makeTempDir, waitFor } from "../../runtime/_test_helpers.ts";
import {
  signUp,
  spawnPds,
  startTestServer,
  StreamClient,
  TEST_JWT_SECRET,
  writePosts,
  type Writer,
  type WrittenRecord,
  xrpcGet,
  xrpcPost,
} from "../_test_helpers.ts";
import { readHeadSeq } from "./event_log.ts";

async function readHeadOf(kvPath: string): Promise<number> {
  const kv = await Deno.openKv(kvPath);
  try {
    return await readHeadSeq(kv);
  } finally {
    kv.close();
  }
}

Deno.test("after SIGKILL during 10 concurrent writers, every acknowledged write is in getRepo with exactly one event, seqs have no gap and getLatestCommit is the last event's commit", async () => {
  await using dir = await makeTempDir("pds-crash-");
  const env = { DATA_DIR: dir.path, PDS_JWT_SECRET: TEST_JWT_SECRET };
  const first = await spawnPds(env);
  const writers: Writer[] = [];
  for (let i = 0; i < 10; i++) writers.push(await signUp(first.url, `crash-writer${i}.test`));

  // Ten writers write until the process dies; only 200 answers count as acknowledged.
  const acked = new Map<string, WrittenRecord>();
  let stop = false;
  const loops = writers.map(async (w, wi) => {
    for (let i = 0; !stop; i++) {
      let res: Response;
      try {
        res = await xrpcPost(first.url, "com.atproto.repo.createRecord", {
          repo: w.did,
          collection: COLLECTION_POST,
          record: { text: `crash ${wi}/${i}`, createdAt: new Date().toISOString() },
        }, { authorization: `Bearer ${w.accessJwt}` });
      } catch {
        return; // The process is gone.
      }
      let body;
      try {
        body = await res.json();
      } catch {
        return; // Died while answering.
      }
      assert.equal(res.status, 200, JSON.stringify(body));
      acked.set(body.uri, {
        uri: body.uri,
        cid: body.cid,
        text: `crash ${wi}/${i}`,
        commitCid: body.commit.cid,
        rev: body.commit.rev,
      });
    }
  });
  await waitFor(() => acked.size >= 300, { timeoutMs: 15_000, message: "300 acknowledged" });
  const status = await first.kill("SIGKILL");
  stop = true;
  await Promise.all(loops);
  assert.equal(status.signal, "SIGKILL");

  await using second = await spawnPds(env);
  const head = await readHeadOf(`${dir.path}/pds.kv`);
  const client = await StreamClient.connect(second.url, 0);
  await client.waitForSeq(head);
  await client.close();
  assert.deepEqual(client.decodeErrors, []);
  // Every seq once: the sign-ups' #identity, #account and #sync frames and the commits.
  assert.deepEqual(client.seqs, Array.from({ length: head }, (_, i) => i + 1));

  // Exactly one create event per acknowledged record; the last event of each repo is its head.
  const eventsPerUri = new Map<string, number>();
  const lastCommit = new Map<string, { cid: string; rev: string }>();
  for (const { header, body } of client.frames) {
    if (header.t !== "#commit") continue;
    for (const op of body.ops as { action: string; path: string }[]) {
      const uri = `at://${body.repo}/${op.path}`;
      eventsPerUri.set(uri, (eventsPerUri.get(uri) ?? 0) + 1);
    }
    lastCommit.set(body.repo as string, {
      cid: formatCid(body.commit as CID),
      rev: body.rev as string,
    });
  }
  for (const uri of acked.keys()) assert.equal(eventsPerUri.get(uri), 1, uri);

  for (const w of writers) {
    const repoRes = await xrpcGet(second.url, `com.atproto.sync.getRepo?did=${w.did}`);
    assert.equal(repoRes.status, 200);
    const verified = await verifyRepoCar(new Uint8Array(await repoRes.arrayBuffer()), w.did);
    const inRepo = new Map(
      verified.creates.map((c) => [`at://${w.did}/${c.collection}/${c.rkey}`, c.cid.toString()]),
    );
    for (const r of acked.values()) {
      if (r.uri.startsWith(`at://${w.did}/`)) assert.equal(inRepo.get(r.uri), r.cid, r.uri);
    }
    // Every record in the repo has its one event (an unacknowledged write may have landed too).
    for (const uri of inRepo.keys()) assert.equal(eventsPerUri.get(uri), 1, uri);
    const latestRes = await xrpcGet(second.url, `com.atproto.sync.getLatestCommit?did=${w.did}`);
    const latest: { cid: string; rev: string } = await latestRes.json();
    assert.deepEqual(lastCommit.get(w.did), latest);
    assert.equal(verified.commit.cid.toString(), latest.cid);
  }
});

Deno.test("two account-host processes on one KV file: a subscriber on A sees every commit written through A and B, once and in order", async () => {
  await using a = await startTestServer();
  await using b = await spawnPds({
    DATA_DIR: a.kvPath.replace(/\/pds\.kv$/, ""),
    PDS_KV_PATH: a.kvPath,
    PDS_JWT_SECRET: TEST_JWT_SECRET,
  });
  const onA = await signUp(a.url, "proc-a.test");
  const onB = await signUp(b.url, "proc-b.test");
  const start = await readHeadSeq(a.ctx.kv);
  const client = await StreamClient.connect(a.url);
  await waitFor(() => a.ctx.stream!.broadcaster.subscriberCount === 1);

  // Alternate B then A, one write at a time: A learns of its own commit at once but of B's
  // only through the poll, so it must hold its own back until B's earlier seq has been read.
  // (Concurrent writes from two processes on one local KV file can fail with "database is
  // locked"; that is the write path's concern, not the stream's.)
  const written = new Map<string, WrittenRecord>();
  for (let round = 0; round < 60; round++) {
    for (const [url, writer] of [[b.url, onB], [a.url, onA]] as const) {
      for (const [uri, r] of await writePosts(url, [writer], 1, { prefix: `round ${round}` })) {
        written.set(uri, r);
      }
    }
  }
  const head = await readHeadSeq(a.ctx.kv);
  assert.equal(head, start + 120);
  await client.waitForSeq(head);
  await client.close();
  assert.deepEqual(client.commitSeqs, Array.from({ length: 120 }, (_, i) => start + 1 + i));
  const uris = new Set<string>();
  for (const { body } of client.frames) {
    for (const op of body.ops as { path: string }[]) uris.add(`at://${body.repo}/${op.path}`);
  }
  assert.deepEqual([...uris].sort(), [...written.keys()].sort());
  assert.equal(uris.size, 120);
});

Deno.test("two account-host processes writing to one KV file at the same time both succeed, seq stays gapless", async () => {
  await using a = await startTestServer();
  await using b = await spawnPds({
    DATA_DIR: a.kvPath.replace(/\/pds\.kv$/, ""),
    PDS_KV_PATH: a.kvPath,
    PDS_JWT_SECRET: TEST_JWT_SECRET,
  });
  const writersA = [await signUp(a.url, "both-a1.test"), await signUp(a.url, "both-a2.test")];
  const writersB = [await signUp(b.url, "both-b1.test"), await signUp(b.url, "both-b2.test")];
  const start = await readHeadSeq(a.ctx.kv);
  const client = await StreamClient.connect(a.url, start);
  // Both processes write at once: the local KV file's lock is contended and must be waited for.
  const [fromA, fromB] = await Promise.all([
    writePosts(a.url, writersA, 100, { prefix: "via a" }),
    writePosts(b.url, writersB, 100, { prefix: "via b" }),
  ]).catch((err) => {
    // A failed write answers 500 with no detail: the hosts' logs (warnings, errors, and any
    // line that is not JSON, such as a panic) say what happened.
    const errors = (lines: readonly string[]) =>
      lines.filter((l) => /"level":"(error|warn)"/.test(l) || !l.startsWith("{"));
    throw new Error(
      `${(err as Error).message}\nhost A logged:\n${errors(a.lines).join("\n")}\n` +
        `host B logged:\n${errors(b.lines).join("\n")}`,
    );
  });
  assert.equal(fromA.size, 100);
  assert.equal(fromB.size, 100);
  const head = await readHeadSeq(a.ctx.kv);
  assert.equal(head, start + 200);
  await client.waitForSeq(head);
  await client.close();
  assert.deepEqual(client.commitSeqs, Array.from({ length: 200 }, (_, i) => start + 1 + i));
});
