// The local-stream consumer parses frames in a worker thread (parse_worker.ts): the same frames
// give the same tables and cursor as decoding on the main thread, hostile frames included (spec
// 6.2), and a worker that fails loses nothing: the consumer resumes from its stored cursor and
// decodes inline.

import assert from "node:assert/strict";
import { COLLECTION_POST } from "../../../shared/nsid.ts";
import { makeTempDir, waitFor } from "../../../runtime/_test_helpers.ts";
import {
  captureLogRecords,
  dumpTables,
  FAST_BACKOFF,
  infoFrame,
  makeCommit,
  openTestContext,
  startFakeRepoStream,
} from "../../_test_helpers.ts";
import { didOf, likeOp, postOp, uriOf } from "../../_fixtures.ts";
import { LocalStreamProtocol, MAX_LOCAL_FRAME_BYTES, parseLocalFrame } from "./local_stream.ts";
import { encodeParsed, OffThreadParser } from "./parse_worker.ts";
import { StreamConsumer } from "./stream_consumer.ts";
import type { StreamProtocol } from "./stream_protocol.ts";

const ALICE = didOf("alice");
const BOB = didOf("bob");
const NOW = () => new Date("2026-11-21T12:00:00.000Z");

/** 200 commits (posts and likes of them) with hostile frames between them. */
function frames(): Uint8Array[] {
  const out: Uint8Array[] = [];
  let seq = 0;
  for (let i = 0; i < 100; i++) {
    const rkey = `3kaaaaaa${String(i).padStart(4, "a")}`;
    out.push(makeCommit(++seq, [postOp(ALICE, rkey, `post ${i}`)]).frame());
    const subject = uriOf(ALICE, COLLECTION_POST, rkey);
    out.push(
      makeCommit(++seq, [likeOp(BOB, `3kbbbbbb${String(i).padStart(4, "a")}`, subject)]).frame(),
    );
    if (i % 25 === 0) {
      out.push(new Uint8Array([0xff, 0x00, 0x13])); // not CBOR
      out.push(makeCommit(seq + 1, [postOp(BOB, "3kcccccccccc2", "cut")]).frame().subarray(0, 60)); // truncated
      out.push(infoFrame("OutdatedCursor", "old"));
    }
  }
  return out;
}

/** The local-stream protocol with its parse worker module replaced by `workerUrl`. */
function localStreamWithWorker(url: string, workerUrl: string): StreamProtocol {
  const local = new LocalStreamProtocol(url);
  return {
    consumer: local.consumer,
    cursorName: local.cursorName,
    connectUrl: (cursor) => local.connectUrl(cursor),
    decode: (data, cursor, control) => local.decode(data, cursor, control),
    parser: { ...local.parser, workerUrl: new URL(workerUrl) },
  };
}

async function consume(parseInWorker: boolean): Promise<{ dump: unknown; cursor: number | null }> {
  await using stream = startFakeRepoStream();
  using ctx = openTestContext({ now: NOW });
  await using consumer = new StreamConsumer(ctx, new LocalStreamProtocol(stream.url), {
    ...FAST_BACKOFF,
    parseInWorker,
  });
  consumer.start();
  await stream.waitForClients(1);
  // Frames sent before the worker reports ready are decoded inline; send them after.
  await waitFor(() => consumer.parsesInWorker === parseInWorker, { message: "worker ready" });
  for (const f of frames()) stream.sendRaw(f);
  await waitFor(() => consumer.status().cursor === 200, { message: "cursor 200" });
  assert.equal(consumer.parsesInWorker, parseInWorker);
  return {
    dump: dumpTables(ctx.db, { exclude: ["schema_migrations"] }),
    cursor: consumer.status().cursor,
  };
}

Deno.test("frames parsed in the worker give the same tables and cursor as frames decoded inline, hostile frames included", async () => {
  const inWorker = await consume(true);
  const inline = await consume(false);
  assert.equal(inWorker.cursor, 200);
  assert.deepEqual(inWorker.dump, inline.dump);
});

Deno.test("a parse worker that fails loses nothing: the consumer resumes from its cursor and decodes inline", async () => {
  await using dir = await makeTempDir();
  const failing = `${dir.path}/failing_worker.ts`;
  await Deno.writeTextFile(
    failing,
    "const scope = self as unknown as { onmessage: unknown; postMessage(m: unknown): void };\n" +
      'scope.onmessage = () => { throw new Error("boom"); };\n' +
      "scope.postMessage({ ready: true });\n",
  );
  await using stream = startFakeRepoStream();
  const { log, lines } = captureLogRecords();
  using ctx = openTestContext({ log, now: NOW });
  const protocol = localStreamWithWorker(stream.url, `file://${failing}`);
  await using consumer = new StreamConsumer(ctx, protocol, FAST_BACKOFF);
  consumer.start();
  await stream.waitForClients(1);
  await waitFor(() => consumer.parsesInWorker, { message: "worker ready" });
  // Live frames go to the worker, which throws; the replay after the reconnect is inline.
  for (let seq = 1; seq <= 50; seq++) {
    const rkey = `3kaaaaaa${String(seq).padStart(4, "a")}`;
    stream.append(seq, makeCommit(seq, [postOp(ALICE, rkey, `post ${seq}`)]).frame());
  }
  await waitFor(() => consumer.status().cursor === 50, { message: "cursor 50" });
  assert.equal(consumer.parsesInWorker, false);
  const posts = ctx.db.prepare("SELECT count(*) AS n FROM posts").get() as { n: number };
  assert.equal(posts.n, 50);
  const failures = lines.filter((l) =>
    l.msg === "Parse worker failed; decoding on the main thread from now on"
  );
  assert.equal(failures.length, 1);
  assert.match(String(failures[0].reason), /boom/);
  // The failed batch was not applied from the worker: the stream was read again from cursor 0.
  assert.ok(stream.cursors.length >= 2, `connections: ${stream.cursors.join(",")}`);
});

Deno.test("OffThreadParser delivers batches in push order and drops what was pushed before reset", async () => {
  const delivered: unknown[] = [];
  const parser = new OffThreadParser({
    parser: new LocalStreamProtocol("ws://127.0.0.1:1/x").parser,
    deliver: (parsed) => delivered.push(...parsed),
    onFailure: () => assert.fail("worker failed"),
    log: captureLogRecords().log,
  });
  try {
    assert.equal(parser.start(), true);
    for (let i = 0; i < 1_200; i++) parser.push(`text ${i}`);
    parser.reset(); // none of these 1,200 is delivered, even those already sent
    for (let i = 0; i < 700; i++) parser.push("x".repeat(i));
    await parser.settle(5_000);
    assert.deepEqual(
      delivered,
      Array.from({ length: 700 }, (_, i) => ({ t: "text", length: i })),
    );
  } finally {
    parser.close();
  }
});

Deno.test("a parse worker whose module cannot load costs no reconnect: the consumer decodes inline from the start", async () => {
  await using dir = await makeTempDir();
  await using stream = startFakeRepoStream();
  for (let seq = 1; seq <= 20; seq++) {
    const rkey = `3kaaaaaa${String(seq).padStart(4, "a")}`;
    stream.append(seq, makeCommit(seq, [postOp(ALICE, rkey, `post ${seq}`)]).frame());
  }
  const { log, lines } = captureLogRecords();
  using ctx = openTestContext({ log, now: NOW });
  const protocol = localStreamWithWorker(stream.url, `file://${dir.path}/missing_worker.ts`);
  await using consumer = new StreamConsumer(ctx, protocol, FAST_BACKOFF);
  consumer.start();
  await waitFor(() => consumer.status().cursor === 20, { message: "cursor 20" });
  await waitFor(() =>
    lines.some((l) => l.msg === "Cannot start the parse worker; decoding on the main thread")
  );
  assert.equal(consumer.parsesInWorker, false);
  assert.deepEqual(stream.cursors, ["0"]); // one connection: nothing was lost, nothing replayed
  assert.equal(
    lines.filter((l) => l.msg === "Parse worker failed; decoding on the main thread from now on")
      .length,
    0,
  );
});

Deno.test("encodeParsed sends decoded events as JSON text that reads back equal, anything else as objects", () => {
  const parse = (f: Uint8Array) => parseLocalFrame(f.slice().buffer, MAX_LOCAL_FRAME_BYTES);
  const all = frames().map(parse);
  const events = all.filter((p) => p.t === "event");
  assert.equal(events.length, 200);
  const text = encodeParsed(events);
  assert.equal(typeof text, "string");
  assert.deepEqual(JSON.parse(text as string), events);
  // A batch with a frame the worker only describes (here #info and undecodable ones) goes as is.
  assert.equal(all.length, 212);
  assert.equal(encodeParsed(all), all);
  // As does one JSON cannot encode.
  const big = [{ t: "event", seq: 1, ops: [{ kind: "record", record: { n: 2n ** 64n } }] }];
  assert.equal(encodeParsed(big), big);
});
