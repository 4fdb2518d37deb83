import assert from "node:assert/strict";
import { DatabaseSync } from "node:sqlite";
import { COLLECTION_POST } from "../shared/nsid.ts";
import { sqliteOf, startFakeJetstream } from "./_test_helpers.ts";
import { makeTempDir, waitFor } from "../runtime/_test_helpers.ts";
import { ConfigError, loadAppviewConfig } from "./config.ts";
import { openIndexStore } from "./db/open.ts";
import { CONSUMER_LOCAL, CONSUMER_PUBLIC } from "./db/state.ts";
import { didOf, postOp, uriOf } from "./_fixtures.ts";
import {
  backendDatabaseEnv,
  captureLogRecords,
  endBackendTests,
  FAST_BACKOFF,
  forEachBackend,
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

// What the running index stores (rows, cursors, consumer status) is checked on both backends;
// the SQLite file's WAL mechanics, listening and the stream's idle timeout on SQLite only.

forEachBackend(
  "startAppview serves HTTP and runs both consumers and handle sync on one database",
  async (backend) => {
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
      ...await backendDatabaseEnv(backend),
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
      if (backend === "sqlite") {
        // Consumers beside the HTTP API: the shared connection checkpoints as a standalone one.
        assert.deepEqual(
          { ...sqliteOf(appview.ctx).prepare("PRAGMA wal_autocheckpoint").get() },
          { wal_autocheckpoint: WAL_AUTOCHECKPOINT_PAGES },
        );
      }
    } finally {
      await appview.close();
    }
    const store = await openIndexStore(config);
    try {
      assert.equal((await store.state.readConsumerStatus(CONSUMER_LOCAL))?.state, "disabled");
      assert.equal((await store.state.readConsumerStatus(CONSUMER_PUBLIC))?.state, "disabled");
    } finally {
      await store.close();
    }
  },
);

// The streams' idle timeout: a socket's behaviour, nothing stored is asserted.
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

forEachBackend(
  "startAppview without a Jetstream URL reports the public consumer disabled",
  async (backend) => {
    await using dir = await makeTempDir();
    const { log } = captureLogRecords();
    const config = loadAppviewConfig({
      DATA_DIR: dir.path,
      APPVIEW_PORT: "0",
      PDS_INTERNAL_URL: "http://127.0.0.1:9",
      ...await backendDatabaseEnv(backend),
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
    assert.equal(
      (await appview.ctx.store.state.readConsumerStatus(CONSUMER_PUBLIC))?.state,
      "disabled",
    );
  },
);

// No HTTP server and the SQLite connection's PRAGMA: SQLite only.
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

// The SQLite file's WAL checkpoint: SQLite only.
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

// Listening and its configuration errors, before the index is reached: SQLite only.
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

// Listening and its configuration errors, before the index is reached: SQLite only.
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

endBackendTests();
