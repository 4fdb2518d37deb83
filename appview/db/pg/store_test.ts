/**
 * The index store on PostgreSQL (`store.ts`, issue 40): its state answers as SQLite's does, call
 * for call; consumer locks wait, hand over and fence a holder that lost its connection; the write
 * connection survives a lost session; handle sync on two stores splits the work; TLS from the
 * URL; `openIndexStore` picks the backend from the configuration.
 */

import assert from "node:assert/strict";
import { didOf, postOp } from "../../_fixtures.ts";
import type { RecordOp } from "../../../shared/ops.ts";
import type { CommitSpan } from "../../ingest/apply_ops.ts";
import { loadAppviewConfig } from "../../config.ts";
import { startAppview } from "../../server.ts";
import { captureLogRecords } from "../../_test_helpers.ts";
import { HandleSync } from "../../workers/handle_sync.ts";
import type { HandleResolver } from "../../workers/did_resolver.ts";
import { openIndexDb, openIndexStore, WARN_DB_PATH_IGNORED } from "../open.ts";
import { openSqliteIndexStore } from "../sqlite_store.ts";
import type { IndexStore } from "../store.ts";
import { PgConnectionLost } from "./connection.ts";
import { PG_LOCK_CONSUMERS } from "./lease.ts";
import { openPgIndexStore, type PgIndexStore } from "./store.ts";
import {
  type Dump,
  dumpPgIndex,
  dumpSqliteIndex,
  freshPgDatabase,
  pgInstall,
  pgTest,
  stopPgClusterAfterTests,
} from "./_test_helpers.ts";
import { startPostgres } from "../../../runtime/_postgres.ts";
import { silentLogger } from "../../../shared/log.ts";
import { waitFor } from "../../../runtime/_test_helpers.ts";

/** A clock ticking one second per reading, from the same instant on every store. */
function tickingClock(): () => Date {
  let t = Date.parse("2024-06-01T00:00:00.000Z");
  return () => new Date(t += 1000);
}

const at = (s: number) => new Date(Date.parse("2024-06-01T00:00:00.000Z") + s * 1000).toISOString();

/** Every state call of the index, in an order that reaches each branch; returns what each said. */
async function stateScript(store: IndexStore): Promise<unknown[]> {
  const out: unknown[] = [];
  const s = store.state;
  const q = s.backfillQueue;
  out.push(await s.readCursor("local_seq"));
  await store.writer.applyOps([], { cursor: { name: "local_seq", value: 7 } });
  out.push(await s.readCursor("local_seq"), await s.readCursor("public_time_us"));
  // down_since: set by the first down state after live, kept across down states, cleared by live.
  for (
    const [state, t] of [["live", 1], ["connecting", 2], ["backoff", 3], ["live", 4], [
      "backoff",
      5,
    ], ["disabled", 6]] as const
  ) {
    await s.writeConsumerStatus({
      name: "local",
      state,
      cursor: t * 10,
      lastEventAt: at(t),
      lastError: state === "backoff" ? `failed at ${t}` : null,
      updatedAt: at(t),
    });
    out.push(await s.readConsumerStatus("local"), await s.readConsumerDownSince("local"));
  }
  out.push(await s.readConsumerStatus("public"), await s.readConsumerDownSince("public"));
  // The backfill queue.
  const [d1, d2, d3] = ["one", "two", "three"].map(didOf);
  out.push(await q.counts(), await q.nextDue(), await q.due(at(100), 10));
  await q.enqueue(d1, "gap", null, at(10));
  await q.enqueue(d2, "sync", "3kaaaaaaaaa22", at(11));
  await q.failed(d2, "x".repeat(600), at(50));
  await q.enqueue(d2, "sync", "3kbbbbbbbbb22", at(12)); // keeps its backoff
  await q.requestNow(d3, "requested", null, at(13));
  out.push(await q.counts(), await q.nextDue(), await q.due(at(20), 10), await q.due(at(60), 1));
  const [first] = await q.due(at(10), 1);
  await q.enqueue(d1, "unknown", null, at(14)); // a new trigger: done() keeps the row
  await q.done(first);
  out.push(await q.due(at(100), 10));
  await q.requestNow(d2, "requested", null, at(15)); // attempts back to 0, due now
  for (const row of await q.due(at(100), 10)) await q.done(row);
  out.push(await q.counts(), await q.nextDue());
  // The backfill status row.
  out.push(await s.readBackfillStatus("local"));
  await s.recordBackfillOutcome("local", { did: d1, at: at(20), records: 12 });
  await s.recordBackfillOutcome("local", { did: d2, at: at(21), error: "e".repeat(700) });
  await s.recordBackfillOutcome("local", { did: d3, at: at(22), records: 3 });
  out.push(await s.readBackfillStatus("local"));
  await s.recordRestore("local", { cursor: 90, head: 40, at: at(23) });
  await s.recordRestore("public", { cursor: 5, head: null, at: at(24) });
  out.push(await s.readBackfillStatus("local"), await s.readBackfillStatus("public"));
  // Local repositories: commits from the account host mark them (more than one page of them).
  const ops: RecordOp[] = [];
  const commits: CommitSpan[] = [];
  for (let i = 0; i < 1_100; i++) {
    const did = didOf(`repo${String(i).padStart(5, "0")}`);
    commits.push({
      start: ops.length,
      end: ops.length + 1,
      commit: { did, rev: "3kaaaaaaaaa22", mode: i % 3 === 0 ? "newer-or-equal" : "next" },
    });
    ops.push(postOp(did, "3kaaaaaaaaa22", `post ${i}`));
  }
  await store.writer.applyOps(ops, { commits });
  const local: string[] = [];
  for await (const did of s.localRepoDids()) local.push(did);
  out.push(
    local.length,
    local,
    await s.isLocalRepo(didOf("repo00001")),
    await s.isLocalRepo(didOf("repo00003")),
    await s.isLocalRepo(didOf("nobody")),
  );
  // Handle sync's rows: every author above has a placeholder handle.
  const h = s.placeholderHandles;
  const firstBatch = await h.due(0, at(5_000), 400);
  await h.markAttempted(firstBatch.map((r) => r.did), at(5_001));
  const wrapped = await h.due(firstBatch[firstBatch.length - 1].author, at(5_000), 400, true);
  const rest = await h.due(firstBatch[firstBatch.length - 1].author, at(5_000), 2_000);
  await h.markAttempted(rest.map((r) => r.did), at(5_002));
  out.push(
    firstBatch.length,
    firstBatch.slice(0, 3),
    wrapped,
    rest.length,
    await h.due(0, at(5_001), 10),
    (await h.due(0, at(6_000), 2_000)).length,
  );
  return out;
}

pgTest("the state answers every call as SQLite's does, and leaves the same rows", async () => {
  const lite = openSqliteIndexStore(openIndexDb(":memory:"), { now: tickingClock() });
  const pg = await openPgIndexStore(await freshPgDatabase(), { now: tickingClock(), poolMax: 2 });
  try {
    // Plain objects (SQLite's rows have no prototype).
    const want = JSON.parse(JSON.stringify(await stateScript(lite)));
    const got = JSON.parse(JSON.stringify(await stateScript(pg)));
    for (const [i, value] of want.entries()) assert.deepEqual(got[i], value, `result ${i}`);
    assert.equal(got.length, want.length);
    // The rows, but for the writers' clock readings (they read it a different number of times)
    // and handle sync's claims, which mark rows at the store's clock on PostgreSQL only.
    const rows = (dump: Dump) =>
      Object.fromEntries(
        Object.entries(dump).map(([table, list]) => [
          table,
          list.map((row) => {
            const { indexed_at: _i, handle_attempted_at: _h, ...rest } = row;
            if (table === "cursors") delete rest.updated_at;
            return rest;
          }),
        ]),
      );
    const liteRows = rows(dumpSqliteIndex(lite.db));
    const pgRows = rows(await dumpPgIndex(pg.sql));
    for (const table of Object.keys(liteRows)) {
      assert.deepEqual(pgRows[table], liteRows[table], `table ${table}`);
    }
  } finally {
    await lite.close();
    await pg.close();
  }
});

async function postCount(store: PgIndexStore): Promise<number> {
  const [{ n }] = await store.sql`SELECT count(*) AS n FROM posts`;
  return n as number;
}

pgTest(
  "a consumer lock: a second process waits, takes over on release, and a holder that lost its connection writes nothing",
  async () => {
    const url = await freshPgDatabase();
    await using a = await openPgIndexStore(url, { poolMax: 2 });
    await using b = await openPgIndexStore(url, { poolMax: 2 });
    const alice = didOf("alice");

    const first = (await a.acquireConsumerLease("local"))!;
    await first.store.writer.applyOps([postOp(alice, "3kaaaaaaaaa22", "one")], {
      cursor: { name: "local_seq", value: 1 },
    });
    // Another name is another lock.
    const other = (await b.acquireConsumerLease("public"))!;
    await other.release();

    const holders: unknown[] = [];
    let second = b.acquireConsumerLease("local", {
      pollMs: 20,
      onWaiting: (holder) => holders.push(holder),
    });
    await new Promise((r) => setTimeout(r, 150));
    assert.equal(holders.length, 1, "reported once");
    assert.deepEqual(
      holders[0],
      { ...(holders[0] as object), pid: first.pid, applicationName: "social-index consumer:local" },
    );
    // Released: the waiter takes it.
    await first.release();
    let lease = (await second)!;
    assert.notEqual(lease.pid, first.pid);
    await assert.rejects(
      first.store.writer.applyOps([postOp(alice, "3kaaaaaaaaa23", "late")]),
      PgConnectionLost,
    );

    // A waiter that gives up.
    const stop = new AbortController();
    const gaveUp = a.acquireConsumerLease("local", { pollMs: 20, signal: stop.signal });
    await new Promise((r) => setTimeout(r, 60));
    stop.abort();
    assert.equal(await gaveUp, null);

    // The holder's session ends (a network cut, the server ending it): the lease is lost, its
    // writes and status rows are refused without reaching the database, a waiter takes over.
    second = a.acquireConsumerLease("local", { pollMs: 20 });
    await a.sql`SELECT pg_terminate_backend(${lease.pid})`;
    await lease.lost;
    assert.equal(lease.isLost, true);
    const lost = lease;
    await assert.rejects(
      lost.store.writer.applyOps([postOp(alice, "3kaaaaaaaaa24", "fenced")], {
        cursor: { name: "local_seq", value: 99 },
      }),
      { name: "PgConnectionLost", message: /lock of consumer local is no longer held/ },
    );
    await assert.rejects(
      lost.store.state.writeConsumerStatus({
        name: "local",
        state: "live",
        cursor: 99,
        lastEventAt: null,
        lastError: null,
        updatedAt: "2024-01-01T00:00:00.000Z",
      }),
      PgConnectionLost,
    );
    lease = (await second)!;
    await lease.store.writer.applyOps([postOp(alice, "3kaaaaaaaaa25", "two")], {
      cursor: { name: "local_seq", value: 2 },
    });
    assert.equal(await a.state.readCursor("local_seq"), 2);
    assert.equal(await postCount(a), 2);
    assert.equal(await a.state.readConsumerStatus("local"), null);
    await lost.release();
    await lease.release();
    const [{ held }] = await a.sql`SELECT count(*) AS held FROM pg_locks
    WHERE locktype = 'advisory' AND classid::bigint = ${PG_LOCK_CONSUMERS}`;
    assert.equal(held, 0);
  },
);

pgTest("the write connection: after its session ended, the next call opens another", async () => {
  await using store = await openPgIndexStore(await freshPgDatabase(), { poolMax: 2 });
  const alice = didOf("alice");
  await store.writer.applyOps([postOp(alice, "3kaaaaaaaaa22", "one")]);
  const writer = async () =>
    (await store.sql`SELECT pid FROM pg_stat_activity
      WHERE application_name = 'social-index writer'`).map((r) => r.pid as number);
  const [pid] = await writer();
  await store.sql`SELECT pg_terminate_backend(${pid})`;
  await waitFor(async () => (await writer()).length === 0);
  assert.deepEqual(await store.writer.applyOps([postOp(alice, "3kaaaaaaaaa23", "two")]), {
    applied: 1,
    skipped: 0,
  });
  const [again] = await writer();
  assert.notEqual(again, pid);
  assert.equal(await postCount(store), 2);
});

pgTest("handle sync on two processes splits the work: each DID resolved once", async () => {
  const url = await freshPgDatabase();
  await using a = await openPgIndexStore(url, { poolMax: 2 });
  await using b = await openPgIndexStore(url, { poolMax: 2 });
  const dids = Array.from({ length: 60 }, (_, i) => didOf(`author${i}`));
  await a.writer.applyOps(dids.map((did, i) => postOp(did, "3kaaaaaaaaa22", `post ${i}`)));
  const resolved: string[] = [];
  // The resolver is what the test watches: which DIDs each process resolved.
  const resolver: HandleResolver = {
    async resolve(did) {
      resolved.push(did);
      await new Promise((r) => setTimeout(r, 2));
      return { handle: `author${dids.indexOf(did)}.test`, authoritative: false };
    },
  };
  const syncs = [a, b].map((store) =>
    new HandleSync(store, { resolver, log: silentLogger, batchSize: 7, concurrency: 2 })
  );
  const results = [];
  for (let round = 0; round < 6; round++) {
    results.push(...await Promise.all(syncs.map((s) => s.runOnce())));
  }
  assert.deepEqual([...resolved].sort(), [...dids].sort(), "every DID once");
  assert.equal(results.reduce((n, r) => n + r.resolved, 0), 60);
  assert.ok(results.filter((r) => r.attempted > 0).length > 6, "both worked");
  const [{ n }] = await a.sql`SELECT count(*) AS n FROM posts WHERE handle LIKE 'did:%'`;
  assert.equal(n, 0);
});

pgTest(
  "openIndexStore: APPVIEW_DATABASE_URL opens PostgreSQL (APPVIEW_DB_PATH ignored, with a warning), a server runs on it",
  async () => {
    const url = await freshPgDatabase();
    const { log, lines: records } = captureLogRecords();
    const config = loadAppviewConfig({
      APPVIEW_DATABASE_URL: url,
      APPVIEW_DB_PATH: "/nonexistent/index.sqlite",
      APPVIEW_DB_POOL_MAX: "3",
      APPVIEW_PORT: "0",
      APPVIEW_WEB_DIR: "off",
    });
    const store = await openIndexStore(config, { log });
    try {
      assert.equal(store.kind, "postgres");
      assert.deepEqual(
        records.filter((r) => r.level === "warn").map((r) => r.msg),
        [WARN_DB_PATH_IGNORED],
      );
      const [{ max }] = await (store as PgIndexStore).sql`SELECT 1 AS max`;
      assert.equal(max, 1);
    } finally {
      await store.close();
    }
    // Unreachable: the error names the variable and never shows the password.
    const closed = url.replace(/:(\d+)\//, ":1/").replace("postgres@", "postgres:s3cret@");
    await assert.rejects(
      openIndexStore(loadAppviewConfig({ APPVIEW_DATABASE_URL: closed }), { log: silentLogger }),
      (e: Error) => {
        assert.match(e.message, /^APPVIEW_DATABASE_URL: cannot open the index database/);
        assert.doesNotMatch(e.message, /s3cret/);
        return true;
      },
    );
    // The whole index on it: HTTP, and the local consumer under its lock.
    await using index = await startAppview({
      config: loadAppviewConfig({
        APPVIEW_DATABASE_URL: url,
        APPVIEW_PORT: "0",
        APPVIEW_WEB_DIR: "off",
        PDS_INTERNAL_URL: "http://127.0.0.1:9",
      }),
      log: silentLogger,
      components: { http: true, localConsumer: true, publicConsumer: true, handleSync: true },
      consumerLockPollMs: 20,
    });
    const res = await fetch(`${index.url}/healthz`);
    const body = await res.json();
    assert.equal(body.consumers.public.state, "disabled");
    await waitFor(() => index.localConsumer !== null, { message: "the consumer takes its lock" });
    const res2 = await fetch(`${index.url}/api/search?q=hello`);
    assert.equal(res2.status, 200, await res2.text());
  },
);

pgTest(
  "TLS from the URL: sslmode require, verify-full against sslrootcert, a wrong root refused",
  async () => {
    await using dir = await Deno.makeTempDir().then((path) => ({
      path,
      [Symbol.asyncDispose]: () => Deno.remove(path, { recursive: true }),
    }));
    const openssl = (...args: string[]) =>
      new Deno.Command("openssl", { args, cwd: dir.path, stdout: "null", stderr: "piped" }).output()
        .then((o) => assert.equal(o.code, 0, new TextDecoder().decode(o.stderr)));
    for (const name of ["ca", "other"]) {
      await openssl(
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-days",
        "2",
        "-subj",
        `/CN=${name} root`,
        "-keyout",
        `${name}.key`,
        "-out",
        `${name}.pem`,
      );
    }
    await openssl(
      "req",
      "-newkey",
      "ec",
      "-pkeyopt",
      "ec_paramgen_curve:P-256",
      "-nodes",
      "-subj",
      "/CN=localhost",
      "-keyout",
      "server.key",
      "-out",
      "server.csr",
    );
    await Deno.writeTextFile(`${dir.path}/ext`, "subjectAltName=DNS:localhost\n");
    await openssl(
      "x509",
      "-req",
      "-in",
      "server.csr",
      "-CA",
      "ca.pem",
      "-CAkey",
      "ca.key",
      "-CAcreateserial",
      "-days",
      "2",
      "-extfile",
      "ext",
      "-out",
      "server.pem",
    );
    // The server reads its key as its own user, which must be the only one to read it.
    const runAs = pgInstall!.runAs;
    for (const file of ["server.key", "server.pem"]) {
      await Deno.chmod(`${dir.path}/${file}`, 0o600);
      if (runAs !== null) await Deno.chown(`${dir.path}/${file}`, runAs.uid, runAs.gid);
    }
    if (runAs !== null) await Deno.chmod(dir.path, 0o755);
    await using cluster = (await startPostgres({
      install: pgInstall!,
      settings: {
        ssl: "on",
        ssl_cert_file: `${dir.path}/server.pem`,
        ssl_key_file: `${dir.path}/server.key`,
      },
    }))!;
    const base = (await cluster.createDatabase("tls")).replace("127.0.0.1", "localhost");
    const usesTls = async (query: string) => {
      await using store = await openPgIndexStore(`${base}?${query}`, { poolMax: 1 });
      const [{ ssl }] = await store.sql`SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()`;
      return ssl as boolean;
    };
    assert.equal(await usesTls("sslmode=disable"), false);
    assert.equal(await usesTls("sslmode=require"), true);
    assert.equal(await usesTls(`sslmode=verify-full&sslrootcert=${dir.path}/ca.pem`), true);
    assert.equal(await usesTls(`sslmode=verify-ca&sslrootcert=${dir.path}/ca.pem`), true);
    await assert.rejects(
      usesTls(`sslmode=verify-full&sslrootcert=${dir.path}/other.pem`),
      /APPVIEW_DATABASE_URL: cannot open the index database.*(certificate|verify)/i,
    );
    await assert.rejects(
      usesTls(`sslmode=verify-full&sslrootcert=${dir.path}/missing.pem`),
      /APPVIEW_DATABASE_URL: sslrootcert .*missing\.pem cannot be read/,
    );
    await assert.rejects(usesTls("sslcrl=x"), /APPVIEW_DATABASE_URL: sslcrl is not supported/);
  },
);

stopPgClusterAfterTests();
