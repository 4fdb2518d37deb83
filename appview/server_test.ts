import assert from "node:assert/strict";
import { DatabaseSync } from "node:sqlite";
import { COLLECTION_POST } from "../shared/nsid.ts";
import { sqliteOf, startFakeJetstream } from "./_test_helpers.ts";
import { makeTempDir, waitFor } from "../runtime/_test_helpers.ts";
import { ConfigError, loadAppviewConfig } from "./config.ts";
import { openIndexDb } from "./db/open.ts";
import { CONSUMER_LOCAL, CONSUMER_PUBLIC, readConsumerStatus } from "./db/state.ts";
import { didOf, postOp, uriOf } from "./_fixtures.ts";
import {
  captureLogRecords,
  FAST_BACKOFF,
  makeCommit,
  startFakeRepoStream,
} from "./_test_helpers.ts";
import { startAppview } from "./server.ts";
import { WAL_AUTOCHECKPOINT_PAGES } from "./db/open.ts";
import { WARN_CORS_UNSET, WARN_INGEST_SECRET_UNSET } from "./startup_warnings.ts";

const ALICE = didOf("alice");
const BOB = didOf("bob");
const SECRET = "push-secret";

/** The account host base URL of a fake subscribeRepos stream URL. */
function accountHostUrl(streamUrl: string): string {
  return streamUrl.replace(/^ws/, "http").replace(/\/xrpc\/.*$/, "");
}

Deno.test("startAppview serves HTTP and runs both consumers and handle sync on one database", async () => {
  await using dir = await makeTempDir();
  await using stream = startFakeRepoStream();
  await using js = startFakeJetstream();
  const { log, lines } = captureLogRecords();
  const config = loadAppviewConfig({
    DATA_DIR: `${dir.path}/data`,
    APPVIEW_PORT: "0",
    PDS_INTERNAL_URL: accountHostUrl(stream.url),
    APPVIEW_JETSTREAM_URL: js.url,
    APPVIEW_INGEST_SECRET: SECRET,
  });
  const appview = await startAppview({
    config,
    log,
    localStream: FAST_BACKOFF,
    publicStream: FAST_BACKOFF,
  });
  try {
    assert.ok(appview.url !== null);
    // Push over real HTTP.
    const pushed = makeCommit(1, [postOp(ALICE, "3kaaaaaaaaaa2", "pushed")], {
      handle: "alice.test",
    });
    const res = await fetch(`${appview.url}/internal/ingest-commit`, {
      method: "POST",
      headers: { authorization: `Bearer ${SECRET}`, "content-type": "application/json" },
      body: JSON.stringify(pushed.push()),
    });
    assert.deepEqual(await res.json(), { ok: true, applied: 2 });
    // The same commit by the local stream, and another by Jetstream.
    stream.append(1, pushed.frame());
    await js.waitForClients(1);
    js.send(
      makeCommit(2, [postOp(BOB, "3kaaaaaaaaab2", "public")]).jetstream(1_725_911_162_329_308)[0],
    );
    await waitFor(() =>
      appview.localConsumer?.status().cursor === 1 &&
      appview.publicConsumer?.status().cursor === 1_725_911_162_329_308
    );
    const health = await (await fetch(`${appview.url}/healthz`)).json();
    assert.equal(health.status, "ok");
    assert.equal(health.consumers.local.state, "live");
    assert.equal(health.consumers.local.cursor, 1);
    assert.equal(health.consumers.public.state, "live");
    assert.equal(health.consumers.public.cursor, 1_725_911_162_329_308);
    const post = await (await fetch(
      `${appview.url}/api/post/${uriOf(ALICE, COLLECTION_POST, "3kaaaaaaaaaa2")}`,
    )).json();
    assert.equal(post.post?.text, "pushed");
    assert.equal(lines.filter((l) => l.msg === WARN_CORS_UNSET).length, 1);
    assert.equal(lines.filter((l) => l.msg === WARN_INGEST_SECRET_UNSET).length, 0);
    // Consumers beside the HTTP API: the shared connection checkpoints as a standalone one.
    assert.deepEqual(
      { ...sqliteOf(appview.ctx).prepare("PRAGMA wal_autocheckpoint").get() },
      { wal_autocheckpoint: WAL_AUTOCHECKPOINT_PAGES },
    );
  } finally {
    await appview.close();
  }
  const db = openIndexDb(config.dbPath);
  try {
    assert.equal(readConsumerStatus(db, CONSUMER_LOCAL)?.state, "disabled");
    assert.equal(readConsumerStatus(db, CONSUMER_PUBLIC)?.state, "disabled");
  } finally {
    db.close();
  }
});

Deno.test("both consumers reconnect after APPVIEW_STREAM_IDLE_TIMEOUT_SECONDS of silence", async () => {
  await using dir = await makeTempDir();
  await using stream = startFakeRepoStream();
  await using js = startFakeJetstream();
  const { log, lines } = captureLogRecords();
  const config = loadAppviewConfig({
    DATA_DIR: `${dir.path}/data`,
    PDS_INTERNAL_URL: accountHostUrl(stream.url),
    APPVIEW_JETSTREAM_URL: js.url,
    APPVIEW_STREAM_IDLE_TIMEOUT_SECONDS: "1",
  });
  await using _appview = await startAppview({
    config,
    log,
    components: { http: false, handleSync: false },
    localStream: FAST_BACKOFF,
    publicStream: FAST_BACKOFF,
  });
  // Both streams stay silent: each consumer connects again after a second (not five minutes).
  await waitFor(() => stream.cursors.length >= 2 && js.requests.length >= 2, {
    message: "both consumers reconnected",
    timeoutMs: 5_000,
  });
  const silent = lines.filter((l) =>
    l.msg === "Stream silent; reconnecting from the stored cursor"
  );
  assert.ok(silent.length >= 2);
  for (const line of silent) assert.ok((line.silentMs as number) >= 1_000);
});

Deno.test("startAppview without a Jetstream URL reports the public consumer disabled", async () => {
  await using dir = await makeTempDir();
  const { log } = captureLogRecords();
  const config = loadAppviewConfig({
    DATA_DIR: dir.path,
    APPVIEW_PORT: "0",
    PDS_INTERNAL_URL: "http://127.0.0.1:9",
  });
  await using appview = await startAppview({
    config,
    log,
    components: { localConsumer: false, handleSync: false },
  });
  assert.equal(appview.publicConsumer, null);
  const res = await fetch(`${appview.url}/healthz`);
  const body = await res.json();
  assert.equal(body.consumers.public.state, "disabled");
  assert.equal(readConsumerStatus(sqliteOf(appview.ctx), CONSUMER_PUBLIC)?.state, "disabled");
});

Deno.test("startAppview with HTTP off serves nothing and returns a null url", async () => {
  await using dir = await makeTempDir();
  const config = loadAppviewConfig({ DATA_DIR: dir.path, PDS_INTERNAL_URL: "http://127.0.0.1:9" });
  await using appview = await startAppview({
    config,
    log: captureLogRecords().log,
    components: { http: false, localConsumer: false, publicConsumer: false, handleSync: false },
  });
  assert.equal(appview.url, null);
  assert.equal(appview.localConsumer, null);
  assert.deepEqual(
    { ...sqliteOf(appview.ctx).prepare("PRAGMA wal_autocheckpoint").get() },
    { wal_autocheckpoint: WAL_AUTOCHECKPOINT_PAGES },
  );
});

Deno.test("startAppview copies the WAL back from a worker thread while the writer is idle", async () => {
  await using dir = await makeTempDir();
  const config = loadAppviewConfig({ DATA_DIR: dir.path, PDS_INTERNAL_URL: "http://127.0.0.1:9" });
  const appview = await startAppview({
    config,
    log: captureLogRecords().log,
    components: { http: false, localConsumer: false, publicConsumer: false, handleSync: false },
    checkpointIntervalMs: 10,
  });
  // Far below wal_autocheckpoint: only the background checkpoint puts these rows in the file.
  const { applied } = await appview.ctx.store.writer.applyOps([
    postOp(ALICE, "3kaaaaaaaaaa2", "checkpointed"),
  ]);
  assert.equal(applied, 1);
  const postsInMainFile = async () => {
    const copy = `${dir.path}/copy-${crypto.randomUUID()}.sqlite`;
    await Deno.copyFile(config.dbPath, copy);
    const db = new DatabaseSync(copy);
    try {
      return db.prepare("SELECT text FROM posts").all().map((r) => r.text);
    } catch {
      return []; // the schema, too, waits in the WAL until the first checkpoint
    } finally {
      db.close();
    }
  };
  try {
    let texts: unknown[] = [];
    await waitFor(async () => (texts = await postsInMainFile()).length > 0);
    assert.deepEqual(texts, ["checkpointed"]);
  } finally {
    await appview.close();
  }
});

/** The index with only its HTTP server, listening on `hostname`:`port`. */
function startHttpOnly(dataDir: string, hostname: string, port: string) {
  return startAppview({
    config: loadAppviewConfig({
      DATA_DIR: dataDir,
      APPVIEW_HOSTNAME: hostname,
      APPVIEW_PORT: port,
      PDS_INTERNAL_URL: "http://127.0.0.1:9",
    }),
    log: captureLogRecords().log,
    components: { localConsumer: false, publicConsumer: false, handleSync: false },
  });
}

Deno.test("startAppview on a port already in use fails naming APPVIEW_PORT and the address", async () => {
  await using dir = await makeTempDir();
  using taken = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (taken.addr as Deno.NetAddr).port;
  await assert.rejects(
    startHttpOnly(dir.path, "127.0.0.1", String(port)),
    (err: unknown) =>
      err instanceof ConfigError &&
      err.message ===
        `APPVIEW_PORT: address 127.0.0.1:${port} is already in use; set APPVIEW_PORT to a free port`,
  );
});

Deno.test("startAppview on an address it cannot listen on fails naming APPVIEW_HOSTNAME and the value", async () => {
  await using dir = await makeTempDir();
  await assert.rejects(
    startHttpOnly(dir.path, "not a host!", "0"),
    (err: unknown) =>
      err instanceof ConfigError &&
      err.message ===
        `APPVIEW_HOSTNAME: cannot listen on "not a host!": invalid host 'not a host!': invalid char found in FQDN`,
  );
});
