import assert from "node:assert/strict";
import {
  locatePostgres,
  POSTGRES_SKIP_MESSAGE,
  type PostgresCluster,
  startPostgres,
} from "../../../runtime/_postgres.ts";
import { MIGRATIONS } from "../migrations.ts";
import { openPgIndex } from "./open.ts";
import { PG_MIGRATIONS, pgSchemaVersion } from "./migrations.ts";
import { SEARCH_QUERY_SQL, SEARCH_VECTOR_SQL } from "./schema.ts";

const install = await locatePostgres();
if (install === null) console.warn(POSTGRES_SKIP_MESSAGE);

/** One cluster for the file (about 0.6 s to start), a database per test. */
let cluster: PostgresCluster | null = null;
let databases = 0;
async function freshDatabase(): Promise<string> {
  cluster ??= await startPostgres({ install: install! });
  return await cluster!.createDatabase(`pg_open_${++databases}`);
}

function pgTest(name: string, fn: () => Promise<void>) {
  Deno.test({ name, ignore: install === null, fn, sanitizeResources: false, sanitizeOps: false });
}

const AT = new Date("2026-01-02T03:04:05.000Z");

pgTest("migrations from empty create SQLite's tables at SQLite's version", async () => {
  const url = await freshDatabase();
  const sql = await openPgIndex(url, { now: () => AT, max: 2 });
  try {
    assert.equal(await pgSchemaVersion(sql), MIGRATIONS[MIGRATIONS.length - 1].version);
    assert.equal(PG_MIGRATIONS[PG_MIGRATIONS.length - 1].version, 11);
    const rows = await sql`SELECT version, name, applied_at FROM schema_migrations
      ORDER BY version`;
    assert.deepEqual(rows.map((r) => ({ ...r })), [{
      version: 10,
      name: "initial PostgreSQL schema, equal to SQLite version 10",
      applied_at: AT.toISOString(),
    }, {
      version: 11,
      name: "search vector stored in posts",
      applied_at: AT.toISOString(),
    }]);
    const tables = await sql`SELECT table_name FROM information_schema.tables
      WHERE table_schema = current_schema() ORDER BY table_name`;
    assert.deepEqual(tables.map((t) => t.table_name), [
      "actors",
      "backfill_queue",
      "backfill_status",
      "blocks",
      "consumer_status",
      "cursors",
      "follows",
      "inactive_actors",
      "ingest_skips",
      "likes",
      "mutes",
      "notifications",
      "posts",
      "profiles",
      "repo_revs",
      "reposts",
      "schema_migrations",
    ]);
    // The same indexes by name as SQLite (posts_search stands for posts_fts).
    const indexes = await sql`SELECT indexname FROM pg_indexes
      WHERE schemaname = current_schema() AND indexname NOT LIKE '%_pkey'
      ORDER BY indexname`;
    assert.deepEqual(indexes.map((i) => i.indexname), [
      "actors_did_key",
      "backfill_queue_due",
      "blocks_by_pair",
      "blocks_by_subject",
      "follows_by_follower",
      "follows_by_rkey",
      "follows_by_subject",
      "likes_by_subject",
      "mutes_by_time",
      "notifications_by_recipient",
      "notifications_dedupe",
      "posts_by_author",
      "posts_by_key",
      "posts_by_parent",
      "posts_by_time",
      "posts_search",
      "posts_unknown_handle",
      "profiles_by_handle",
      "reposts_by_subject",
    ]);
    // Ids come back as numbers, text orders by bytes whatever the database's default.
    const [id] = await sql`INSERT INTO actors (did) VALUES ('did:plc:a') RETURNING id`;
    assert.equal(id.id, 1);
    const [{ n }] = await sql`SELECT count(*) AS n FROM actors`;
    assert.equal(n, 1);
    await sql`INSERT INTO cursors VALUES ('public_time_us', 1700000000000000, '~')`;
    const [{ value }] = await sql`SELECT value FROM cursors`;
    assert.equal(value, 1700000000000000);
  } finally {
    await sql.end();
  }
});

pgTest("re-running migrations changes nothing, also from processes opening at once", async () => {
  const url = await freshDatabase();
  // Several pools migrating the same empty database at the same time: each step runs once.
  const pools = await Promise.all([1, 2, 3, 4, 5].map(() => openPgIndex(url, { max: 1 })));
  try {
    for (const sql of pools) assert.equal(await pgSchemaVersion(sql), 11);
    const [{ n }] = await pools[0]`SELECT count(*) AS n FROM schema_migrations`;
    assert.equal(n, 2);
    const again = await openPgIndex(url, { max: 1 });
    await again.end();
    const [{ m }] = await pools[0]`SELECT count(*) AS m FROM schema_migrations`;
    assert.equal(m, 2);
  } finally {
    await Promise.all(pools.map((p) => p.end()));
  }
});

pgTest("a database newer than the code is refused, and a later step is applied once", async () => {
  const url = await freshDatabase();
  const later = [...PG_MIGRATIONS, {
    version: 12,
    name: "a later step",
    apply: async (tx: Parameters<(typeof PG_MIGRATIONS)[number]["apply"]>[0]) => {
      await tx.unsafe("CREATE TABLE later_step (x integer)");
    },
  }];
  const sql = await openPgIndex(url, { migrations: later, max: 1 });
  try {
    assert.equal(await pgSchemaVersion(sql), 12);
    // Reopened by code that has the step: nothing runs again (the table would exist).
    await (await openPgIndex(url, { migrations: later, max: 1 })).end();
  } finally {
    await sql.end();
  }
  await assert.rejects(
    openPgIndex(url, { max: 1 }),
    /Database schema version 12 is newer than this code \(11\)/,
  );
});

pgTest("search normalises as FTS5's unicode61 with diacritics removed", async () => {
  const url = await freshDatabase();
  const sql = await openPgIndex(url, { max: 1 });
  try {
    const texts = [
      "Visit example.com today",
      "foo-bar baz",
      "Café NAÏVE",
      "bar foo",
      "emoji 😀 here",
      "Über straße",
    ];
    await sql`INSERT INTO actors (did) VALUES ('did:plc:a')`;
    for (const [i, text] of texts.entries()) {
      await sql`INSERT INTO posts (author, rkey, uri, did, handle, collection, text, cid,
        created_at, indexed_at) VALUES (1, ${"r" + i}, ${"at://did:plc:a/p/r" + i}, 'did:plc:a',
        'a.test', 'p', ${text}, 'c', 't', 't')`;
    }
    const search = async (...words: string[]) =>
      (await sql.unsafe(
        `SELECT rkey FROM posts WHERE ${SEARCH_VECTOR_SQL} @@ ${SEARCH_QUERY_SQL("$1")}
         ORDER BY id`,
        [words],
      )).map((r) => r.rkey);
    assert.deepEqual(await search("example"), ["r0"]);
    assert.deepEqual(await search("com"), ["r0"]);
    assert.deepEqual(await search("example.com"), ["r0"]);
    assert.deepEqual(await search("foo-bar"), ["r1"]); // a phrase: not "bar foo"
    assert.deepEqual(await search("foo", "bar"), ["r1", "r3"]); // words ANDed
    assert.deepEqual(await search("cafe"), ["r2"]);
    assert.deepEqual(await search("CAFÉ", "naive"), ["r2"]);
    assert.deepEqual(await search("uber"), ["r5"]);
    assert.deepEqual(await search("here"), ["r4"]);
    assert.deepEqual(await search("😀"), []); // no letters or digits: nothing
    assert.deepEqual(await search("here", "😀"), []);
    assert.deepEqual(await search(), []);
  } finally {
    await sql.end();
  }
});

pgTest("version 11 fills the stored search vector of posts written at version 10", async () => {
  const url = await freshDatabase();
  const v10 = await openPgIndex(url, { migrations: PG_MIGRATIONS.slice(0, 1), max: 1 });
  try {
    await v10`INSERT INTO actors (did) VALUES ('did:plc:a')`;
    await v10`INSERT INTO posts (author, rkey, uri, did, handle, collection, text, cid,
      created_at, indexed_at) VALUES (1, 'r0', 'at://did:plc:a/p/r0', 'did:plc:a', 'a.test', 'p',
      'Café au lait', 'c', 't', 't')`;
  } finally {
    await v10.end();
  }
  const sql = await openPgIndex(url, { max: 1 });
  try {
    assert.equal(await pgSchemaVersion(sql), 11);
    const found = await sql.unsafe(
      `SELECT rkey, ${SEARCH_VECTOR_SQL}::text AS v FROM posts
       WHERE ${SEARCH_VECTOR_SQL} @@ ${SEARCH_QUERY_SQL("$1")}`,
      [["cafe"]],
    );
    assert.deepEqual(found.map((r) => ({ ...r })), [{ rkey: "r0", v: "'au':2 'cafe':1 'lait':3" }]);
    const [{ def }] = await sql`SELECT indexdef AS def FROM pg_indexes
      WHERE indexname = 'posts_search'`;
    assert.match(def, /USING gin \(search_vector\)$/);
  } finally {
    await sql.end();
  }
});

pgTest("the index's connections run without JIT compilation", async () => {
  const sql = await openPgIndex(await freshDatabase(), { max: 2 });
  try {
    // Both connections of the pool, not only the first.
    const answers = await Promise.all([1, 2].map(() =>
      sql`SELECT current_setting('jit') AS jit,
      pg_backend_pid() AS pid, pg_sleep(0.05)`
    ));
    assert.deepEqual(answers.map(([r]) => r.jit), ["off", "off"]);
    assert.notEqual(answers[0][0].pid, answers[1][0].pid);
  } finally {
    await sql.end();
  }
});

pgTest("a database that does not exist is refused at open", async () => {
  const url = await freshDatabase();
  const wrong = url.replace(/\/[a-z_0-9]+$/, "/no_such_database");
  await assert.rejects(
    openPgIndex(wrong, { max: 1, connectTimeoutSeconds: 5 }),
    /database "no_such_database" does not exist/,
  );
});

Deno.test({
  name: "(stops the file's PostgreSQL cluster)",
  ignore: install === null,
  async fn() {
    await cluster?.stop();
  },
});
