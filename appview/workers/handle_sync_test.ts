import assert from "node:assert/strict";
import { COLLECTION_POST } from "../../shared/nsid.ts";
import { encodeBlock, formatCid } from "../../shared/cid.ts";
import { silentLogger } from "../../shared/log.ts";
import type { IndexOp } from "../../shared/ops.ts";
import { serveOnPort0, waitFor } from "../../runtime/_test_helpers.ts";
import { openIndexDb } from "../db/open.ts";
import { placeholderHandle } from "../db/handles.ts";
import { openSqliteIndexStore } from "../db/sqlite_store.ts";
import { DidResolver } from "./did_resolver.ts";
import { HandleSync } from "./handle_sync.ts";
import {
  atprotoTxtRecords,
  endBackendTests,
  forEachBackend,
  openBackendIndex,
} from "../_test_helpers.ts";

// Spec 4.3 rule 1; the acceptance scenario of issue 9 is tests/handle_sync_test.ts. What handle
// sync writes runs on both backends; its option checks, made before the index is reached, on one.

function post(did: string, rkey: string): IndexOp {
  const record = { $type: COLLECTION_POST, text: "hi", createdAt: "2025-06-01T00:00:00.000Z" };
  const cid = formatCid(encodeBlock(record).cid);
  return { kind: "record", action: "create", did, collection: COLLECTION_POST, rkey, cid, record };
}

forEachBackend(
  "HandleSync.start runs full batches back to back and close stops the wait",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    const asked: string[] = [];
    await using plc = serveOnPort0((req) => {
      const did = new URL(req.url).pathname.slice(1);
      asked.push(did);
      return Response.json({ id: did, alsoKnownAs: [`at://u${did.slice(-1)}.example.com`] });
    });
    await using pds = serveOnPort0(() =>
      Response.json({ error: "HandleNotFound" }, { status: 400 })
    );
    const dids = ["a", "b", "c", "d", "e"].map((c) => `did:plc:${"x".repeat(23)}${c}`);
    assert.equal((await ix.apply(...dids.map((did, i) => post(did, `r${i}`)))).skipped, 0);
    const resolver = new DidResolver({
      pdsUrl: pds.url,
      plcUrl: plc.url,
      allowPrivate: true,
      // u<c>.example.com names did:plc:xxx...<c>
      txtLookup: atprotoTxtRecords((handle) => `did:plc:${"x".repeat(23)}${handle[1]}`),
    });
    const sync = new HandleSync(ix.store, { resolver, log: silentLogger, batchSize: 2 });
    sync.start(60_000);
    const placeholders = async () =>
      (await ix.row("SELECT count(*) AS n FROM posts WHERE substr(handle, 1, 4) = 'did:'"))?.n;
    await waitFor(async () => await placeholders() === 0, {
      message: "three batches without waiting",
    });
    const started = performance.now();
    await sync.close();
    assert.ok(performance.now() - started < 1000);
    assert.deepEqual(asked, dids);
    assert.deepEqual(
      (await ix.rows("SELECT handle FROM posts ORDER BY did")).map((r) => r.handle),
      ["ua.example.com", "ub.example.com", "uc.example.com", "ud.example.com", "ue.example.com"],
    );
    assert.deepEqual(await sync.runOnce(), { attempted: 0, resolved: 0, failed: 0 });
  },
);

Deno.test("HandleSync rejects a batch size or concurrency below 1", () => {
  const db = openIndexDb(":memory:");
  const store = openSqliteIndexStore(db);
  try {
    const resolver = new DidResolver({
      pdsUrl: "http://x",
      plcUrl: "http://x",
      allowPrivate: true,
    });
    assert.throws(() => new HandleSync(store, { resolver, log: silentLogger, batchSize: 0 }), {
      name: "RangeError",
      message: "Batch size must be a positive integer: 0",
    });
    assert.throws(() => new HandleSync(store, { resolver, log: silentLogger, concurrency: 1.5 }), {
      name: "RangeError",
      message: "Concurrency must be a positive integer: 1.5",
    });
  } finally {
    db.close();
  }
});

forEachBackend(
  "a DID document claiming a local user's handle cannot take it (no hijack)",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    const alice = `did:plc:${"a".repeat(24)}`;
    // A hostile did:web document names Alice's handle, and so does the handle's DNS (say the
    // attacker controls it); the account host does not know the DID.
    let evil = "";
    await using web = serveOnPort0(() =>
      Response.json({ id: evil, alsoKnownAs: ["at://alice.test"] })
    );
    evil = `did:web:localhost%3A${web.port}`;
    await using pds = serveOnPort0(async (req) => {
      const { handle } = await req.json();
      return handle === alice
        ? Response.json({ did: alice, handle: "alice.test" })
        : Response.json({ error: "HandleNotFound" }, { status: 400 });
    });
    assert.deepEqual(await ix.apply(post(alice, "a1"), post(evil, "e1")), {
      applied: 2,
      skipped: 0,
    });
    const resolver = new DidResolver({
      pdsUrl: pds.url,
      plcUrl: pds.url,
      allowPrivate: true,
      txtLookup: atprotoTxtRecords({ "alice.test": evil }),
    });
    const sync = new HandleSync(ix.store, { resolver, log: silentLogger });
    assert.deepEqual(await sync.runOnce(), { attempted: 2, resolved: 1, failed: 1 });
    const handles = await ix.rows("SELECT did, handle FROM profiles ORDER BY did");
    assert.deepEqual(
      handles.map((r) => [r.did, r.handle]).sort(),
      [
        [alice, "alice.test"],
        [evil, null],
      ].sort(),
    );
    const posts = await ix.rows("SELECT did, handle FROM posts ORDER BY did");
    assert.equal(posts.find((r) => r.did === alice)?.handle, "alice.test");
    assert.equal(posts.find((r) => r.did === evil)?.handle, placeholderHandle(evil));
    assert.equal(ix.writer.stats().skippedByReason.handle_conflict, 1);
  },
);

endBackendTests();
