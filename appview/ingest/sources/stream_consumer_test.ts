/**
 * The shared stream consumer's draining and flow control (spec 6.2; issue 6: every part runs
 * inside the index process too, so a backlog must not hold the HTTP API for its whole length):
 * one transaction per event-loop turn, and a connection closed while too much waits to be
 * applied, then resumed from the cursor with nothing lost or applied twice.
 */

import assert from "node:assert/strict";
import { waitFor } from "../../../runtime/_test_helpers.ts";
import { CONSUMER_LOCAL, CURSOR_LOCAL_SEQ } from "../../db/state.ts";
import { didOf, postOp } from "../../_fixtures.ts";
import {
  type BackendContext,
  captureLogRecords,
  endBackendTests,
  errorFrame,
  FAST_BACKOFF,
  forEachBackend,
  makeCommit,
  openBackendContext,
  openTestContext,
  startFakeRepoStream,
} from "../../_test_helpers.ts";
import { createLocalStreamConsumer } from "./local_stream.ts";
import type { IndexWriterApi } from "../../db/store.ts";

const ALICE = didOf("alice");
const BOB = didOf("bob");
const FRAMES = 300;

function postCommit(seq: number) {
  const did = seq % 2 ? BOB : ALICE;
  return makeCommit(seq, [postOp(did, `3kaaaaaaa${String(seq).padStart(4, "a")}`, `post ${seq}`)]);
}

async function count(ctx: BackendContext, sql: string): Promise<number> {
  return (await ctx.rows<{ n: number }>(sql))[0].n;
}

// Tests of what the consumer writes (every post once, its cursor, its status row) run on both
// backends; tests of options and of a connection that never opens, on one.

/**
 * Wraps `writer.applyOps` to record, for each call, whether a macrotask scheduled by the
 * previous call ran before it (a `setTimeout(0)` queued inside the previous call).
 */
function watchTurns(writer: IndexWriterApi): { calls: number; yieldedBefore: boolean[] } {
  const seen = { calls: 0, yieldedBefore: [] as boolean[] };
  let ticked = true;
  const apply = writer.applyOps.bind(writer);
  writer.applyOps = (ops, opts) => {
    seen.yieldedBefore.push(ticked);
    seen.calls++;
    ticked = false;
    setTimeout(() => ticked = true, 0);
    return apply(ops, opts);
  };
  return seen;
}

forEachBackend(
  "a queued backlog is applied one transaction per event-loop turn (maxBatchOps)",
  async (backend) => {
    await using stream = startFakeRepoStream();
    await using ctx = await openBackendContext(backend);
    for (let seq = 1; seq <= FRAMES; seq++) stream.append(seq, postCommit(seq).frame());
    const turns = watchTurns(ctx.store.writer);
    await using consumer = createLocalStreamConsumer(ctx, {
      url: stream.url,
      ...FAST_BACKOFF,
      maxBatchOps: 10,
      yieldBetweenBatches: true,
    });
    consumer.start();
    await waitFor(() => consumer.status().cursor === FRAMES);
    assert.equal(await count(ctx, "SELECT count(*) AS n FROM posts"), FRAMES);
    assert.equal(await ctx.store.state.readCursor(CURSOR_LOCAL_SEQ), FRAMES);
    // At most 10 ops per transaction: at least 30 of them, and never two in one turn.
    assert.ok(turns.calls >= FRAMES / 10, `${turns.calls} transactions for ${FRAMES} ops`);
    assert.deepEqual(
      turns.yieldedBefore.flatMap((yielded, i) => yielded ? [] : [i]),
      [],
      "transactions that ran in the same event-loop turn as the one before",
    );
    assert.deepEqual(stream.cursors, ["0"]);
  },
);

forEachBackend(
  "too many waiting messages close the stream until they are applied; it resumes from the cursor",
  async (backend) => {
    await using stream = startFakeRepoStream();
    const { log, lines } = captureLogRecords();
    await using ctx = await openBackendContext(backend, { log });
    for (let seq = 1; seq <= FRAMES; seq++) stream.append(seq, postCommit(seq).frame());
    await using consumer = createLocalStreamConsumer(ctx, {
      url: stream.url,
      ...FAST_BACKOFF,
      maxBatchOps: 20,
      yieldBetweenBatches: true,
      maxQueuedMessages: 50,
    });
    consumer.start();
    await waitFor(() => consumer.status().cursor === FRAMES);
    // Every post once: nothing skipped at a pause, nothing applied twice after a resume.
    assert.equal(await count(ctx, "SELECT count(*) AS n FROM posts"), FRAMES);
    assert.equal(await count(ctx, "SELECT count(DISTINCT uri) AS n FROM posts"), FRAMES);
    assert.deepEqual(
      (await ctx.rows("SELECT did, post_count FROM profiles ORDER BY did"))
        .map((r) => [r.did, r.post_count]),
      [[ALICE, FRAMES / 2], [BOB, FRAMES / 2]].sort(),
      "post counters count each post once",
    );
    assert.equal(await ctx.store.state.readCursor(CURSOR_LOCAL_SEQ), FRAMES);
    // Paused at least once; each reconnect asks for what follows the last applied seq.
    const cursors = stream.cursors.map(Number);
    assert.ok(cursors.length >= 2, `connections: ${JSON.stringify(stream.cursors)}`);
    assert.equal(cursors[0], 0);
    for (let i = 1; i < cursors.length; i++) {
      assert.ok(cursors[i] > cursors[i - 1] && cursors[i] < FRAMES, `cursors ${cursors}`);
    }
    const pauses = lines.filter((l) =>
      l.msg === "Pausing the stream until the index applies what it received"
    );
    const resumes = lines.filter((l) => l.msg === "Resuming the stream");
    assert.equal(pauses.length, cursors.length - 1);
    assert.deepEqual(resumes.map((l) => l.cursor), cursors.slice(1));
    // A pause is not a failure: no backoff, no error for /healthz.
    assert.equal(lines.filter((l) => l.msg === "Reconnecting after backoff").length, 0);
    assert.equal(consumer.status().lastError, null);
    await waitFor(async () =>
      (await ctx.store.state.readConsumerStatus(CONSUMER_LOCAL))?.state === "live"
    );
  },
);

forEachBackend(
  "waiting messages above maxQueuedBytes close the stream though their count is under maxQueuedMessages",
  async (backend) => {
    await using stream = startFakeRepoStream();
    const { log, lines } = captureLogRecords();
    await using ctx = await openBackendContext(backend, { log });
    let frameBytes = 0;
    let smallestFrameBytes = Infinity;
    for (let seq = 1; seq <= FRAMES; seq++) {
      const frame = postCommit(seq).frame();
      frameBytes = Math.max(frameBytes, frame.byteLength);
      smallestFrameBytes = Math.min(smallestFrameBytes, frame.byteLength);
      stream.append(seq, frame);
    }
    const maxQueuedBytes = 40 * frameBytes;
    await using consumer = createLocalStreamConsumer(ctx, {
      url: stream.url,
      ...FAST_BACKOFF,
      maxBatchOps: 20,
      yieldBetweenBatches: true,
      maxQueuedMessages: 10 * FRAMES,
      maxQueuedBytes,
    });
    consumer.start();
    await waitFor(() => consumer.status().cursor === FRAMES);
    assert.equal(await count(ctx, "SELECT count(*) AS n FROM posts"), FRAMES);
    assert.equal(await count(ctx, "SELECT count(DISTINCT uri) AS n FROM posts"), FRAMES);
    const pauses = lines.filter((l) =>
      l.msg === "Pausing the stream until the index applies what it received"
    );
    assert.ok(pauses.length >= 1, "paused at least once");
    assert.equal(stream.cursors.length, pauses.length + 1);
    for (const pause of pauses) {
      // Closed at the first message past the byte bound.
      assert.ok(
        Number(pause.waitingBytes) > maxQueuedBytes &&
          Number(pause.waitingBytes) <= maxQueuedBytes + frameBytes,
        `waitingBytes ${pause.waitingBytes} against a bound of ${maxQueuedBytes}`,
      );
      const most = Math.floor(maxQueuedBytes / smallestFrameBytes) + 1;
      assert.ok(Number(pause.waiting) <= most, `waiting ${pause.waiting}, at most ${most}`);
    }
    assert.equal(lines.filter((l) => l.msg === "Reconnecting after backoff").length, 0);
    assert.equal(consumer.status().lastError, null);
  },
);

// Options, checked before the index is reached: one backend.
Deno.test("consumer options reject a batch or queue bound that is not a positive integer", () => {
  using ctx = openTestContext();
  assert.throws(
    () => createLocalStreamConsumer(ctx, { url: "ws://127.0.0.1:1/", maxBatchOps: 0 }),
    { name: "RangeError", message: "maxBatchOps must be a positive integer, got 0" },
  );
  assert.throws(
    () => createLocalStreamConsumer(ctx, { url: "ws://127.0.0.1:1/", maxQueuedMessages: 2.5 }),
    { name: "RangeError", message: "maxQueuedMessages must be a positive integer, got 2.5" },
  );
  assert.throws(
    () => createLocalStreamConsumer(ctx, { url: "ws://127.0.0.1:1/", maxQueuedBytes: -1 }),
    { name: "RangeError", message: "maxQueuedBytes must be a positive integer, got -1" },
  );
  assert.throws(
    () => createLocalStreamConsumer(ctx, { url: "ws://127.0.0.1:1/", idleTimeoutMs: 0 }),
    { name: "RangeError", message: "idleTimeoutMs must be a positive integer, got 0" },
  );
});

forEachBackend(
  "a silent connection is made again from the cursor after the idle timeout; a busy one is kept",
  async (backend) => {
    await using stream = startFakeRepoStream();
    const { log, lines } = captureLogRecords();
    await using ctx = await openBackendContext(backend, { log });
    stream.append(1, postCommit(1).frame());
    await using consumer = createLocalStreamConsumer(ctx, {
      url: stream.url,
      ...FAST_BACKOFF,
      idleTimeoutMs: 150,
    });
    consumer.start();
    await waitFor(() => consumer.status().cursor === 1, { message: "cursor 1" });
    // Frames every 30 ms keep the connection.
    for (let seq = 2; seq <= 11; seq++) {
      stream.append(seq, postCommit(seq).frame());
      await new Promise((r) => setTimeout(r, 30));
    }
    await waitFor(() => consumer.status().cursor === 11, { message: "cursor 11" });
    assert.deepEqual(stream.cursors, ["0"]);
    // Then silence: the consumer closes and reconnects from its cursor, and keeps applying.
    await waitFor(() => stream.cursors.length === 2, { message: "reconnected", timeoutMs: 3_000 });
    assert.deepEqual(stream.cursors, ["0", "11"]);
    await stream.waitForClients(1);
    stream.append(12, postCommit(12).frame());
    await waitFor(() => consumer.status().cursor === 12, { message: "cursor 12" });
    assert.equal(await count(ctx, "SELECT count(*) AS n FROM posts"), 12);
    const silent = lines.filter((l) =>
      l.msg === "Stream silent; reconnecting from the stored cursor"
    );
    assert.ok(silent.length >= 1);
    assert.deepEqual([silent[0].opened, silent[0].cursor], [true, 11]);
    assert.ok((silent[0].silentMs as number) >= 150);
  },
);

// A connection that never opens writes nothing: one backend.
Deno.test("a server that accepts the connection and never answers the upgrade is left after the idle timeout", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const held: Deno.Conn[] = [];
  const accepting = (async () => {
    for await (const conn of listener) held.push(conn); // read nothing, answer nothing
  })();
  using ctx = openTestContext();
  const consumer = createLocalStreamConsumer(ctx, {
    url: `ws://127.0.0.1:${listener.addr.port}/xrpc/com.atproto.sync.subscribeRepos`,
    ...FAST_BACKOFF,
    idleTimeoutMs: 100,
  });
  try {
    consumer.start();
    await waitFor(() => held.length >= 3, {
      message: "three connection attempts",
      timeoutMs: 5_000,
    });
    assert.notEqual(consumer.status().state, "live");
  } finally {
    await consumer.close();
    listener.close();
    for (const conn of held) {
      try {
        conn.close();
      } catch { /* closed by the client */ }
    }
    await accepting.catch(() => {});
  }
  assert.equal(consumer.status().state, "disabled");
});

/**
 * A `subscribeRepos` server speaking WebSocket by hand over TCP: on each connection it sends the
 * stored frames after the client's cursor (on the first one, then `thenOnFirst`). On its first
 * connection it never answers the client's
 * close frame (as a hung or broken server would; Deno's client then never reports the socket
 * closed); later connections answer it and hang up.
 */
function startDeafRepoStream(frames: Uint8Array[], opts: { thenOnFirst?: Uint8Array } = {}) {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const conns = new Set<Deno.Conn>();
  const cursors: string[] = [];
  const serving = (async () => {
    for await (const conn of listener) {
      conns.add(conn);
      const first = cursors.length === 0;
      const sent = first && opts.thenOnFirst ? [...frames, opts.thenOnFirst] : frames;
      void serveDeaf(conn, sent, cursors, first).catch(() => {}).finally(() => conns.delete(conn));
    }
  })();
  return {
    url: `ws://127.0.0.1:${listener.addr.port}/xrpc/com.atproto.sync.subscribeRepos`,
    cursors,
    async close() {
      listener.close();
      for (const c of conns) {
        try {
          c.close();
        } catch { /* closed */ }
      }
      await serving.catch(() => {});
    },
  };
}

async function serveDeaf(
  conn: Deno.Conn,
  frames: Uint8Array[],
  cursors: string[],
  deaf: boolean,
) {
  const buf = new Uint8Array(64 * 1024);
  let head = "";
  while (!head.includes("\r\n\r\n")) {
    const n = await conn.read(buf);
    if (n === null) return;
    head += new TextDecoder().decode(buf.subarray(0, n));
  }
  const cursor = new URL(head.split(" ")[1], "http://x").searchParams.get("cursor") ?? "0";
  cursors.push(cursor);
  const key = /sec-websocket-key:\s*(\S+)/i.exec(head)![1];
  const digest = await crypto.subtle.digest(
    "SHA-1",
    new TextEncoder().encode(key + "258EAFA5-E914-47DA-95CA-C5AB0DC11B85"),
  );
  const accept = btoa(String.fromCharCode(...new Uint8Array(digest)));
  await writeAll(
    conn,
    new TextEncoder().encode(
      "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
        `Sec-WebSocket-Accept: ${accept}\r\n\r\n`,
    ),
  );
  for (const frame of frames.slice(Number(cursor))) {
    // An unmasked binary frame (server to client), length in 7 or 16 bits.
    const header = frame.length < 126
      ? [0x82, frame.length]
      : [0x82, 126, frame.length >> 8, frame.length & 0xff];
    await writeAll(conn, new Uint8Array([...header, ...frame]));
  }
  for (;;) {
    const n = await conn.read(buf);
    if (n === null) return;
    // The client only ever sends its close frame (opcode 8).
    if (!deaf && (buf[0] & 0x0f) === 8) {
      await writeAll(conn, new Uint8Array([0x88, 0]));
      conn.close();
      return;
    }
  }
}

async function writeAll(conn: Deno.Conn, bytes: Uint8Array) {
  for (let pos = 0; pos < bytes.length;) pos += await conn.write(bytes.subarray(pos));
}

forEachBackend(
  "a paused stream whose server never answers the close is abandoned, then resumed",
  async (backend) => {
    const frames = Array.from({ length: FRAMES }, (_, i) => postCommit(i + 1).frame());
    assert.ok(frames.every((f) => f.length < 0x10000));
    const stream = startDeafRepoStream(frames);
    const { log, lines } = captureLogRecords();
    await using ctx = await openBackendContext(backend, { log });
    const consumer = createLocalStreamConsumer(ctx, {
      url: stream.url,
      ...FAST_BACKOFF,
      yieldBetweenBatches: true,
      maxQueuedMessages: 20,
    });
    try {
      consumer.start();
      await waitFor(() => consumer.status().cursor === FRAMES, { timeoutMs: 10_000 });
      assert.equal(await count(ctx, "SELECT count(*) AS n FROM posts"), FRAMES);
      const abandoned = lines.filter((l) =>
        l.msg === "Stream did not close in time; abandoning the connection"
      );
      assert.equal(abandoned.length, 1);
      // Resumed after the abandoned connection; later pauses close normally.
      const cursors = stream.cursors.map(Number);
      assert.equal(cursors[0], 0);
      assert.ok(cursors.length >= 2 && cursors[1] > 20, `connections ${stream.cursors}`);
      assert.ok(cursors.every((c, i) => i === 0 || c > cursors[i - 1]), `cursors ${cursors}`);
    } finally {
      await stream.close();
      await consumer.close();
    }
  },
  // The abandoned client socket ends only when the test closes the server side.
  { sanitizeResources: false, sanitizeOps: false },
);

forEachBackend(
  "a connection dropped after an error frame is abandoned when the server never answers the close",
  async (backend) => {
    const frames = Array.from({ length: 10 }, (_, i) => postCommit(i + 1).frame());
    const stream = startDeafRepoStream(frames, { thenOnFirst: errorFrame("ConsumerTooSlow") });
    const { log, lines } = captureLogRecords();
    await using ctx = await openBackendContext(backend, { log });
    const consumer = createLocalStreamConsumer(ctx, { url: stream.url, ...FAST_BACKOFF });
    try {
      consumer.start();
      await waitFor(() => stream.cursors.length === 2, { timeoutMs: 10_000 });
      assert.deepEqual(stream.cursors, ["0", "10"]);
      assert.equal(await count(ctx, "SELECT count(*) AS n FROM posts"), 10);
      assert.equal(consumer.status().lastError, "Stream error ConsumerTooSlow:");
      assert.equal(
        lines.filter((l) => l.msg === "Stream did not close in time; abandoning the connection")
          .length,
        1,
      );
      const closed = lines.filter((l) => l.msg === "Stream connection closed");
      assert.equal(closed.length, 1);
      assert.equal(closed[0].abandoned, true);
    } finally {
      await stream.close();
      await consumer.close();
    }
  },
  { sanitizeResources: false, sanitizeOps: false },
);

endBackendTests();
