// What one subscribeRepos subscriber may cost the account host (issue 36, item 1): the bytes it
// holds are bounded (the socket's unsent bytes plus its queue), a subscriber whose socket accepts
// nothing is closed after the stall time, a slow reader is still served every event (spec 6.1
// rule 5) and replayed frames are built once and shared. Clients are raw TCP WebSocket clients,
// so not reading really fills the socket.

import assert from "node:assert/strict";
import { decodeFrame } from "../../shared/frame.ts";
import { waitFor } from "../../runtime/_test_helpers.ts";
import {
  RawWsClient,
  signUp,
  startTestServer,
  StreamClient,
  writeLargePosts,
} from "../_test_helpers.ts";
import { readHeadSeq } from "./event_log.ts";

const KIB = 1024;

Deno.test("a subscriber whose socket accepts nothing is closed after the stall time, holding no more than its byte bound", async () => {
  await using s = await startTestServer();
  const hub = s.ctx.stream!.hub;
  const limits = { maxBufferedBytes: 64 * KIB, maxQueuedBytes: 64 * KIB, stallTimeoutMs: 500 };
  hub.setLimits(limits);
  const w = await signUp(s.url, "stalled.test");
  // ~7.6 MB of frames: more than the kernel takes for a reader that reads nothing (the send
  // buffer grows up to tcp_wmem's maximum, 4 MiB by default; with 200 posts, ~3.8 MB, it all fit
  // on a machine whose loopback buffers had grown, and nothing ever stalled).
  await writeLargePosts(s.url, w, 400);
  const client = await RawWsClient.connect(s.url, 0);
  try {
    const opened = performance.now();
    await waitFor(() => hub.connectionCount === 1);
    await waitFor(() => hub.connectionCount === 0, {
      timeoutMs: 10_000,
      message: "the stalled subscriber is closed",
    });
    assert.ok(performance.now() - opened >= limits.stallTimeoutMs, "not before the stall time");
    assert.ok(hub.peakHeldBytes > 0);
    assert.ok(
      hub.peakHeldBytes <= limits.maxBufferedBytes + limits.maxQueuedBytes,
      `held ${hub.peakHeldBytes} bytes`,
    );
    assert.equal(
      s.lines.filter((l) => l.includes("subscriber's socket accepted nothing")).length,
      1,
    );
  } finally {
    client.close();
  }
});

Deno.test("a slow reader of large events is not closed and gets every seq once, in order, replay then live (spec 6.1 rule 5)", async () => {
  await using s = await startTestServer();
  const hub = s.ctx.stream!.hub;
  hub.setLimits({ maxBufferedBytes: 64 * KIB, maxQueuedBytes: 64 * KIB, stallTimeoutMs: 500 });
  const w = await signUp(s.url, "slowreader.test");
  await writeLargePosts(s.url, w, 120);
  const client = await RawWsClient.connect(s.url, 0);
  try {
    const seqs: number[] = [];
    let writing: Promise<void> | null = null;
    let head = Infinity;
    for (let i = 0; i < 400 && seqs.at(-1) !== head; i++) {
      const bytes = await client.readMessage();
      assert.ok(bytes, `connection stays open (closed: ${client.closeCode} ${client.closeReason})`);
      const { header, body } = decodeFrame(bytes);
      // The sign-up's #identity, #account and #sync, then only commits.
      assert.equal(
        header.t,
        body.seq === 1
          ? "#identity"
          : body.seq === 2
          ? "#account"
          : body.seq === 4
          ? "#sync"
          : "#commit",
      );
      seqs.push(body.seq as number);
      if (seqs.length === 20) {
        // Commits while the reader is still in the stored replay.
        writing = writeLargePosts(s.url, w, 40).then(async () => {
          head = await readHeadSeq(s.ctx.kv);
        });
      }
      await new Promise((r) => setTimeout(r, 5));
    }
    await writing;
    assert.equal(head, await readHeadSeq(s.ctx.kv));
    assert.deepEqual(seqs, Array.from({ length: head }, (_, i) => i + 1));
    assert.equal(hub.connectionCount, 1);
  } finally {
    client.close();
  }
  await waitFor(() => hub.connectionCount === 0);
});

Deno.test("replayed frames are built once and the same bytes go to every subscriber at that position", async () => {
  await using s = await startTestServer();
  const w = await signUp(s.url, "shared.test");
  await writeLargePosts(s.url, w, 40);
  const head = await readHeadSeq(s.ctx.kv);
  const hub = s.ctx.stream!.hub;
  const builtBefore = hub.replayFramesBuilt;
  const clients = await Promise.all([0, 0, 0].map((c) => StreamClient.connect(s.url, c)));
  await Promise.all(clients.map((c) => c.waitForSeq(head)));
  assert.equal(hub.replayFramesBuilt - builtBefore, head);
  for (const c of clients) {
    assert.deepEqual(c.seqs, Array.from({ length: head }, (_, i) => i + 1));
    assert.deepEqual(c.raw, clients[0].raw);
  }
  await Promise.all(clients.map((c) => c.close()));
});
