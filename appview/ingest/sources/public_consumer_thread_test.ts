import assert from "node:assert/strict";
import { sqliteOf, startFakeJetstream } from "../../_test_helpers.ts";
import { makeTempDir, waitFor } from "../../../runtime/_test_helpers.ts";
import { loadAppviewConfig } from "../../config.ts";
import type { JetstreamOptions } from "./jetstream.ts";
import { CONSUMER_PUBLIC, readConsumerStatus } from "../../db/state.ts";
import { startAppview } from "../../server.ts";
import { didOf, postOp } from "../../_fixtures.ts";
import { captureLogRecords, FAST_BACKOFF, makeCommit } from "../../_test_helpers.ts";
import { ThreadedPublicConsumer } from "./public_consumer_thread.ts";

const BOB = didOf("bob");

async function startIndex(
  dataDir: string,
  jetstreamUrl: string,
  publicStream: JetstreamOptions = FAST_BACKOFF,
) {
  const { log, lines } = captureLogRecords();
  const config = loadAppviewConfig({
    DATA_DIR: dataDir,
    APPVIEW_PORT: "0",
    PDS_INTERNAL_URL: "http://127.0.0.1:1",
    APPVIEW_JETSTREAM_URL: jetstreamUrl,
    APPVIEW_INGEST_SECRET: "push-secret",
  });
  const appview = await startAppview({
    config,
    log,
    components: { http: true, localConsumer: false, publicConsumer: true, handleSync: false },
    publicStream,
  });
  return { appview, lines };
}

Deno.test("beside the HTTP API the public consumer runs in a worker thread, logs through the index's logger and indexes what it receives (issue 36)", async () => {
  await using dir = await makeTempDir();
  await using js = startFakeJetstream();
  const { appview, lines } = await startIndex(`${dir.path}/data`, js.url);
  try {
    assert.ok(appview.publicConsumer instanceof ThreadedPublicConsumer);
    await js.waitForClients(1);
    const cursor = 1_725_911_162_329_308;
    js.send(makeCommit(1, [postOp(BOB, "3kaaaaaaaaab2", "from the thread")]).jetstream(cursor)[0]);
    await waitFor(() => appview.publicConsumer?.status().cursor === cursor);
    assert.equal(appview.publicConsumer.status().state, "live");
    // Written by the worker's connection, read by the main thread's.
    const row = sqliteOf(appview.ctx).prepare("SELECT text FROM posts WHERE did = ?").get(BOB);
    assert.deepEqual({ ...row }, { text: "from the thread" });
    assert.equal(readConsumerStatus(sqliteOf(appview.ctx), CONSUMER_PUBLIC)?.state, "live");
    // The worker's lines carry the same component names as on the main thread.
    const connected = lines.filter((l) =>
      l.component === "test.consumer.public" && l.msg === "Stream connected"
    );
    assert.equal(connected.length, 1);
  } finally {
    await appview.close();
  }
  assert.equal(appview.publicConsumer?.status().state, "disabled");
});

Deno.test("a public consumer thread that fails is logged and its status row says why (issue 36)", async () => {
  await using dir = await makeTempDir();
  await using js = startFakeJetstream();
  // An option the worker's consumer refuses: it throws there, not in startAppview.
  const { appview, lines } = await startIndex(`${dir.path}/data`, js.url, {
    ...FAST_BACKOFF,
    maxBatchOps: 0,
  });
  try {
    const consumer = appview.publicConsumer;
    assert.ok(consumer instanceof ThreadedPublicConsumer);
    await waitFor(() => consumer.failed);
    const failed = lines.filter((l) =>
      l.msg === "Public consumer thread failed; /healthz will report it stale"
    );
    assert.equal(failed.length, 1);
    assert.equal(failed[0].error, "maxBatchOps must be a positive integer, got 0");
    const row = readConsumerStatus(sqliteOf(appview.ctx), CONSUMER_PUBLIC);
    assert.equal(row?.lastError, "thread failed: maxBatchOps must be a positive integer, got 0");
  } finally {
    await appview.close();
  }
});
