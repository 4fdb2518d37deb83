// The public-stream consumer parses Jetstream messages in a worker thread
// (jetstream_parse_worker.ts): the same messages give the same tables, cursor and log lines as
// decoding on the consumer's own thread, malformed ones included.

import assert from "node:assert/strict";
import { COLLECTION_POST } from "../../../shared/nsid.ts";
import { startFakeJetstream } from "../../_test_helpers.ts";
import { waitFor } from "../../../runtime/_test_helpers.ts";
import {
  captureLogRecords,
  dumpTables,
  FAST_BACKOFF,
  makeCommit,
  openTestContext,
} from "../../_test_helpers.ts";
import { didOf, likeOp, postOp, uriOf } from "../../_fixtures.ts";
import {
  acceptJetstreamEvent,
  type JetstreamParsed,
  JetstreamProtocol,
  parseJetstreamEvent,
} from "./jetstream.ts";
import { encodeParsed } from "./parse_worker.ts";
import { StreamConsumer } from "./stream_consumer.ts";

const ALICE = didOf("alice");
const BOB = didOf("bob");
const NOW = () => new Date("2026-11-21T12:00:00.000Z");
const FIRST_US = 1_725_911_162_329_308;

/** 200 events (posts and likes of them) with malformed messages between them; the last time. */
function messages(): { texts: string[]; last: number } {
  const out: string[] = [];
  let time = FIRST_US;
  for (let i = 0; i < 100; i++) {
    const rkey = `3kaaaaaa${String(i).padStart(4, "a")}`;
    const subject = uriOf(ALICE, COLLECTION_POST, rkey);
    for (
      const e of [
        ...makeCommit(2 * i + 1, [postOp(ALICE, rkey, `post ${i}`)]).jetstream(time += 10),
        ...makeCommit(2 * i + 2, [likeOp(BOB, `3kbbbbbb${String(i).padStart(4, "a")}`, subject)])
          .jetstream(time += 10),
      ]
    ) out.push(JSON.stringify(e));
    if (i % 25 === 0) {
      out.push("{not json");
      out.push(JSON.stringify({ kind: "commit", did: ALICE, time_us: -1 }));
      // A valid time but a record that cannot be converted: skipped, the cursor moves.
      out.push(JSON.stringify({
        kind: "commit",
        did: ALICE,
        time_us: time += 10,
        commit: { operation: "create", collection: COLLECTION_POST, rkey: "bad key!", rev: "x" },
      }));
    }
  }
  return { texts: out, last: time };
}

Deno.test("a parsed Jetstream message, through the worker's JSON text or as objects, decodes as decoding it inline does, log lines included", () => {
  const { texts } = messages();
  for (const text of [...texts, new ArrayBuffer(3), "x".repeat(2 * 1024 * 1024 + 1)]) {
    const inline = captureLogRecords();
    const fails: string[] = [];
    const protocol = new JetstreamProtocol("ws://127.0.0.1:1/subscribe");
    const direct = protocol.decode(text, 5, {
      log: inline.log,
      fail: (r) => fails.push(r),
      disconnect() {},
    });
    // What the worker posts, read back the way the consumer's thread gets it.
    const posted = encodeParsed([parseJetstreamEvent(text)]);
    const parsed = (typeof posted === "string"
      ? JSON.parse(posted)
      : structuredClone(posted)) as JetstreamParsed[];
    const viaWorker = captureLogRecords();
    const workerFails: string[] = [];
    const accepted = acceptJetstreamEvent(parsed[0], 5, {
      log: viaWorker.log,
      fail: (r) =>
        workerFails.push(r),
      disconnect() {},
    });
    assert.deepEqual(accepted, direct);
    assert.deepEqual(workerFails, fails);
    const strip = (lines: Record<string, unknown>[]) => lines.map(({ time: _, ...l }) => l);
    assert.deepEqual(strip(viaWorker.lines), strip(inline.lines));
  }
});

async function consume(
  parseInWorker: boolean,
): Promise<{ dump: unknown; cursor: number | null; lastError: string | null }> {
  await using js = startFakeJetstream();
  using ctx = openTestContext({ now: NOW });
  await using consumer = new StreamConsumer(ctx, new JetstreamProtocol(js.url), {
    ...FAST_BACKOFF,
    parseInWorker,
  });
  consumer.start();
  await js.waitForClients(1);
  await waitFor(() => consumer.parsesInWorker === parseInWorker, { message: "worker ready" });
  const { texts, last } = messages();
  for (const text of texts) js.send(text);
  await waitFor(() => consumer.status().cursor === last, { message: `cursor ${last}` });
  assert.equal(consumer.parsesInWorker, parseInWorker);
  return {
    // The status row is written at most once a second: compared through status() instead.
    dump: dumpTables(ctx.db, { exclude: ["schema_migrations", "consumer_status"] }),
    cursor: consumer.status().cursor,
    lastError: consumer.status().lastError,
  };
}

Deno.test("Jetstream messages parsed in the worker give the same tables and cursor as messages decoded inline", async () => {
  const inWorker = await consume(true);
  const inline = await consume(false);
  assert.deepEqual(inWorker, inline);
  assert.equal(inWorker.cursor, messages().last);
});
