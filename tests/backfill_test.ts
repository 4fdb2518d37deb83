/**
 * Backfill from repositories over a real account host (docs/behaviour.md 6.2 rules 8-11,
 * issue 38): an index deleted after the stream's retention window and rebuilt by
 * `deno task backfill --all` holds the rows of one that watched everything; a commit the stream
 * consumer never saw is repaired by a backfill; an account host restored from an older copy of its
 * KV file leaves the index with exactly the restored host's content. Each with the index on SQLite
 * and on PostgreSQL (issue 40); the rebuild on PostgreSQL is also the move of an index from SQLite
 * to PostgreSQL that docs/operations.md describes ("Running the index on PostgreSQL").
 */

import assert from "node:assert/strict";
import { loadAppviewConfig } from "../appview/config.ts";
import type { AppviewContext } from "../appview/context.ts";
import {
  captureLogRecords,
  type DumpOptions,
  endBackendTests,
  forEachBackend,
} from "../appview/_test_helpers.ts";
import type { IndexStore } from "../appview/db/store.ts";
import { CURSOR_LOCAL_SEQ } from "../appview/db/state.ts";
import { Backfiller, createRepoSource } from "../appview/ingest/backfill/backfiller.ts";
import { compareWithHost } from "../appview/ingest/backfill/host_reconcile.ts";
import { AccountHostDirectory } from "../appview/ingest/sources/account_directory.ts";
import { createLocalStreamConsumer } from "../appview/ingest/sources/local_stream.ts";
import { startAppview } from "../appview/server.ts";
import { signUp, startTestServer, TEST_ENV, xrpcPost } from "../pds/_test_helpers.ts";
import { pruneEvents } from "../pds/sequencer/retention.ts";
import { readHeadSeq } from "../pds/sequencer/event_log.ts";
import { startPds } from "../pds/server.ts";
import {
  COLLECTION_BLOCK,
  COLLECTION_FOLLOW,
  COLLECTION_LIKE,
  COLLECTION_POST,
  COLLECTION_PROFILE,
  COLLECTION_REPOST,
} from "../shared/nsid.ts";
import { dumpIndex, freshIndexEnv, indexRows, openIndexContext } from "./_system.ts";
import { baseEnv, freePort, makeTempDir, REPO_ROOT, waitFor } from "./_util.ts";

const FAST = { backoff: { initialMs: 5, maxMs: 50 } };
const SECRET = "backfill-ingest-secret";

type Session = { did: string; accessJwt: string };
type Ref = { uri: string; cid: string };

async function write(
  url: string,
  who: Session,
  method: "createRecord" | "putRecord" | "deleteRecord",
  body: Record<string, unknown>,
): Promise<Ref> {
  const res = await xrpcPost(url, `com.atproto.repo.${method}`, { repo: who.did, ...body }, {
    authorization: `Bearer ${who.accessJwt}`,
  });
  const json = await res.json();
  assert.equal(res.status, 200, JSON.stringify(json));
  return json;
}

function create(url: string, who: Session, collection: string, record: Record<string, unknown>) {
  return write(url, who, "createRecord", {
    collection,
    record: { $type: collection, createdAt: new Date().toISOString(), ...record },
  });
}

function remove(url: string, who: Session, uri: string) {
  const [, , , collection, rkey] = uri.split("/");
  return write(url, who, "deleteRecord", { collection, rkey });
}

const count = async (store: IndexStore, sql: string, ...params: string[]) =>
  (await indexRows<{ n: number }>(store, sql, ...params))[0].n;

/** Index tables compared between two indexes (module notes of each test say why). */
const COMPARED: DumpOptions = {
  // Stream and backfill bookkeeping, event counters and migration times are no index content.
  exclude: [
    "consumer_status",
    "cursors",
    "ingest_skips",
    "schema_migrations",
    "backfill_queue",
    "backfill_status",
  ],
  // Time of indexing (and the ids and full-text rowids that follow indexing order).
  omitColumns: ["id", "rowid", "indexed_at", "updated_at", "handle_attempted_at"],
};

/**
 * A history of every record type, with updates and deletes whose records notified nobody (a
 * repository holds no deleted record, while a notification, once made, stays: docs/behaviour.md
 * 6.2 rule 9).
 */
async function writeHistory(url: string) {
  const alice = await signUp(url, "alice.test");
  const bob = await signUp(url, "bob.test");
  const carol = await signUp(url, "carol.test");
  const posts: Ref[] = [];
  for (let i = 0; i < 9; i++) {
    const who = [alice, bob, carol][i % 3];
    const text = `post ${i} café`;
    posts.push(await create(url, who, COLLECTION_POST, { text, langs: ["en"] }));
  }
  const first = { uri: posts[0].uri, cid: posts[0].cid };
  await write(url, alice, "putRecord", {
    collection: COLLECTION_PROFILE,
    rkey: "self",
    record: { $type: COLLECTION_PROFILE, displayName: "Alice" },
  });
  await write(url, alice, "putRecord", {
    collection: COLLECTION_PROFILE,
    rkey: "self",
    record: { $type: COLLECTION_PROFILE, displayName: "Alice A.", description: "hello" },
  });
  await create(url, bob, COLLECTION_LIKE, { subject: first });
  await create(url, carol, COLLECTION_REPOST, { subject: first });
  await create(url, bob, COLLECTION_FOLLOW, { subject: alice.did });
  await create(url, bob, COLLECTION_FOLLOW, { subject: alice.did }); // a second record, one row
  await create(url, carol, COLLECTION_FOLLOW, { subject: alice.did });
  await create(url, alice, COLLECTION_FOLLOW, { subject: carol.did });
  await create(url, bob, COLLECTION_POST, {
    text: "a reply",
    reply: { root: first, parent: first },
  });
  await create(url, carol, COLLECTION_BLOCK, { subject: bob.did });
  const gone = await create(url, alice, COLLECTION_POST, { text: "deleted again" });
  await remove(url, alice, gone.uri);
  return { alice, bob, carol };
}

forEachBackend(
  "an index deleted after the retention window and rebuilt by deno task backfill --all holds the rows of the SQLite index that watched everything",
  async (backend) => {
    await using dir = await makeTempDir();
    // The watching index, on SQLite (the index an operator rebuilds, or moves to PostgreSQL): the
    // push target and the local stream, from the first commit on.
    let accountHost: AccountHostDirectory | null = null;
    await using watcher = await startAppview({
      config: loadAppviewConfig({
        DATA_DIR: `${dir.path}/watched`,
        APPVIEW_PORT: "0",
        APPVIEW_INGEST_SECRET: SECRET,
        APPVIEW_CORS_ORIGINS: "http://localhost",
      }),
      log: captureLogRecords().log,
      components: { http: true, localConsumer: false, publicConsumer: false, handleSync: false },
      accounts: { lookup: (did, opts) => accountHost!.lookup(did, opts) },
    });
    await using pds = await startTestServer({
      env: { APPVIEW_INTERNAL_URL: watcher.url!, APPVIEW_INGEST_SECRET: SECRET },
    });
    accountHost = new AccountHostDirectory({ pdsUrl: pds.url });
    await using stream = createLocalStreamConsumer(watcher.ctx, {
      url: `${pds.url.replace(/^http/, "ws")}/xrpc/com.atproto.sync.subscribeRepos`,
      ...FAST,
    });
    stream.start();
    await writeHistory(pds.url);
    const head = await readHeadSeq(pds.ctx.kv);
    const w = watcher.ctx.store;
    await waitFor(async () => await w.state.readCursor(CURSOR_LOCAL_SEQ) === head, {
      timeoutMs: 10_000,
    });
    await waitFor(async () =>
      await count(w, "SELECT count(*) AS n FROM profiles WHERE handle IS NOT NULL") === 3
    );
    assert.equal(await count(w, "SELECT count(*) AS n FROM posts"), 10);

    // Past the window: every stored event is pruned; a fresh index can no longer replay them.
    const pruned = await pruneEvents(pds.ctx.kv, {
      retentionDays: 1,
      now: Date.now() + 3 * 24 * 3600_000,
    });
    assert.equal(pruned, head);

    // The rebuilt index on `backend`, under the task's own permission set (`-P=appview`, which
    // writes only in ./data: a SQLite file in the temp dir is granted by flags instead).
    const rebuilt = await freshIndexEnv(backend, `${dir.path}/rebuilt/appview.sqlite`);
    const permissions = backend === "sqlite"
      ? ["--allow-net", "--allow-read", `--allow-write=${dir.path}`, "--allow-env", "--allow-sys"]
      : ["-P=appview"];
    const out = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "--quiet",
        ...permissions,
        new URL("scripts/backfill.ts", REPO_ROOT).pathname,
        "--all",
      ],
      cwd: REPO_ROOT.pathname,
      env: { ...baseEnv(), ...rebuilt, PDS_PUBLIC_URL: pds.url, LOG_LEVEL: "warn" },
      clearEnv: true,
      stdout: "piped",
      stderr: "piped",
    }).output();
    const stdout = new TextDecoder().decode(out.stdout);
    assert.equal(out.code, 0, `${stdout}\n${new TextDecoder().decode(out.stderr)}`);
    assert.match(stdout, /^Listed 3 repositories \(0 inactive, 0 malformed entries left out\)/m);
    assert.match(stdout, /^Backfill done in [\d.]+ s: 3 repositories applied \(18 records, /m);

    await using r = await openIndexContext(rebuilt);
    // On PostgreSQL the rebuilt rows equal the SQLite index's in the form both backends share
    // (without SQLite's full-text table, which the SQLite rebuild is compared on too).
    const form = { ...COMPARED, portable: backend !== "sqlite" };
    const want = await dumpIndex(w, form);
    const got = await r.dump(form);
    for (const table of Object.keys(want)) {
      assert.deepEqual(got[table], want[table], `table ${table}`);
    }
    assert.deepEqual(Object.keys(got).sort(), Object.keys(want).sort());
    assert.equal(want.posts.length, 10);
    // Old content sorts at its own time: a backfilled record is indexed at its createdAt.
    assert.equal(
      await count(r.store, "SELECT count(*) AS n FROM posts WHERE indexed_at <> created_at"),
      0,
    );
    assert.equal(await count(r.store, "SELECT count(*) AS n FROM notifications"), 6);
  },
);

forEachBackend(
  "a commit the local stream never delivered is repaired by a backfill of its repository (the gap)",
  async (backend) => {
    await using pds = await startTestServer(); // no push: the stream is the only source
    const { log, lines } = captureLogRecords();
    await using ctx = await openIndexContext(await freshIndexEnv(backend, ":memory:"), {
      log,
      env: { PDS_PUBLIC_URL: pds.url },
    });
    const count = (sql: string) => ctx.rows<{ n: number }>(sql).then((rows) => rows[0].n);
    const url = `${pds.url.replace(/^http/, "ws")}/xrpc/com.atproto.sync.subscribeRepos`;
    const alice = await signUp(pds.url, "alice.test");
    const bob = await signUp(pds.url, "bob.test");
    await create(pds.url, alice, COLLECTION_POST, { text: "one" });
    const first = await create(pds.url, alice, COLLECTION_POST, { text: "two" });
    {
      await using consumer = createLocalStreamConsumer(ctx, { url, ...FAST });
      consumer.start();
      const head = await readHeadSeq(pds.ctx.kv);
      await waitFor(() => consumer.status().cursor === head);
    }
    // Missed: the consumer resumes after these two commits (the push is off).
    await create(pds.url, alice, COLLECTION_POST, { text: "three (missed)" });
    await create(pds.url, bob, COLLECTION_LIKE, { subject: first });
    const skipTo = await readHeadSeq(pds.ctx.kv);
    await ctx.rows(
      `INSERT INTO cursors (name, value, updated_at) VALUES (?, ?, ?)
     ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`,
      CURSOR_LOCAL_SEQ,
      skipTo,
      new Date().toISOString(),
    );
    assert.equal(await ctx.store.state.readCursor(CURSOR_LOCAL_SEQ), skipTo);
    await create(pds.url, alice, COLLECTION_POST, { text: "four" });
    await using worker = new Backfiller(ctx, {
      source: createRepoSource(ctx.config),
      pollIntervalMs: 50,
    });
    worker.start();
    await using consumer = createLocalStreamConsumer(ctx, {
      url,
      hooks: worker.streamHooks(),
      ...FAST,
    });
    consumer.start();
    await waitFor(async () => await count("SELECT count(*) AS n FROM posts") === 4, {
      timeoutMs: 10_000,
    });
    await waitFor(async () => (await ctx.store.state.backfillQueue.counts()).queued === 0);
    const texts = (await ctx.rows<{ text: string }>("SELECT text FROM posts ORDER BY created_at"))
      .map((r) => r.text);
    assert.deepEqual(texts, ["one", "two", "three (missed)", "four"]);
    const applied = lines.filter((l) => l.msg === "Backfill applied");
    assert.deepEqual(applied.map((l) => [l.did, l.reason]), [[alice.did, "gap"]]);
    // Bob's like was missed too, but nothing of Bob's came after it: no commit shows that gap yet.
    assert.equal(await count("SELECT count(*) AS n FROM likes"), 0);
    await create(pds.url, bob, COLLECTION_POST, { text: "bob again" });
    await waitFor(async () => await count("SELECT count(*) AS n FROM likes") === 1, {
      timeoutMs: 10_000,
    });
    assert.equal(await count("SELECT like_count AS n FROM posts WHERE text = 'two'"), 1);
  },
);

/** An account host on a fixed port and KV file, so it can stop and start again. */
async function hostOn(dir: string, port: number) {
  return await startPds({
    env: {
      ...TEST_ENV,
      PDS_PUBLIC_URL: `http://127.0.0.1:${port}`,
      DATA_DIR: dir,
      PDS_KV_PATH: `${dir}/pds.kv`,
    },
    hostname: "127.0.0.1",
    port,
    log: captureLogRecords().log,
  });
}

async function copyKvFiles(from: string, to: string): Promise<void> {
  await Deno.mkdir(to, { recursive: true });
  for (const suffix of ["", "-wal", "-shm"]) {
    try {
      await Deno.remove(`${to}/pds.kv${suffix}`);
    } catch (e) {
      if (!(e instanceof Deno.errors.NotFound)) throw e;
    }
    try {
      await Deno.copyFile(`${from}/pds.kv${suffix}`, `${to}/pds.kv${suffix}`);
    } catch (e) {
      if (!(e instanceof Deno.errors.NotFound)) throw e;
    }
  }
}

/** A fresh index rebuilt in-process from every repository the host lists. */
async function rebuildFrom(ctx: AppviewContext): Promise<void> {
  const source = createRepoSource(ctx.config);
  await compareWithHost(ctx, source, { all: true, reason: "requested" });
  await using worker = new Backfiller(ctx, { source });
  const queue = ctx.store.state.backfillQueue;
  await waitFor(async () => {
    await worker.wake();
    return (await queue.counts()).queued === 0 && worker.running === 0;
  }, { timeoutMs: 10_000 });
}

forEachBackend(
  "after the account host is restored from an older copy of its KV file, the index holds exactly the restored host's content",
  async (backend) => {
    await using dir = await makeTempDir();
    const port = freePort();
    const pdsUrl = `http://127.0.0.1:${port}`;
    const host = `${dir.path}/host`;
    let pds = await hostOn(host, port);
    const { log, lines } = captureLogRecords();
    await using index = await startAppview({
      config: loadAppviewConfig({
        DATA_DIR: `${dir.path}/index`,
        APPVIEW_PORT: "0",
        PDS_PUBLIC_URL: pdsUrl,
        APPVIEW_CORS_ORIGINS: "http://localhost",
        ...await freshIndexEnv(backend, `${dir.path}/index/appview.sqlite`),
      }),
      log,
      components: { http: true, localConsumer: true, publicConsumer: false, handleSync: false },
      localStream: FAST,
      backfill: { pollIntervalMs: 50, backoff: { initialMs: 20, maxMs: 200 } },
    });
    // On PostgreSQL the local consumer first takes its consumer lock.
    await waitFor(() => index.localConsumer !== null, { message: "the consumer runs" });
    const db = index.ctx.store;
    const cursor = () => db.state.readCursor(CURSOR_LOCAL_SEQ);
    const posts = async () =>
      (await indexRows<{ text: string }>(db, "SELECT text FROM posts ORDER BY text")).map((r) =>
        r.text
      );
    try {
      const alice = await signUp(pdsUrl, "alice.test");
      const bob = await signUp(pdsUrl, "bob.test");
      await create(pdsUrl, alice, COLLECTION_POST, { text: "a1" });
      await create(pdsUrl, alice, COLLECTION_POST, { text: "a2" });
      const b1 = await create(pdsUrl, bob, COLLECTION_POST, { text: "b1" });
      await create(pdsUrl, bob, COLLECTION_POST, { text: "b2" });
      await create(pdsUrl, bob, COLLECTION_FOLLOW, { subject: alice.did });
      const backupHead = await readHeadSeq(pds.ctx.kv);
      await waitFor(async () => await cursor() === backupHead, { timeoutMs: 10_000 });

      // The backup: the KV file copied while the host is stopped.
      await pds.close();
      await copyKvFiles(host, `${dir.path}/backup`);
      pds = await hostOn(host, port);
      await create(pdsUrl, alice, COLLECTION_POST, { text: "a3 (after the backup)" });
      await remove(pdsUrl, bob, b1.uri);
      const carol = await signUp(pdsUrl, "carol.test");
      await create(pdsUrl, carol, COLLECTION_POST, { text: "c1 (after the backup)" });
      await create(pdsUrl, carol, COLLECTION_FOLLOW, { subject: alice.did });
      const laterHead = await readHeadSeq(pds.ctx.kv);
      await waitFor(async () => await cursor() === laterHead, { timeoutMs: 10_000 });
      assert.deepEqual(await posts(), [
        "a1",
        "a2",
        "a3 (after the backup)",
        "b2",
        "c1 (after the backup)",
      ]);
      // A new account's #sync names the commit the stream just gave: nothing is fetched.
      await new Promise((r) => setTimeout(r, 200));
      assert.deepEqual(lines.filter((l) => l.msg === "Backfill applied"), []);

      // The restore: the old copy put back while the host is stopped.
      await pds.close();
      await copyKvFiles(`${dir.path}/backup`, host);
      pds = await hostOn(host, port);
      await waitFor(async () => (await posts()).join() === "a1,a2,b1,b2", { timeoutMs: 15_000 });
      await waitFor(async () =>
        (await db.state.backfillQueue.counts()).queued === 0 && index.backfiller!.running === 0
      );
      assert.equal(await cursor(), backupHead);
      assert.equal(
        await count(db, "SELECT count(*) AS n FROM profiles WHERE did = ?", carol.did),
        0,
      );
      const said = lines.filter((l) =>
        String(l.msg).startsWith("Account host is behind the index's cursor")
      );
      assert.equal(said.length, 1);
      assert.deepEqual([said[0].cursor, said[0].head], [laterHead, backupHead]);
      const health = await (await fetch(`${index.url}/healthz`)).json();
      assert.deepEqual(
        [health.backfill.restored.cursor, health.backfill.restored.head, health.backfill.queued],
        [laterHead, backupHead, 0],
      );

      // Exactly the restored host's content: the rows of an index rebuilt from it. Carol's interned
      // id and last rev stay, naming nothing (as for a deleted account, behaviour 4.2 rule 12).
      await using fresh = await openIndexContext(await freshIndexEnv(backend, ":memory:"), {
        env: { PDS_PUBLIC_URL: pdsUrl },
      });
      await rebuildFrom(fresh);
      const compared = { ...COMPARED, exclude: [...COMPARED.exclude!, "actors", "repo_revs"] };
      assert.deepEqual(await dumpIndex(db, compared), await fresh.dump(compared));
      const revs = (store: IndexStore) =>
        indexRows(store, "SELECT did, rev FROM repo_revs WHERE did <> ? ORDER BY did", carol.did);
      assert.deepEqual(await revs(db), await revs(fresh.store));

      // The stream goes on from the restored host's head.
      await create(pdsUrl, alice, COLLECTION_POST, { text: "a4 (after the restore)" });
      await waitFor(async () => (await posts()).includes("a4 (after the restore)"), {
        timeoutMs: 10_000,
      });
    } finally {
      await pds.close();
    }
  },
);

endBackendTests();
