/**
 * Issue 9 acceptance (spec 1.5, 2.1, 2.7, 4.3 rule 1, part 8): the handle-sync worker against
 * real servers on loopback (allowed for the test): a DID directory, `did:web` hosts, and a real
 * account host (`startPds`) behind a counting pass-through, over a real index filled through the
 * write path: a SQLite file, or a PostgreSQL database (issue 40).
 *
 * @module
 */

import assert from "node:assert/strict";
import { loadAppviewConfig } from "../appview/config.ts";
import { placeholderHandle } from "../appview/db/handles.ts";
import type { IndexStore } from "../appview/db/store.ts";
import { DidResolver } from "../appview/workers/did_resolver.ts";
import { atprotoTxtRecords, endBackendTests, forEachBackend } from "../appview/_test_helpers.ts";
import { HandleSync, runHandleSyncWorker } from "../appview/workers/handle_sync.ts";
import { startPds } from "../pds/server.ts";
import { encodeBlock, formatCid } from "../shared/cid.ts";
import { createLogger, silentLogger } from "../shared/log.ts";
import { COLLECTION_FOLLOW, COLLECTION_LIKE, COLLECTION_POST } from "../shared/nsid.ts";
import type { IndexOp } from "../shared/ops.ts";
import { freshIndexEnv, indexRows, openIndexContext } from "./_system.ts";
import { makeTempDir, serveOnPort0, type TestServer, waitFor } from "./_util.ts";

const T0 = Date.parse("2025-06-01T12:00:00.000Z");
const MINUTE = 60_000;
const B32 = "abcdefghijklmnopqrstuvwxyz234567";
/**
 * The first did:plc to arrive (after the 10 local accounts), and the first did:plc in DID order,
 * so it falls in the first batch on both backends.
 */
const HANG_DID = `did:plc:${"2".repeat(24)}`;
const SERVER_DELAY_MS = 10;
const log = createLogger("handle-sync-test", { level: "error" });

function plcDid(i: number): string {
  let code = "";
  for (let n = i, k = 0; k < 4; k++, n = Math.floor(n / 32)) code = B32[n % 32] + code;
  return `did:plc:${"q".repeat(20)}${code}`;
}

function postOp(did: string, rkey: string, extra: Record<string, unknown> = {}): IndexOp {
  return recordOp(did, COLLECTION_POST, rkey, {
    $type: COLLECTION_POST,
    text: `post ${rkey} by ${did}`,
    langs: ["en"],
    createdAt: "2025-06-01T11:00:00.000Z",
    ...extra,
  });
}

function recordOp(
  did: string,
  collection: string,
  rkey: string,
  record: Record<string, unknown>,
): IndexOp {
  const cid = formatCid(encodeBlock(record).cid);
  return { kind: "record", action: "create", did, collection, rkey, cid, record };
}

/** Counts requests in flight across every server, and which DIDs each phase asked about. */
class Gauge {
  inFlight = 0;
  max = 0;
  requests = 0;
  phase = new Set<string>();
  violations: string[] = [];

  constructor(readonly store: IndexStore, readonly clock: () => Date) {}

  async track(did: string, answer: () => Promise<Response>): Promise<Response> {
    this.inFlight++;
    this.max = Math.max(this.max, this.inFlight);
    this.requests++;
    this.phase.add(did);
    // Spec 4.3: the attempt time is recorded on each try, before the request.
    const [unmarked] = await indexRows<{ n: number }>(
      this.store,
      `SELECT count(*) AS n FROM posts WHERE did = ? AND substr(handle, 1, 4) = 'did:'
         AND handle_attempted_at IS DISTINCT FROM ?`,
      did,
      this.clock().toISOString(),
    );
    if (unmarked.n !== 0) this.violations.push(`${did}: ${unmarked.n} rows not marked`);
    try {
      await new Promise((r) => setTimeout(r, SERVER_DELAY_MS));
      return await answer();
    } finally {
      this.inFlight--;
    }
  }

  takePhase(): string[] {
    const dids = [...this.phase].sort();
    this.phase = new Set();
    return dids;
  }
}

function didDocument(did: string, handle: string): Record<string, unknown> {
  return {
    "@context": ["https://www.w3.org/ns/did/v1"],
    id: did,
    alsoKnownAs: [`at://${handle}`],
    verificationMethod: [],
  };
}

/** Author handle of each notification of `recipient`, hydrated from the profile cache (2.7). */
async function notificationAuthorHandles(store: IndexStore, recipient: string): Promise<string[]> {
  const rows = await indexRows<{ kind: string; author_did: string; handle: string | null }>(
    store,
    `SELECT n.kind, n.author_did, p.handle FROM notifications n
     JOIN actors r ON r.id = n.recipient
     LEFT JOIN profiles p ON p.did = n.author_did
     WHERE r.did = ? ORDER BY n.kind`,
    recipient,
  );
  return rows.map((r) => `${r.kind} ${r.handle ?? placeholderHandle(r.author_did)}`);
}

forEachBackend(
  "handle sync resolves 350 placeholder posts over 250 DIDs, 8 in flight, 100 per batch, 2 s timeout, hourly retry",
  async (backend) => {
    await using dir = await makeTempDir();
    let nowMs = T0;
    const clock = () => new Date(nowMs);
    const index = await openIndexContext(
      await freshIndexEnv(backend, `${dir.path}/appview.sqlite`),
      { now: clock, log },
    );
    const store = index.store;
    const gauge = new Gauge(store, clock);
    const servers: TestServer[] = [];
    const pds = await startPds({
      env: {
        PDS_JWT_SECRET: "handle-sync-test-secret-0123456789",
        DATA_DIR: dir.path,
        PDS_KV_PATH: `${dir.path}/pds.kv`,
        PDS_HANDLE_DOMAINS: ".test",
      },
      hostname: "127.0.0.1",
      port: 0,
      log: silentLogger,
    });
    try {
      // The real account host, behind a pass-through that counts its requests.
      const pdsProxy = serveOnPort0(async (req) => {
        const body = await req.text();
        const did = (JSON.parse(body) as { handle: string }).handle;
        return await gauge.track(did, async () => {
          const url = new URL(req.url);
          const res = await fetch(`${pds.url}${url.pathname}`, {
            method: req.method,
            headers: { "content-type": "application/json" },
            body,
          });
          return new Response(await res.text(), { status: res.status, headers: res.headers });
        });
      });
      servers.push(pdsProxy);
      const expected = new Map<string, string>();
      const locals = await Promise.all(Array.from({ length: 10 }, async (_, i) => {
        const res = await fetch(`${pds.url}/xrpc/com.atproto.server.createAccount`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ handle: `local${i}.test`, password: "correct horse battery" }),
        });
        const session = await res.json();
        assert.equal(res.status, 200, JSON.stringify(session));
        expected.set(session.did, `local${i}.test`);
        return session.did as string;
      }));

      // The DID directory: 220 did:plc, one of which never answers while `hang` is set.
      let hang = true;
      const hangTimes = { started: 0, aborted: 0 };
      let lastOtherAnswer = 0;
      const plcHandles = new Map<string, string>();
      const plcs = [HANG_DID, ...Array.from({ length: 219 }, (_, i) => plcDid(i))];
      plcs.forEach((did, i) => plcHandles.set(did, `PLC${i}.Example.COM`));
      plcs.forEach((did, i) => expected.set(did, `plc${i}.example.com`));
      servers.push(serveOnPort0((req) => {
        const did = decodeURIComponent(new URL(req.url).pathname.slice(1));
        return gauge.track(did, async () => {
          if (did === HANG_DID && hang) {
            // Timed per request, first one only: a transport-level retry of the same request
            // must not overwrite the start of the one being measured.
            const started = performance.now();
            await new Promise((resolve) => req.signal.addEventListener("abort", resolve));
            if (hangTimes.aborted === 0) {
              hangTimes.started = started;
              hangTimes.aborted = performance.now();
            }
            return new Response(null, { status: 499 });
          }
          const handle = plcHandles.get(did);
          lastOtherAnswer = performance.now();
          if (handle === undefined) {
            return Response.json({ message: "DID not registered" }, { status: 404 });
          }
          return Response.json(didDocument(did, handle));
        });
      }));

      // 20 did:web hosts, each its own server on loopback.
      const webs: string[] = [];
      for (let i = 0; i < 20; i++) {
        let did = "";
        const server = serveOnPort0((req) =>
          gauge.track(did, () => {
            assert.equal(new URL(req.url).pathname, "/.well-known/did.json");
            lastOtherAnswer = performance.now();
            return Promise.resolve(Response.json(didDocument(did, `Web${i}.example.org`)));
          })
        );
        servers.push(server);
        did = `did:web:localhost%3A${server.port}`;
        webs.push(did);
        expected.set(did, `web${i}.example.org`);
      }
      const dids = [...locals, ...plcs, ...webs];
      assert.equal(dids.length, 250);

      // 350 posts through the write path (the first 100 DIDs get two), plus a reply, a like and a
      // follow to locals[0] so that notifications name unresolved authors.
      const ops: IndexOp[] = [];
      for (let k = 0; k < 349; k++) ops.push(postOp(dids[k % 250], `p${k}`));
      const target = {
        uri: `at://${locals[0]}/${COLLECTION_POST}/p0`,
        cid: ops[0].kind === "record" ? ops[0].cid : "",
      };
      ops.push(postOp(locals[1], "reply", { reply: { root: target, parent: target } }));
      ops.push(recordOp(plcs[5], COLLECTION_LIKE, "like1", {
        $type: COLLECTION_LIKE,
        subject: target,
        createdAt: "2025-06-01T11:00:00.000Z",
      }));
      ops.push(recordOp(webs[3], COLLECTION_FOLLOW, "follow1", {
        $type: COLLECTION_FOLLOW,
        subject: locals[0],
        createdAt: "2025-06-01T11:00:00.000Z",
      }));
      assert.deepEqual(await store.writer.applyOps(ops), { applied: 352, skipped: 0 });
      const count = async (sql: string) => (await index.rows<{ n: number }>(sql))[0].n;
      const placeholders = "SELECT count(*) AS n FROM posts WHERE substr(handle, 1, 4) = 'did:'";
      assert.equal(await count(placeholders), 350);
      assert.deepEqual(await notificationAuthorHandles(store, locals[0]), [
        `follow ${placeholderHandle(webs[3])}`,
        `like ${placeholderHandle(plcs[5])}`,
        `reply ${placeholderHandle(locals[1])}`,
      ]);

      const didOfHandle = new Map([...expected].map(([did, handle]) => [handle, did]));
      const resolver = new DidResolver({
        pdsUrl: pdsProxy.url,
        plcUrl: servers[1].url,
        allowPrivate: true,
        txtLookup: atprotoTxtRecords((handle) => didOfHandle.get(handle)),
      });
      const sync = new HandleSync(store, { resolver, log, now: clock });
      // Batches walk the authors in order of their interned id (actors.id), which is assigned on
      // first arrival: on SQLite in the order the posts above first name them, the order of
      // `dids`; on PostgreSQL in DID order among the DIDs new to one write transaction, which all
      // of these are (the writers hand ids out in different orders, docs/behaviour.md 10.9).
      const walk = backend === "sqlite" ? dids : [...dids].sort();
      assert.deepEqual(
        (await index.rows<{ did: string }>("SELECT did FROM actors ORDER BY id")).map((r) => r.did),
        walk,
      );
      const batch = (start: number, end?: number) => walk.slice(start, end).sort();

      // Batch 1: the first 100 DIDs in order; the directory never answers HANG_DID.
      const started = performance.now();
      assert.deepEqual(await sync.runOnce(), { attempted: 100, resolved: 99, failed: 1 });
      const batch1Ms = performance.now() - started;
      assert.deepEqual(gauge.takePhase(), batch(0, 100));
      // The server notices the closed connection a moment after the client gave up.
      await waitFor(() => hangTimes.aborted > 0, { timeoutMs: 2000, message: "server saw abort" });
      const hungMs = hangTimes.aborted - hangTimes.started;
      assert.ok(hungMs >= 1900 && hungMs < 3000, `abandoned after ${hungMs} ms`);
      assert.ok(batch1Ms < 3500, `batch took ${batch1Ms} ms`);
      // The others proceeded while it hung: every other answer came before the abort.
      assert.ok(lastOtherAnswer < hangTimes.aborted);

      assert.deepEqual(await sync.runOnce(), { attempted: 100, resolved: 100, failed: 0 });
      assert.deepEqual(gauge.takePhase(), batch(100, 200));
      assert.deepEqual(await sync.runOnce(), { attempted: 50, resolved: 50, failed: 0 });
      assert.deepEqual(gauge.takePhase(), batch(200));
      assert.deepEqual(await sync.runOnce(), { attempted: 0, resolved: 0, failed: 0 });
      assert.equal(gauge.max, 8);
      assert.deepEqual(gauge.violations, []);

      const hangRows = () =>
        index.rows(
          "SELECT handle, handle_attempted_at FROM posts WHERE did = ? ORDER BY uri",
          HANG_DID,
        );
      const placeholderRow = {
        handle: placeholderHandle(HANG_DID),
        handle_attempted_at: clock().toISOString(),
      };
      assert.deepEqual(await hangRows(), [placeholderRow, placeholderRow]);

      // Not retried within the hour; retried after it (and this time the directory answers).
      nowMs = T0 + 59 * MINUTE;
      const requestsBefore = gauge.requests;
      assert.deepEqual(await sync.runOnce(), { attempted: 0, resolved: 0, failed: 0 });
      assert.equal(gauge.requests, requestsBefore);
      nowMs = T0 + 61 * MINUTE;
      hang = false;
      assert.deepEqual(await sync.runOnce(), { attempted: 1, resolved: 1, failed: 0 });
      assert.deepEqual(gauge.takePhase(), [HANG_DID]);
      assert.deepEqual(await hangRows(), [
        { handle: "plc0.example.com", handle_attempted_at: null },
        { handle: "plc0.example.com", handle_attempted_at: null },
      ]);
      assert.equal(gauge.max, 8);
      assert.deepEqual(gauge.violations, []);

      // The placeholder is gone from posts, profiles and notifications; attempt times cleared.
      assert.equal(await count(placeholders), 0);
      assert.equal(
        await count("SELECT count(*) AS n FROM posts WHERE handle_attempted_at IS NOT NULL"),
        0,
      );
      const posts = await index.rows<{ did: string; handle: string }>(
        "SELECT did, handle FROM posts",
      );
      assert.equal(posts.length, 350);
      for (const p of posts) assert.equal(p.handle, expected.get(p.did), p.did);
      const profiles = new Map(
        (await index.rows<{ did: string; handle: string }>("SELECT did, handle FROM profiles"))
          .map((r) => [r.did, r.handle]),
      );
      for (const did of dids) assert.equal(profiles.get(did), expected.get(did), did);
      assert.deepEqual(await notificationAuthorHandles(store, locals[0]), [
        `follow ${expected.get(webs[3])}`,
        `like ${expected.get(plcs[5])}`,
        "reply local1.test",
      ]);
      await sync.close();
    } finally {
      for (const s of servers) await s.close();
      await pds.close();
      await index[Symbol.asyncDispose]();
    }
  },
);

forEachBackend(
  "runHandleSyncWorker resolves placeholders from the configuration until aborted",
  async (backend) => {
    await using dir = await makeTempDir();
    const database = await freshIndexEnv(backend, `${dir.path}/appview.sqlite`);
    const did = plcDid(1);
    await using plc = serveOnPort0((req) => {
      const asked = new URL(req.url).pathname.slice(1);
      return asked === did
        ? Response.json(didDocument(did, "worker.example.com"))
        : Response.json({ message: "DID not registered" }, { status: 404 });
    });
    await using pdsStub = serveOnPort0(() =>
      Response.json({ error: "HandleNotFound", message: "Unable to resolve handle" }, {
        status: 400,
      })
    );
    const index = await openIndexContext(database);
    try {
      await index.store.writer.applyOps([postOp(did, "w1"), postOp(did, "w2")]);
      const config = loadAppviewConfig({
        ...database,
        APPVIEW_PLC_URL: plc.url,
        PDS_INTERNAL_URL: pdsStub.url,
        APPVIEW_ALLOW_PRIVATE_FETCH: "true",
      });
      const stop = new AbortController();
      const worker = runHandleSyncWorker(config, silentLogger, stop.signal, {
        intervalMs: 60_000,
        resolver: { txtLookup: atprotoTxtRecords({ "worker.example.com": did }) },
      });
      const handles = async () =>
        (await index.rows<{ handle: string }>(
          "SELECT DISTINCT handle FROM posts WHERE did = ?",
          did,
        )).map((r) => r.handle);
      await waitFor(async () => (await handles())[0] === "worker.example.com", {
        message: "handle resolved",
      });
      stop.abort();
      await worker;
      assert.deepEqual(await handles(), ["worker.example.com"]);
    } finally {
      await index[Symbol.asyncDispose]();
    }
  },
);

endBackendTests();
