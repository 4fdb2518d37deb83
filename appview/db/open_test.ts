import assert from "node:assert/strict";
import { DatabaseSync } from "node:sqlite";
import { makeTempDir } from "../../runtime/_test_helpers.ts";
import { NotificationView } from "../views/notifications.ts";
import { MIGRATIONS, runMigrations, schemaVersion } from "./migrations.ts";
import { BUSY_TIMEOUT_MS, openIndexDb, WAL_AUTOCHECKPOINT_PAGES } from "./open.ts";
import {
  CURSOR_LOCAL_SEQ,
  CURSOR_PUBLIC_TIME_US,
  readConsumerStatus,
  readCursor,
  writeConsumerStatus,
  writeCursor,
} from "./state.ts";

const TABLES = [
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
  "posts_fts",
  "profiles",
  "repo_revs",
  "reposts",
  "schema_migrations",
];

function tableNames(db: DatabaseSync): string[] {
  const rows = db.prepare(
    `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'
     AND name NOT LIKE 'posts_fts_%' ORDER BY name`,
  ).all() as { name: string }[];
  return rows.map((r) => r.name);
}

function pragma(db: DatabaseSync, name: string): unknown {
  return Object.values(db.prepare(`PRAGMA ${name}`).get() as Record<string, unknown>)[0];
}

Deno.test("openIndexDb creates every table on a file with WAL, NORMAL sync and a busy timeout", async () => {
  await using dir = await makeTempDir();
  const db = openIndexDb(`${dir.path}/index.sqlite`);
  try {
    assert.deepEqual(tableNames(db), TABLES);
    assert.equal(pragma(db, "journal_mode"), "wal");
    assert.equal(pragma(db, "synchronous"), 1); // NORMAL
    assert.equal(pragma(db, "busy_timeout"), BUSY_TIMEOUT_MS);
    assert.equal(pragma(db, "wal_autocheckpoint"), WAL_AUTOCHECKPOINT_PAGES);
    assert.equal(schemaVersion(db), MIGRATIONS.length);
  } finally {
    db.close();
  }
});

Deno.test("openIndexDb works on :memory:", () => {
  const db = openIndexDb(":memory:");
  try {
    assert.deepEqual(tableNames(db), TABLES);
    assert.equal(pragma(db, "journal_mode"), "memory");
  } finally {
    db.close();
  }
});

Deno.test("reopening the database runs no migration twice", async () => {
  await using dir = await makeTempDir();
  const path = `${dir.path}/index.sqlite`;
  openIndexDb(path).close();
  const db = openIndexDb(path);
  try {
    assert.deepEqual(runMigrations(db), []);
    const rows = db.prepare("SELECT version, name FROM schema_migrations ORDER BY version").all();
    assert.deepEqual(
      rows.map((r) => ({ ...r })),
      MIGRATIONS.map(({ version, name }) => ({ version, name })),
    );
    assert.equal(schemaVersion(db), MIGRATIONS.length);
  } finally {
    db.close();
  }
});

Deno.test("runMigrations applies only the steps newer than user_version, in order", () => {
  const db = new DatabaseSync(":memory:");
  try {
    const v1 = { version: 1, name: "one", sql: "CREATE TABLE a (x)" };
    const v2 = { version: 2, name: "two", sql: "ALTER TABLE a ADD COLUMN y" };
    assert.deepEqual(runMigrations(db, { migrations: [v1] }), [1]);
    assert.deepEqual(runMigrations(db, { migrations: [v1, v2] }), [2]);
    assert.deepEqual(runMigrations(db, { migrations: [v1, v2] }), []);
    const cols = db.prepare("PRAGMA table_info(a)").all().map((c) => c.name);
    assert.deepEqual(cols, ["x", "y"]);
  } finally {
    db.close();
  }
});

Deno.test("runMigrations rolls back a failing step and leaves the version unchanged", () => {
  const db = new DatabaseSync(":memory:");
  try {
    const bad = { version: 1, name: "bad", sql: "CREATE TABLE a (x); CREATE TABLE a (x)" };
    assert.throws(() => runMigrations(db, { migrations: [bad] }), /already exists/);
    assert.equal(schemaVersion(db), 0);
    assert.equal(db.isTransaction, false);
    assert.equal(
      db.prepare("SELECT count(*) AS n FROM sqlite_master WHERE name = 'a'").get()?.n,
      0,
    );
  } finally {
    db.close();
  }
});

Deno.test("runMigrations refuses a database newer than the code", () => {
  const db = new DatabaseSync(":memory:");
  try {
    const newer = MIGRATIONS.length + 1;
    db.exec(`PRAGMA user_version = ${newer}`);
    assert.throws(
      () => runMigrations(db),
      {
        message: `Database schema version ${newer} is newer than this code (${MIGRATIONS.length})`,
      },
    );
  } finally {
    db.close();
  }
});

Deno.test("local seq and public time_us cursors live in separate rows (spec 6.2 rule 2)", () => {
  const db = openIndexDb(":memory:");
  try {
    assert.equal(readCursor(db, CURSOR_LOCAL_SEQ), null);
    writeCursor(db, CURSOR_PUBLIC_TIME_US, 1_725_000_000_000_000);
    writeCursor(db, CURSOR_LOCAL_SEQ, 42);
    writeCursor(db, CURSOR_LOCAL_SEQ, 43);
    assert.equal(readCursor(db, CURSOR_LOCAL_SEQ), 43);
    assert.equal(readCursor(db, CURSOR_PUBLIC_TIME_US), 1_725_000_000_000_000);
    assert.throws(() => writeCursor(db, CURSOR_LOCAL_SEQ, 1.5), RangeError);
  } finally {
    db.close();
  }
});

Deno.test("consumer status rows round-trip and upsert", () => {
  const db = openIndexDb(":memory:");
  try {
    assert.equal(readConsumerStatus(db, "local"), null);
    const status = {
      name: "local",
      state: "backoff" as const,
      cursor: 7,
      lastEventAt: "2024-05-01T12:00:00.000Z",
      lastError: "Connection refused: ws://127.0.0.1:1",
      updatedAt: "2024-05-01T12:00:01.000Z",
    };
    writeConsumerStatus(db, { ...status, state: "connecting" });
    writeConsumerStatus(db, status);
    assert.deepEqual(readConsumerStatus(db, "local"), status);
  } finally {
    db.close();
  }
});

Deno.test("migration 5 interns the DIDs of a version 4 database and keeps every fact", () => {
  const db = new DatabaseSync(":memory:");
  try {
    runMigrations(db, { migrations: MIGRATIONS.slice(0, 4) });
    const post = (did: string, rkey: string) => `at://${did}/app.social.feed.post/${rkey}`;
    const [A, B, C] = ["did:plc:aaa", "did:plc:bbb", "did:plc:ccc"];
    db.exec(`
      INSERT INTO posts (uri, did, handle, rkey, collection, text, cid, created_at, like_count,
        indexed_at) VALUES ('${post(A, "p1")}', '${A}', 'a.test', 'p1', 'app.social.feed.post',
        'hi', 'c1', 't0', 1, 't1');
      INSERT INTO likes VALUES ('${B}', 'l1', '${post(A, "p1")}', 'c1', 't0', 't1'),
        ('${B}', 'l2', 'at://${A}/app.social.feed.repost/r9', 'c2', 't0', 't1'),
        ('${C}', 'l3', 'at://a.test/app.social.feed.post/p1', 'c1', 't0', 't1');
      INSERT INTO reposts VALUES ('${C}', 'r1', '${post(A, "p1")}', 'c1', 't0', 't1');
      INSERT INTO follows VALUES ('${B}', '${A}', 'f1', 't0', 't1');
      INSERT INTO notifications (recipient_did, kind, author_did, subject_uri, record_uri,
        created_at, indexed_at, read_at) VALUES
        ('${A}', 'like', '${B}', '${post(A, "p1")}', 'at://${B}/app.social.feed.like/l1', 't0',
          't1', 't5'),
        ('${A}', 'reply', '${C}', '${post(C, "rr")}', '${post(C, "rr")}', 't0', 't2', NULL),
        ('${A}', 'follow', '${B}', NULL, 'at://${B}/app.social.graph.follow/f1', 't0', 't3', NULL);
    `);
    assert.deepEqual(runMigrations(db, { migrations: MIGRATIONS.slice(0, 5) }), [5]);
    const all = (sql: string) => db.prepare(sql).all().map((r) => ({ ...r }));
    assert.deepEqual(all("SELECT id, did FROM actors ORDER BY id"), [
      { id: 1, did: A },
      { id: 2, did: B },
      { id: 3, did: C },
    ]);
    assert.deepEqual(all("SELECT id, author, rkey, uri, did, like_count FROM posts"), [
      { id: 1, author: 1, rkey: "p1", uri: post(A, "p1"), did: A, like_count: 1 },
    ]);
    // The like of a repost and the like through a handle authority named no post: dropped.
    assert.deepEqual(all("SELECT actor, rkey, subject_author, subject_rkey FROM likes"), [
      { actor: 2, rkey: "l1", subject_author: 1, subject_rkey: "p1" },
    ]);
    assert.deepEqual(all("SELECT actor, rkey, subject_author, subject_rkey FROM reposts"), [
      { actor: 3, rkey: "r1", subject_author: 1, subject_rkey: "p1" },
    ]);
    assert.deepEqual(all("SELECT follower, subject, rkey FROM follows"), [
      { follower: 2, subject: 1, rkey: "f1" },
    ]);
    assert.deepEqual(
      all(`SELECT id, recipient, kind, author, author_did, subject_uri, subject_author,
             subject_rkey, read_at FROM notifications ORDER BY id`),
      [
        {
          id: 1,
          recipient: 1,
          kind: "like",
          author: 2,
          author_did: B,
          subject_uri: post(A, "p1"),
          subject_author: 1,
          subject_rkey: "p1",
          read_at: "t5",
        },
        {
          id: 2,
          recipient: 1,
          kind: "reply",
          author: 3,
          author_did: C,
          subject_uri: post(C, "rr"),
          subject_author: 3,
          subject_rkey: "rr",
          read_at: null,
        },
        {
          id: 3,
          recipient: 1,
          kind: "follow",
          author: 2,
          author_did: B,
          subject_uri: null,
          subject_author: null,
          subject_rkey: null,
          read_at: null,
        },
      ],
    );
    const indexes = all(
      "SELECT name FROM sqlite_master WHERE type = 'index' AND name NOT LIKE 'sqlite_%' ORDER BY name",
    ).map((r) => r.name);
    assert.deepEqual(indexes, [
      "follows_by_follower",
      "follows_by_rkey",
      "follows_by_subject",
      "likes_by_subject",
      "notifications_by_recipient",
      "notifications_dedupe",
      "notifications_unread",
      "posts_by_author",
      "posts_by_key",
      "posts_by_parent",
      "posts_by_time",
      "posts_unknown_handle",
      "profiles_by_handle",
      "reposts_by_subject",
    ]);
  } finally {
    db.close();
  }
});

/** Name, columns and sort direction (1 = DESC) of each index of `table`, by name. */
function indexShapes(db: DatabaseSync, table: string): Record<string, string[]> {
  const names = db.prepare(
    `SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND name NOT LIKE 'sqlite_%'
     ORDER BY name`,
  ).all(table) as { name: string }[];
  return Object.fromEntries(names.map(({ name }) => {
    const cols = db.prepare(`PRAGMA index_xinfo(${name})`).all() as {
      name: string | null;
      desc: number;
      key: number;
    }[];
    return [
      name,
      cols.filter((c) => c.key === 1).map((c) => `${c.name ?? "<expr>"}${c.desc ? " DESC" : ""}`),
    ];
  }));
}

Deno.test("migration 6 makes posts_by_time ascending and folds the unread index into the recipient index", () => {
  const db = new DatabaseSync(":memory:");
  try {
    runMigrations(db, { migrations: MIGRATIONS.slice(0, 5) });
    const [A, B] = ["did:plc:aaa", "did:plc:bbb"];
    db.exec(`
      INSERT INTO actors (id, did) VALUES (1, '${A}'), (2, '${B}');
      INSERT INTO posts (author, rkey, uri, did, handle, collection, text, cid, created_at,
        indexed_at) VALUES (1, 'p1', 'at://${A}/app.social.feed.post/p1', '${A}', 'a.test',
        'app.social.feed.post', 'hi', 'c1', 't0', '2026-01-01T00:00:01.000Z');
      INSERT INTO notifications (recipient, kind, author, author_did, subject_uri, subject_author,
        subject_rkey, record_uri, created_at, indexed_at, read_at) VALUES
        (1, 'like', 2, '${B}', 'at://${A}/app.social.feed.post/p1', 1, 'p1', 'l1', 't0',
          '2026-01-01T00:00:01.000Z', '2026-01-01T00:00:09.000Z'),
        (1, 'follow', 2, '${B}', NULL, NULL, NULL, 'f1', 't0', '2026-01-01T00:00:02.000Z', NULL),
        (1, 'repost', 2, '${B}', 'at://${A}/app.social.feed.post/p1', 1, 'p1', 'r1', 't0',
          '2026-01-01T00:00:03.000Z', NULL);
    `);
    assert.deepEqual(runMigrations(db, { migrations: MIGRATIONS.slice(0, 6) }), [6]);
    assert.equal(schemaVersion(db), 6);
    const shapes = indexShapes(db, "posts");
    assert.deepEqual(shapes.posts_by_time, ["indexed_at", "uri", "author"]);
    assert.deepEqual(indexShapes(db, "notifications"), {
      notifications_by_recipient: ["recipient", "indexed_at", "id", "read_at"],
      notifications_dedupe: ["recipient", "kind", "author", "<expr>"],
    });
    // Rows are untouched; the unread count and `seen` still see exactly the unread ones (the
    // view reads the latest schema: the later steps run first).
    assert.equal(db.prepare("SELECT count(*) AS n FROM posts").get()!.n, 1);
    runMigrations(db);
    const view = new NotificationView(db);
    assert.equal(view.unreadCount(A), 2);
    assert.equal(view.markSeen(A, "2026-01-01T00:00:02.000Z", "2026-01-02T00:00:00.000Z"), 1);
    assert.equal(view.unreadCount(A), 1);
    assert.deepEqual(view.list(A, { limit: 10, cursor: null }).rows.map((r) => [r.id, r.read_at]), [
      [3, null],
      [2, "2026-01-02T00:00:00.000Z"],
      [1, "2026-01-01T00:00:09.000Z"],
    ]);
  } finally {
    db.close();
  }
});

Deno.test("migration 8 adds blocks and mutes with the indexes their filters seek", () => {
  const db = new DatabaseSync(":memory:");
  try {
    runMigrations(db, { migrations: MIGRATIONS.slice(0, 7) });
    assert.deepEqual(runMigrations(db, { migrations: MIGRATIONS.slice(0, 8) }), [8]);
    assert.deepEqual(indexShapes(db, "blocks"), {
      blocks_by_pair: ["actor", "subject"],
      blocks_by_subject: ["subject"],
    });
    assert.deepEqual(indexShapes(db, "mutes"), {
      mutes_by_time: ["actor", "created_at", "subject"],
    });
  } finally {
    db.close();
  }
});

Deno.test("migration 9 adds inactive_actors keyed by the actor id its filter seeks", () => {
  const db = new DatabaseSync(":memory:");
  try {
    runMigrations(db, { migrations: MIGRATIONS.slice(0, 8) });
    assert.deepEqual(runMigrations(db, { migrations: MIGRATIONS.slice(0, 9) }), [9]);
    const pk = db.prepare("SELECT name FROM pragma_table_info('inactive_actors') WHERE pk = 1")
      .all().map((r) => r.name);
    assert.deepEqual(pk, ["actor"]);
    const plan = db.prepare(
      "EXPLAIN QUERY PLAN SELECT EXISTS (SELECT 1 FROM inactive_actors WHERE actor = 1)",
    ).all().map((r) => String(r.detail));
    assert.ok(plan.some((d) => d.includes("INTEGER PRIMARY KEY (rowid=?)")), plan.join("; "));
  } finally {
    db.close();
  }
});

Deno.test("migration 10 marks existing revs as not from the account host and adds the backfill queue and status", () => {
  const db = new DatabaseSync(":memory:");
  try {
    runMigrations(db, { migrations: MIGRATIONS.slice(0, 9) });
    db.prepare("INSERT INTO repo_revs (did, rev) VALUES ('did:plc:a', '3kaaaaaaaaaa2')").run();
    assert.deepEqual(runMigrations(db, { migrations: MIGRATIONS.slice(0, 10) }), [10]);
    assert.deepEqual({ ...db.prepare("SELECT did, rev, local FROM repo_revs").get() }, {
      did: "did:plc:a",
      rev: "3kaaaaaaaaaa2",
      local: 0,
    });
    const plan = db.prepare(
      `EXPLAIN QUERY PLAN SELECT did FROM backfill_queue WHERE not_before <= '2024'
       ORDER BY not_before, did LIMIT 2`,
    ).all().map((r) => String(r.detail));
    assert.ok(plan.some((d) => d.includes("backfill_queue_due")), plan.join("; "));
    assert.ok(!plan.some((d) => d.includes("TEMP B-TREE")), plan.join("; "));
  } finally {
    db.close();
  }
});
