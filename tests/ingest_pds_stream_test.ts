/**
 * End to end with the real account host (spec 6.1, 6.2): commits written through its XRPC API
 * reach the index through its `subscribeRepos` stream, with and without the push; an index fed
 * by push and stream ends with the same rows as one fed by the stream alone. The index on SQLite and
 * on PostgreSQL (issue 40).
 */

import assert from "node:assert/strict";
import { loadAppviewConfig } from "../appview/config.ts";
import {
  captureLogRecords,
  endBackendTests,
  FIXED_NOW,
  forEachBackend,
} from "../appview/_test_helpers.ts";
import { CURSOR_LOCAL_SEQ } from "../appview/db/state.ts";
import { AccountHostDirectory } from "../appview/ingest/sources/account_directory.ts";
import { createLocalStreamConsumer } from "../appview/ingest/sources/local_stream.ts";
import { startAppview } from "../appview/server.ts";
import { signUp, startTestServer, xrpcPost } from "../pds/_test_helpers.ts";
import {
  COLLECTION_FOLLOW,
  COLLECTION_LIKE,
  COLLECTION_POST,
  COLLECTION_REPOST,
} from "../shared/nsid.ts";
import { dumpIndex, freshIndexEnv, indexRows, openIndexContext } from "./_system.ts";
import { makeTempDir, waitFor } from "./_util.ts";

const FAST = { backoff: { initialMs: 5, maxMs: 50 } };
const SECRET = "e2e-ingest-secret";
const NOW = "2024-05-01T12:00:00.000Z";

type Session = { did: string; accessJwt: string };

async function createRecord(
  url: string,
  who: Session,
  collection: string,
  record: Record<string, unknown>,
): Promise<{ uri: string; cid: string }> {
  const res = await xrpcPost(url, "com.atproto.repo.createRecord", {
    repo: who.did,
    collection,
    record: { $type: collection, createdAt: NOW, ...record },
  }, { authorization: `Bearer ${who.accessJwt}` });
  const body = await res.json();
  assert.equal(res.status, 200, JSON.stringify(body));
  return body;
}

async function deleteRecord(url: string, who: Session, uri: string): Promise<void> {
  const [, , , collection, rkey] = uri.split("/");
  const res = await xrpcPost(url, "com.atproto.repo.deleteRecord", {
    repo: who.did,
    collection,
    rkey,
  }, { authorization: `Bearer ${who.accessJwt}` });
  assert.equal(res.status, 200, await res.text());
}

/** Writes a small social history and returns the number of commits made. */
async function writeHistory(url: string): Promise<{ commits: number; alice: string }> {
  const alice = await signUp(url, "alice.test");
  const bob = await signUp(url, "bob.test");
  const posts = [];
  for (let i = 0; i < 10; i++) {
    posts.push(
      await createRecord(url, i % 2 ? bob : alice, COLLECTION_POST, { text: `post ${i}` }),
    );
  }
  const ref = { uri: posts[0].uri, cid: posts[0].cid };
  await createRecord(url, bob, COLLECTION_LIKE, { subject: ref });
  const repost = await createRecord(url, bob, COLLECTION_REPOST, { subject: ref });
  await createRecord(url, bob, COLLECTION_FOLLOW, { subject: alice.did });
  await createRecord(url, bob, COLLECTION_POST, {
    text: "a reply",
    reply: { root: ref, parent: ref },
  });
  await deleteRecord(url, bob, repost.uri);
  return { commits: 15, alice: alice.did };
}

forEachBackend(
  "commits written on the real account host reach the index through subscribeRepos with the push target down",
  async (backend) => {
    await using pds = await startTestServer(); // APPVIEW_INTERNAL_URL=off: no push at all
    await using ctx = await openIndexContext(await freshIndexEnv(backend, ":memory:"));
    await using consumer = createLocalStreamConsumer(ctx, {
      url: `${pds.url.replace(/^http/, "ws")}/xrpc/com.atproto.sync.subscribeRepos`,
      ...FAST,
    });
    consumer.start();
    const { alice } = await writeHistory(pds.url);
    const count = async (sql: string) => (await ctx.rows<{ n: number }>(sql))[0].n;
    await waitFor(async () => await count("SELECT count(*) AS n FROM posts") === 11, {
      timeoutMs: 10_000,
    });
    await waitFor(async () => await count("SELECT count(*) AS n FROM reposts") === 0);
    const first = await ctx.rows(
      "SELECT like_count, repost_count FROM posts WHERE did = ? AND text = 'post 0'",
      alice,
    );
    assert.deepEqual(first, [{ like_count: 1, repost_count: 0 }]);
    const kinds = (await ctx.rows<{ kind: string }>(
      `SELECT n.kind FROM notifications n JOIN actors a ON a.id = n.recipient
     WHERE a.did = ? ORDER BY n.kind`,
      alice,
    )).map((r) => r.kind);
    assert.deepEqual(kinds, ["follow", "like", "reply", "repost"]);
    assert.ok(consumer.status().cursor !== null && consumer.status().cursor! >= 13);
  },
);

forEachBackend(
  "an index fed by push and stream ends with the same rows as one fed by the stream alone (spec 6.2 rule 4)",
  async (backend) => {
    await using dir = await makeTempDir();
    // Index A: HTTP (push target) plus its local consumer; index B: the local consumer alone.
    const config = loadAppviewConfig({
      DATA_DIR: `${dir.path}/a`,
      APPVIEW_PORT: "0",
      APPVIEW_INGEST_SECRET: SECRET,
      APPVIEW_CORS_ORIGINS: "http://localhost",
      ...await freshIndexEnv(backend, `${dir.path}/a/appview.sqlite`),
    });
    // Pushes are verified against the account host, whose port is known only once it starts.
    let accountHost: AccountHostDirectory | null = null;
    await using a = await startAppview({
      config,
      log: captureLogRecords().log,
      now: FIXED_NOW,
      components: { http: true, localConsumer: false, publicConsumer: false, handleSync: false },
      accounts: { lookup: (did, opts) => accountHost!.lookup(did, opts) },
    });
    await using pds = await startTestServer({
      env: { APPVIEW_INTERNAL_URL: a.url!, APPVIEW_INGEST_SECRET: SECRET },
    });
    accountHost = new AccountHostDirectory({ pdsUrl: pds.url });
    const streamUrl = `${pds.url.replace(/^http/, "ws")}/xrpc/com.atproto.sync.subscribeRepos`;
    await using aStream = createLocalStreamConsumer(a.ctx, { url: streamUrl, ...FAST });
    await using b = await openIndexContext(await freshIndexEnv(backend, ":memory:"), {
      now: FIXED_NOW,
    });
    await using bStream = createLocalStreamConsumer(b, { url: streamUrl, ...FAST });
    aStream.start();
    bStream.start();
    await writeHistory(pds.url);
    const count = async (store: typeof b.store, sql: string) =>
      (await indexRows<{ n: number }>(store, sql))[0].n;
    const head = await waitFor(async () => {
      const ca = await a.ctx.store.state.readCursor(CURSOR_LOCAL_SEQ);
      let done = true;
      for (const store of [a.ctx.store, b.store]) {
        done &&= await count(store, "SELECT count(*) AS n FROM posts") === 11 &&
          await count(store, "SELECT count(*) AS n FROM reposts") === 0;
      }
      return done && ca !== null && ca === await b.store.state.readCursor(CURSOR_LOCAL_SEQ)
        ? ca
        : null;
    }, { timeoutMs: 10_000 });
    // Push is asynchronous: wait until it has delivered the handles too.
    await waitFor(async () =>
      await count(a.ctx.store, "SELECT count(*) AS n FROM profiles WHERE handle IS NOT NULL") === 2
    );
    const opts = {
      exclude: ["consumer_status", "ingest_skips", "schema_migrations"],
      // Only push carries handles (and the profile row's updated_at records the handle change).
      // Pushes travel in lanes by DID, so two accounts' posts may be inserted in either order:
      // row ids (and the search index's rowids, which are post ids) follow arrival order.
      omitColumns: ["handle", "updated_at", "id", "rowid"],
    };
    assert.deepEqual(await dumpIndex(a.ctx.store, opts), await b.dump(opts));
    assert.equal(await a.ctx.store.state.readCursor(CURSOR_LOCAL_SEQ), head);
    const handles = (await indexRows<{ handle: string }>(
      a.ctx.store,
      "SELECT DISTINCT handle FROM posts ORDER BY handle",
    )).map((r) => r.handle);
    assert.deepEqual(handles, ["alice.test", "bob.test"]);
  },
);

endBackendTests();
