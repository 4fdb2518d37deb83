/**
 * Moving an index from SQLite to PostgreSQL (docs/operations.md, "Running the index on
 * PostgreSQL"; issue 40): `deno task backfill --all` with `APPVIEW_DATABASE_URL` set, under the
 * task's own permission set, rebuilds from the account host an index holding the rows of the
 * SQLite index that watched every commit.
 */

import assert from "node:assert/strict";
import {
  type Dump,
  dumpPgIndex,
  dumpSqliteIndex,
  freshPgDatabase,
  pgTest,
  stopPgClusterAfterTests,
} from "../appview/db/pg/_test_helpers.ts";
import { openPgIndex } from "../appview/db/pg/open.ts";
import { openTestContext, sqliteOf } from "../appview/_test_helpers.ts";
import { CURSOR_LOCAL_SEQ, readCursor } from "../appview/db/state.ts";
import { createLocalStreamConsumer } from "../appview/ingest/sources/local_stream.ts";
import { signUp, startTestServer, xrpcPost } from "../pds/_test_helpers.ts";
import { readHeadSeq } from "../pds/sequencer/event_log.ts";
import {
  COLLECTION_BLOCK,
  COLLECTION_FOLLOW,
  COLLECTION_LIKE,
  COLLECTION_POST,
  COLLECTION_PROFILE,
  COLLECTION_REPOST,
} from "../shared/nsid.ts";
import { baseEnv, REPO_ROOT, waitFor } from "./_util.ts";

type Member = { did: string; accessJwt: string };

async function write(url: string, who: Member, method: string, body: Record<string, unknown>) {
  const res = await xrpcPost(url, `com.atproto.repo.${method}`, { repo: who.did, ...body }, {
    authorization: `Bearer ${who.accessJwt}`,
  });
  const json = await res.json();
  assert.equal(res.status, 200, JSON.stringify(json));
  return json as { uri: string; cid: string };
}

function create(url: string, who: Member, collection: string, record: Record<string, unknown>) {
  return write(url, who, "createRecord", {
    collection,
    record: { $type: collection, createdAt: new Date().toISOString(), ...record },
  });
}

/** Stream bookkeeping, and what depends on when a row was indexed (ids follow indexing order). */
const EXCLUDED = [
  "consumer_status",
  "cursors",
  "ingest_skips",
  "schema_migrations",
  "backfill_queue",
  "backfill_status",
];
const OMITTED = ["id", "indexed_at", "updated_at", "handle_attempted_at"];

function content(dump: Dump): Dump {
  const out: Dump = {};
  for (const [table, rows] of Object.entries(dump)) {
    if (EXCLUDED.includes(table)) continue;
    out[table] = rows
      .map((row) => Object.fromEntries(Object.entries(row).filter(([k]) => !OMITTED.includes(k))))
      .sort((a, b) => {
        const x = JSON.stringify(a);
        const y = JSON.stringify(b);
        return x < y ? -1 : x > y ? 1 : 0;
      });
  }
  return out;
}

pgTest(
  "deno task backfill --all rebuilds an SQLite index's rows in an empty PostgreSQL database",
  async () => {
    await using pds = await startTestServer();
    using watched = openTestContext({ env: { PDS_PUBLIC_URL: pds.url } });
    await using stream = createLocalStreamConsumer(watched, {
      url: `${pds.url.replace(/^http/, "ws")}/xrpc/com.atproto.sync.subscribeRepos`,
    });
    await stream.start();
    const [alice, bob, carol] = await Promise.all(
      ["alice", "bob", "carol"].map((name) => signUp(pds.url, `${name}.test`)),
    );
    const posts = [];
    for (let i = 0; i < 9; i++) {
      const who = [alice, bob, carol][i % 3];
      posts.push(await create(pds.url, who, COLLECTION_POST, { text: `post ${i} café` }));
    }
    const first = { uri: posts[0].uri, cid: posts[0].cid };
    await write(pds.url, alice, "putRecord", {
      collection: COLLECTION_PROFILE,
      rkey: "self",
      record: { $type: COLLECTION_PROFILE, displayName: "Alice" },
    });
    await create(pds.url, bob, COLLECTION_LIKE, { subject: first });
    await create(pds.url, carol, COLLECTION_REPOST, { subject: first });
    await create(pds.url, bob, COLLECTION_FOLLOW, { subject: alice.did });
    await create(pds.url, carol, COLLECTION_FOLLOW, { subject: alice.did });
    await create(pds.url, bob, COLLECTION_POST, {
      text: "a reply",
      reply: { root: first, parent: first },
    });
    await create(pds.url, carol, COLLECTION_BLOCK, { subject: bob.did });
    const head = await readHeadSeq(pds.ctx.kv);
    const db = sqliteOf(watched);
    await waitFor(() => readCursor(db, CURSOR_LOCAL_SEQ) === head, { timeoutMs: 10_000 });

    const url = await freshPgDatabase();
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["run", "--quiet", "-P=appview", "scripts/backfill.ts", "--all"],
      cwd: REPO_ROOT.pathname,
      env: { ...baseEnv(), APPVIEW_DATABASE_URL: url, PDS_PUBLIC_URL: pds.url, LOG_LEVEL: "warn" },
      clearEnv: true,
      stdout: "piped",
      stderr: "piped",
    }).output();
    const stdout = new TextDecoder().decode(out.stdout);
    assert.equal(out.code, 0, `${stdout}\n${new TextDecoder().decode(out.stderr)}`);
    assert.match(stdout, /^Backfill done in [\d.]+ s: 3 repositories applied \(16 records, /m);

    const sql = await openPgIndex(url, { max: 1, migrate: false });
    try {
      const want = content(dumpSqliteIndex(db));
      const got = content(await dumpPgIndex(sql));
      for (const table of Object.keys(want)) {
        assert.deepEqual(got[table], want[table], `table ${table}`);
      }
      assert.equal(want.posts.length, 10);
      assert.equal(want.notifications.length, 5);
    } finally {
      await sql.end();
    }
  },
);

stopPgClusterAfterTests();
