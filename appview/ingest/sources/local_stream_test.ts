import assert from "node:assert/strict";
import { writeCar } from "../../../shared/car.ts";
import { encodeCbor } from "../../../shared/cbor.ts";
import { encodeBlock } from "../../../shared/cid.ts";
import { encodeFrame } from "../../../shared/frame.ts";
import { COLLECTION_POST } from "../../../shared/nsid.ts";
import { waitFor } from "../../../runtime/_test_helpers.ts";
import { CONSUMER_LOCAL, CURSOR_LOCAL_SEQ, CURSOR_PUBLIC_TIME_US } from "../../db/state.ts";
import type { IndexOp } from "../../../shared/ops.ts";
import { didOf, likeOp, postOp, uriOf } from "../../_fixtures.ts";
import {
  type BackendContext,
  captureLogRecords,
  endBackendTests,
  errorFrame,
  FAST_BACKOFF,
  forEachBackend,
  infoFrame,
  makeCommit,
  openBackendContext,
  openBackendIndex,
  openTestContext,
  startFakeRepoStream,
} from "../../_test_helpers.ts";
import { createLocalStreamConsumer, LocalStreamProtocol, parseLocalFrame } from "./local_stream.ts";
import { backoffDelay } from "./stream_socket.ts";

const ALICE = didOf("alice");
const BOB = didOf("bob");

function postCommit(seq: number, did = ALICE) {
  return makeCommit(seq, [postOp(did, `3kaaaaaaaa${String(seq).padStart(3, "a")}`, `post ${seq}`)]);
}

async function postCount(ctx: BackendContext): Promise<number> {
  return (await ctx.rows<{ n: number }>("SELECT count(*) AS n FROM posts"))[0].n;
}

// Tests of what the consumer writes (rows, its cursor, its status row) run on both backends;
// tests of the protocol alone (frames, URLs, headers, reconnecting) on one.

forEachBackend(
  "local consumer applies #commit frames and stores seq in its own cursor row (spec 6.2 rules 2-3)",
  async (backend) => {
    await using stream = startFakeRepoStream();
    await using ctx = await openBackendContext(backend);
    for (let seq = 1; seq <= 3; seq++) stream.append(seq, postCommit(seq).frame());
    await using consumer = createLocalStreamConsumer(ctx, { url: stream.url, ...FAST_BACKOFF });
    consumer.start();
    await waitFor(() => consumer.status().cursor === 3);
    assert.equal(await postCount(ctx), 3);
    assert.equal(await ctx.store.state.readCursor(CURSOR_LOCAL_SEQ), 3);
    assert.equal(await ctx.store.state.readCursor(CURSOR_PUBLIC_TIME_US), null);
    assert.deepEqual(stream.cursors, ["0"]);
    const row = await ctx.store.state.readConsumerStatus(CONSUMER_LOCAL);
    assert.equal(row?.state, "live");
  },
);

forEachBackend(
  "local consumer resumes after the stored cursor when the connection drops",
  async (backend) => {
    await using stream = startFakeRepoStream();
    await using ctx = await openBackendContext(backend);
    stream.append(1, postCommit(1).frame());
    stream.append(2, postCommit(2).frame());
    await using consumer = createLocalStreamConsumer(ctx, { url: stream.url, ...FAST_BACKOFF });
    consumer.start();
    await waitFor(() => consumer.status().cursor === 2);
    stream.dropClients();
    await waitFor(() => stream.cursors.length === 2 && consumer.status().state === "live");
    assert.deepEqual(stream.cursors, ["0", "2"]);
    stream.append(3, postCommit(3).frame());
    await waitFor(() => consumer.status().cursor === 3);
    assert.equal(await postCount(ctx), 3);
  },
);

forEachBackend(
  "local consumer restarted on the same database resumes from the persisted seq",
  async (backend) => {
    await using stream = startFakeRepoStream({ ignoreCursor: true });
    await using ctx = await openBackendContext(backend);
    for (let seq = 1; seq <= 4; seq++) stream.append(seq, postCommit(seq).frame());
    const first = createLocalStreamConsumer(ctx, { url: stream.url, ...FAST_BACKOFF });
    first.start();
    await waitFor(() => first.status().cursor === 4);
    await first.close();
    const applied = ctx.store.writer.stats().applied;
    const { log, lines } = captureLogRecords();
    // The fake replays everything from seq 1 (ignoring the cursor): all four are duplicates.
    await using second = createLocalStreamConsumer({ ...ctx, log }, {
      url: stream.url,
      ...FAST_BACKOFF,
    });
    second.start();
    await waitFor(() => lines.filter((l) => l.msg === "Duplicate frame dropped").length === 4);
    assert.equal(stream.cursors[1], "4");
    stream.append(5, postCommit(5).frame());
    await waitFor(() => second.status().cursor === 5);
    assert.equal(ctx.store.writer.stats().applied, applied + 1);
    assert.equal(await postCount(ctx), 5);
  },
);

forEachBackend(
  "local consumer accepts CID links in binary and string form (spec 6.2 rule 3)",
  async (backend) => {
    await using stream = startFakeRepoStream();
    await using ctx = await openBackendContext(backend);
    stream.append(1, postCommit(1).frame({ cidForm: "instance" }));
    stream.append(2, postCommit(2).frame({ cidForm: "string" }));
    await using consumer = createLocalStreamConsumer(ctx, { url: stream.url, ...FAST_BACKOFF });
    consumer.start();
    await waitFor(() => consumer.status().cursor === 2);
    assert.equal(await postCount(ctx), 2);
  },
);

/** Frames a hostile or broken account host could send. */
function hostileFrames(): { name: string; data: Uint8Array | string }[] {
  const good = postCommit(90).frame();
  const random = crypto.getRandomValues(new Uint8Array(512));
  // A record block whose bytes do not hash to the CID the CAR and the op name.
  const record = encodeBlock({
    $type: COLLECTION_POST,
    text: "real",
    createdAt: "2024-05-01T12:00:00.000Z",
  });
  const forged = {
    cid: record.cid,
    bytes: encodeCbor({
      $type: COLLECTION_POST,
      text: "forged",
      createdAt: "2024-05-01T12:00:00.000Z",
    }),
  };
  const badCar = encodeFrame({ op: 1, t: "#commit" }, {
    seq: 91,
    repo: ALICE,
    ops: [{ action: "create", path: `${COLLECTION_POST}/3kbbbbbbbbbb2`, cid: record.cid }],
    blocks: writeCar([record.cid], [forged]),
  });
  // A CAR whose first section declares about 2^62 bytes.
  const hugeVarint = new Uint8Array([
    ...writeCar([record.cid], []),
    0xff,
    0xff,
    0xff,
    0xff,
    0xff,
    0xff,
    0xff,
    0xff,
    0x3f,
  ]);
  const hugeCar = encodeFrame({ op: 1, t: "#commit" }, {
    seq: 92,
    repo: ALICE,
    ops: [{ action: "create", path: `${COLLECTION_POST}/3kbbbbbbbbbc2`, cid: record.cid }],
    blocks: hugeVarint,
  });
  // A CBOR byte string declaring 2^40 bytes right after the header.
  const head = encodeCbor({ t: "#commit", op: 1 });
  const hugeCbor = new Uint8Array([
    ...head,
    0xa1,
    0x61,
    0x78,
    0x5b,
    0,
    0,
    1,
    0,
    0,
    0,
    0,
    0,
    1,
    2,
    3,
  ]);
  return [
    { name: "random bytes", data: random },
    { name: "empty frame", data: new Uint8Array(0) },
    { name: "truncated CBOR", data: good.slice(0, good.length - 7) },
    { name: "header only", data: head },
    { name: "trailing bytes", data: new Uint8Array([...good, 0x01]) },
    { name: "CAR block not matching its CID", data: badCar },
    { name: "huge CAR varint", data: hugeCar },
    { name: "huge CBOR length", data: hugeCbor },
    { name: "text frame", data: '{"op":1}' },
    { name: "commit without seq", data: encodeFrame({ op: 1, t: "#commit" }, { repo: ALICE }) },
    {
      name: "commit with bad repo",
      data: encodeFrame({ op: 1, t: "#commit" }, {
        seq: 93,
        repo: "nope",
        ops: [],
        blocks: new Uint8Array(),
      }),
    },
  ];
}

forEachBackend(
  "local consumer skips hostile frames with a log line, keeps its connection and applies later commits",
  async (backend) => {
    await using stream = startFakeRepoStream();
    const { log, lines } = captureLogRecords();
    await using ctx = await openBackendContext(backend, { log });
    await using consumer = createLocalStreamConsumer(ctx, { url: stream.url, ...FAST_BACKOFF });
    consumer.start();
    await stream.waitForClients(1);
    const hostile = hostileFrames();
    for (const { data } of hostile) stream.sendRaw(data);
    stream.append(100, postCommit(100).frame());
    await waitFor(() => consumer.status().cursor === 100);
    const skipped = lines.filter((l) => l.level === "warn" && /skipped/.test(String(l.msg)));
    assert.equal(skipped.length, hostile.length, JSON.stringify(skipped.map((l) => l.msg)));
    assert.deepEqual(stream.cursors, ["0"]);
    assert.equal(consumer.status().state, "live");
    assert.equal(await postCount(ctx), 1);
    assert.deepEqual(
      await ctx.rows(
        "SELECT count(*) AS n FROM posts WHERE uri = ?",
        uriOf(ALICE, COLLECTION_POST, "3kbbbbbbbbbb2"),
      ),
      [{ n: 0 }],
    );
    assert.ok(consumer.status().lastError !== null);
  },
);

forEachBackend("local consumer rejects a frame over its size bound", async (backend) => {
  await using stream = startFakeRepoStream();
  const { log, lines } = captureLogRecords();
  await using ctx = await openBackendContext(backend, { log });
  await using consumer = createLocalStreamConsumer(ctx, {
    url: stream.url,
    maxFrameBytes: 64 * 1024,
    ...FAST_BACKOFF,
  });
  consumer.start();
  await stream.waitForClients(1);
  stream.sendRaw(makeCommit(1, [postOp(ALICE, "3kzzzzzzzzzz2", "x".repeat(150))]).frame());
  stream.sendRaw(new Uint8Array(65 * 1024));
  stream.append(2, postCommit(2).frame());
  await waitFor(() => consumer.status().cursor === 2);
  const tooBig = lines.filter((l) =>
    l.msg === "Frame skipped: it cannot be decoded" &&
    /over the 65536 byte limit/.test(String((l.error as { message: string }).message))
  );
  assert.equal(tooBig.length, 1);
  assert.equal(await postCount(ctx), 2);
});

// The stream's own messages and reconnecting, before the index is reached: one backend.
Deno.test("local consumer logs #info OutdatedCursor and keeps consuming (spec 6.1 rule 5)", async () => {
  await using stream = startFakeRepoStream();
  const { log, lines } = captureLogRecords();
  using ctx = openTestContext({ log });
  await using consumer = createLocalStreamConsumer(ctx, { url: stream.url, ...FAST_BACKOFF });
  consumer.start();
  await stream.waitForClients(1);
  stream.sendRaw(
    infoFrame("OutdatedCursor", "Requested cursor exceeded limit. Possibly missing events"),
  );
  stream.append(1, postCommit(1).frame());
  await waitFor(() => consumer.status().cursor === 1);
  assert.equal(
    lines.filter((l) =>
      l.level === "warn" && /older than the stream's retention/.test(String(l.msg))
    )
      .length,
    1,
  );
  assert.deepEqual(stream.cursors, ["0"]);
});

// The stream's own messages and reconnecting, before the index is reached: one backend.
Deno.test("local consumer drops the connection on an error frame and reconnects with backoff", async () => {
  await using stream = startFakeRepoStream();
  using ctx = openTestContext();
  stream.append(1, postCommit(1).frame());
  await using consumer = createLocalStreamConsumer(ctx, { url: stream.url, ...FAST_BACKOFF });
  consumer.start();
  await waitFor(() => consumer.status().cursor === 1);
  stream.sendRaw(errorFrame("ConsumerTooSlow", "Stream consumer too slow"));
  await waitFor(() => stream.cursors.length === 2);
  assert.equal(stream.cursors[1], "1");
  assert.equal(
    consumer.status().lastError,
    "Stream error ConsumerTooSlow: Stream consumer too slow",
  );
  stream.append(2, postCommit(2).frame());
  await waitFor(() => consumer.status().cursor === 2);
});

forEachBackend(
  "local consumer applies frames that queue up together in fewer transactions",
  async (backend) => {
    await using stream = startFakeRepoStream();
    await using ctx = await openBackendContext(backend);
    const frames = Array.from({ length: 300 }, (_, i) => postCommit(i + 1, i % 2 ? BOB : ALICE));
    for (const c of frames) stream.append(c.seq, c.frame());
    const before = ctx.store.writer.stats().batches;
    await using consumer = createLocalStreamConsumer(ctx, { url: stream.url, ...FAST_BACKOFF });
    consumer.start();
    await waitFor(() => consumer.status().cursor === 300);
    assert.equal(await postCount(ctx), 300);
    const batches = ctx.store.writer.stats().batches - before;
    assert.ok(batches < 300, `expected batching, got ${batches} transactions for 300 frames`);
  },
);

forEachBackend(
  "local consumer reports backoff with the error while the account host is unreachable",
  async (backend) => {
    const stream = startFakeRepoStream();
    const url = stream.url;
    await stream.close();
    await using ctx = await openBackendContext(backend);
    const state = async () => (await ctx.store.state.readConsumerStatus(CONSUMER_LOCAL))?.state;
    await using consumer = createLocalStreamConsumer(ctx, { url, ...FAST_BACKOFF });
    consumer.start();
    await waitFor(async () => await state() === "backoff");
    assert.ok(consumer.status().lastError !== null);
    await consumer.close();
    assert.equal(await state(), "disabled");
  },
);

forEachBackend("a like and its post in one commit are applied together", async (backend) => {
  await using stream = startFakeRepoStream();
  await using ctx = await openBackendContext(backend);
  const post = postOp(ALICE, "3kaaaaaaaaaa2", "hello");
  const postUri = uriOf(ALICE, COLLECTION_POST, "3kaaaaaaaaaa2");
  stream.append(1, makeCommit(1, [post]).frame());
  stream.append(2, makeCommit(2, [likeOp(BOB, "3kaaaaaaaaab2", postUri)]).frame());
  await using consumer = createLocalStreamConsumer(ctx, { url: stream.url, ...FAST_BACKOFF });
  consumer.start();
  await waitFor(() => consumer.status().cursor === 2);
  assert.deepEqual(await ctx.rows("SELECT like_count FROM posts WHERE uri = ?", postUri), [
    { like_count: 1 },
  ]);
});

Deno.test("LocalStreamProtocol puts the cursor in the query string", () => {
  const p = new LocalStreamProtocol("ws://h:1/xrpc/com.atproto.sync.subscribeRepos");
  assert.equal(p.connectUrl(null), "ws://h:1/xrpc/com.atproto.sync.subscribeRepos?cursor=0");
  assert.equal(p.connectUrl(42), "ws://h:1/xrpc/com.atproto.sync.subscribeRepos?cursor=42");
});

Deno.test("backoffDelay grows exponentially with jitter and is capped", () => {
  const opts = { initialMs: 100, maxMs: 1000 };
  assert.equal(backoffDelay(0, opts, () => 0), 50);
  assert.equal(backoffDelay(0, opts, () => 1), 100);
  assert.equal(backoffDelay(2, opts, () => 0), 200);
  assert.equal(backoffDelay(2, opts, () => 1), 400);
  assert.equal(backoffDelay(10, opts, () => 0), 500);
  assert.equal(backoffDelay(10, opts, () => 1), 1000);
  assert.equal(backoffDelay(1000, opts, () => 0.5), 750);
});

Deno.test("LocalStreamProtocol gives each commit its rev for ordering and skips a commit without a valid rev", () => {
  const p = new LocalStreamProtocol("ws://h:1/xrpc/com.atproto.sync.subscribeRepos");
  const failures: string[] = [];
  const control = {
    log: captureLogRecords().log,
    fail: (reason: string) => failures.push(reason),
    disconnect: (reason: string) => failures.push(reason),
  };
  const commit = postCommit(1);
  const decoded = p.decode(commit.frame().slice().buffer, null, control);
  assert.deepEqual(decoded?.commit, {
    did: ALICE,
    rev: commit.rev,
    since: "3jzfcijpj2z2a",
    mode: "newer",
  });
  assert.equal(decoded?.ops.length, 1);
  const car = writeCar([encodeBlock({ x: 1 }).cid], [encodeBlock({ x: 1 })]);
  const noRev = encodeFrame({ op: 1, t: "#commit" }, {
    seq: 2,
    repo: ALICE,
    since: null,
    blocks: car,
    ops: [],
  });
  assert.deepEqual(p.decode(noRev.slice().buffer, 1, control), { ops: [], cursor: 2 });
  assert.deepEqual(failures, ["Event 2 skipped: Invalid rev: undefined"]);
});

forEachBackend(
  "the parse step validates records: accepted ones are marked checked, a refused one is skipped by the writer",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    const p = new LocalStreamProtocol("ws://h:1/xrpc/com.atproto.sync.subscribeRepos");
    const control = { log: captureLogRecords().log, fail: () => {}, disconnect: () => {} };
    const good = postOp(ALICE, "3kaaaaaaaagood", "fine");
    const bad = postOp(ALICE, "3kaaaaaaaabad2", "x".repeat(161));
    const like = likeOp(BOB, "3kaaaaaaalike1", uriOf(ALICE, COLLECTION_POST, "3kaaaaaaaagood"));
    const decoded = p.decode(makeCommit(1, [good, bad]).frame().slice().buffer, null, control);
    const decodedLike = p.decode(makeCommit(2, [like]).frame().slice().buffer, 1, control);
    const checked = (ops: readonly IndexOp[] | undefined) =>
      ops?.map((op) => op.kind === "record" ? [op.rkey, op.checked ?? false] : op.kind);
    assert.deepEqual(checked(decoded?.ops), [
      ["3kaaaaaaaagood", true],
      ["3kaaaaaaaabad2", false],
    ]);
    assert.deepEqual(checked(decodedLike?.ops), [["3kaaaaaaalike1", true]]);
    assert.deepEqual(await ix.apply(...decoded!.ops, ...decodedLike!.ops), {
      applied: 2,
      skipped: 1,
    });
    assert.deepEqual(await ix.rows("SELECT rkey, like_count FROM posts"), [{
      rkey: "3kaaaaaaaagood",
      like_count: 1,
    }]);
    assert.equal(ix.writer.stats().skippedByReason.invalid_record, 1);
  },
);

// The stream's handshake (its Authorization header), not the index: one backend.
Deno.test("local consumer presents the ingest secret to the account host, which keeps it a reserved connection slot", async () => {
  await using stream = startFakeRepoStream();
  stream.append(1, postCommit(1).frame());
  using ctx = openTestContext({ env: { APPVIEW_INGEST_SECRET: "stream-secret-0123456789" } });
  await using consumer = createLocalStreamConsumer(ctx, { url: stream.url, ...FAST_BACKOFF });
  consumer.start();
  await waitFor(() => consumer.status().cursor === 1);
  assert.deepEqual(stream.authorizations, ["Bearer stream-secret-0123456789"]);
});

// The stream's handshake (its Authorization header), not the index: one backend.
Deno.test("local consumer sends no Authorization header when no ingest secret is configured", async () => {
  await using stream = startFakeRepoStream();
  stream.append(1, postCommit(1).frame());
  using ctx = openTestContext();
  await using consumer = createLocalStreamConsumer(ctx, { url: stream.url, ...FAST_BACKOFF });
  consumer.start();
  await waitFor(() => consumer.status().cursor === 1);
  assert.deepEqual(stream.authorizations, [null]);
});

Deno.test("an #identity frame of the account host becomes an authoritative handle op (spec 6.2 rule 6)", () => {
  const frame = encodeFrame({ op: 1, t: "#identity" }, {
    seq: 7,
    did: ALICE,
    time: "2026-01-02T03:04:05.000Z",
    handle: "Alicia.Test",
  });
  assert.deepEqual(parseLocalFrame(frame.slice().buffer, 1024), {
    t: "event",
    seq: 7,
    ops: [{ kind: "handle", did: ALICE, handle: "alicia.test", authoritative: true }],
  });
});

Deno.test("an #account frame of the account host becomes an account status op (spec 6.2 rule 7)", () => {
  const frame = (body: Record<string, unknown>) =>
    encodeFrame({ op: 1, t: "#account" }, {
      seq: 8,
      did: ALICE,
      time: "2026-01-02T03:04:05.000Z",
      ...body,
    }).slice().buffer;
  assert.deepEqual(parseLocalFrame(frame({ active: false, status: "takendown" }), 1024), {
    t: "event",
    seq: 8,
    ops: [{ kind: "account_status", did: ALICE, active: false, status: "takendown" }],
  });
  assert.deepEqual(parseLocalFrame(frame({ active: true }), 1024), {
    t: "event",
    seq: 8,
    ops: [
      { kind: "account", did: ALICE },
      { kind: "account_status", did: ALICE, active: true, status: null },
    ],
  });
  assert.equal(parseLocalFrame(frame({ active: "no" }), 1024).t, "unconvertible");
});

forEachBackend(
  "FutureCursor moves the cursor back to the account host's head, says so once, resumes from there and tells the hooks",
  async (backend) => {
    await using stream = startFakeRepoStream();
    const { log, lines } = captureLogRecords();
    await using ctx = await openBackendContext(backend, { log });
    for (let seq = 1; seq <= 3; seq++) stream.append(seq, postCommit(seq).frame());
    const restores: unknown[] = [];
    const hooks = {
      restored: (r: unknown) => void restores.push(r),
      sync: () => Promise.resolve(),
    };
    await using consumer = createLocalStreamConsumer(ctx, {
      url: stream.url,
      hooks,
      ...FAST_BACKOFF,
    });
    consumer.start();
    await waitFor(() => consumer.status().cursor === 3);
    stream.sendRaw(errorFrame("FutureCursor", "Cursor 3 is beyond the latest seq 1"));
    await waitFor(() => stream.cursors.length === 2);
    assert.deepEqual(stream.cursors, ["0", "1"]); // resumed from the head (this fake replays 2-3)
    assert.deepEqual(restores, [{ cursor: 3, head: 1 }]);
    assert.equal(consumer.status().lastError, "Account host restored: cursor 3 beyond its head 1");
    const said = lines.filter((l) => String(l.msg).startsWith("Account host is behind"));
    assert.equal(said.length, 1);
    assert.equal(lines.filter((l) => l.msg === "Stream sent an error frame").length, 0);
    // A host that names no head: the stream replays what it retains, from 0.
    await waitFor(() => consumer.status().cursor === 3);
    stream.sendRaw(errorFrame("FutureCursor", "Cursor in the future."));
    await waitFor(() => stream.cursors.length === 3);
    assert.equal(stream.cursors[2], "0");
    assert.deepEqual(restores[1], { cursor: 3, head: null });
  },
);

Deno.test("a #sync frame asks the hooks for a backfill of its repository; a malformed one is passed over", () => {
  const synced: string[][] = [];
  const hooks = {
    restored: () => {},
    sync: (did: string, rev: string) => {
      synced.push([did, rev]);
      return Promise.resolve();
    },
  };
  const p = new LocalStreamProtocol("ws://h:1/xrpc/com.atproto.sync.subscribeRepos", { hooks });
  const failures: string[] = [];
  const control = {
    log: captureLogRecords().log,
    fail: (reason: string) => failures.push(reason),
    disconnect: (reason: string) => failures.push(reason),
  };
  const commit = encodeBlock({ did: ALICE, version: 3, rev: "3kaaaaaaaaaa2" });
  const sync = (body: Record<string, unknown>) =>
    encodeFrame({ op: 1, t: "#sync" }, {
      seq: 5,
      blocks: writeCar([commit.cid], [commit]),
      time: "2024-06-01T00:00:00.000Z",
      ...body,
    }).slice().buffer;
  assert.deepEqual(p.decode(sync({ did: ALICE, rev: "3kaaaaaaaaaa2" }), 4, control), {
    ops: [],
    cursor: 5,
  });
  assert.deepEqual(synced, [[ALICE, "3kaaaaaaaaaa2"]]);
  assert.deepEqual(p.decode(sync({ did: ALICE, rev: "not a tid" }), 4, control), {
    ops: [],
    cursor: 5,
  });
  assert.deepEqual(p.decode(sync({ did: "alice", rev: "3kaaaaaaaaaa2" }), 4, control), {
    ops: [],
    cursor: 5,
  });
  assert.equal(synced.length, 1);
  assert.deepEqual(failures, [
    "Event 5 skipped: Invalid rev: not a tid",
    "Event 5 skipped: Invalid did: alice",
  ]);
});

endBackendTests();
