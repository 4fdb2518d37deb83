/**
 * Ordered schema migrations of the index database. Each step runs once, inside its own
 * `BEGIN IMMEDIATE` transaction, and is recorded both in `schema_migrations` and in
 * `PRAGMA user_version`, so reopening a database (or two processes opening it at once) never runs
 * a step twice. Append new steps; never edit or reorder released ones.
 *
 * @module
 */

import type { DatabaseSync } from "node:sqlite";
import { SCHEMA_V1 } from "./schema.ts";

/** One schema step: its version (1, 2, ... without gaps), a name and the SQL to run. */
export interface Migration {
  readonly version: number;
  readonly name: string;
  readonly sql: string;
}

/**
 * Version 2, read-side index shapes (same number of indexes, so no extra write cost per row):
 * - `posts_by_time` also carries `did`, so the home timeline's walk of the global time index
 *   filters by author without a table lookup per row read;
 * - `posts_by_parent` also carries the reply order (`indexed_at`, `uri`), so a thread reads its
 *   first replies in order instead of sorting every reply of the post.
 */
const READ_INDEXES_V2 = `
DROP INDEX posts_by_time;
CREATE INDEX posts_by_time ON posts (indexed_at DESC, uri DESC, did);
DROP INDEX posts_by_parent;
CREATE INDEX posts_by_parent ON posts (parent_uri, indexed_at, uri) WHERE parent_uri IS NOT NULL;
`;

/**
 * Version 3, per-repository ordering of ingest: the rev of the latest commit applied for each
 * repository (`repo_revs`, see schema.ts). The write path reads it once per commit and writes it in
 * the transaction of the commit's ops, so a stale or early commit (a delayed push, a rewound
 * public stream) can no longer undo a later one.
 */
const REPO_REVS_V3 = `
CREATE TABLE repo_revs (
  did TEXT PRIMARY KEY,
  rev TEXT NOT NULL
) WITHOUT ROWID;
`;

/**
 * Version 4, one random-key index less per reply: `posts_by_root` served no query (threads walk
 * `parent_uri` through `posts_by_parent`; the root post is read by its URI), yet every reply paid
 * for its entry (`deno task bench ingest`).
 */
const DROP_ROOT_INDEX_V4 = `DROP INDEX IF EXISTS posts_by_root;`;

/**
 * Version 5, interned DIDs: every DID the hot, randomly keyed indexes hold becomes a small integer
 * (`actors.id`), and a post is identified by (author id, rkey) instead of its 60-90 character URI.
 * Index entries shrink several times, so an ingest transaction dirties and writes far fewer pages
 * (`deno task bench ingest`). Rows keep the text columns the views return (`posts.uri`,
 * `posts.did`, `notifications.author_did`, `subject_uri`, `record_uri`).
 *
 * Likes and reposts whose subject is not a post URI with a DID authority are dropped: they never
 * counted towards a post nor notified anyone, and the write path now skips them as invalid.
 */
const INTERNED_ACTORS_V5 = `
CREATE TABLE actors (
  id INTEGER PRIMARY KEY,
  did TEXT NOT NULL UNIQUE
);

CREATE TEMP TABLE v5_subjects AS
  WITH s AS (
    SELECT 'likes' AS tbl, did, rkey, subject_uri, subject_cid, created_at, indexed_at,
      substr(subject_uri, 6, instr(substr(subject_uri, 6), '/') - 1) AS d FROM likes
    UNION ALL
    SELECT 'reposts', did, rkey, subject_uri, subject_cid, created_at, indexed_at,
      substr(subject_uri, 6, instr(substr(subject_uri, 6), '/') - 1) FROM reposts)
  SELECT tbl, did, rkey, subject_cid, created_at, indexed_at, d,
    substr(subject_uri, 7 + length(d) + 21) AS subject_rkey
  FROM s
  WHERE d GLOB 'did:*' AND substr(subject_uri, 7 + length(d), 21) = 'app.social.feed.post/'
    AND substr(subject_uri, 7 + length(d) + 21) NOT IN ('', '/')
    AND instr(substr(subject_uri, 7 + length(d) + 21), '/') = 0;

INSERT OR IGNORE INTO actors (did)
  SELECT did FROM posts UNION SELECT did FROM v5_subjects UNION SELECT d FROM v5_subjects
  UNION SELECT follower FROM follows UNION SELECT subject FROM follows
  UNION SELECT recipient_did FROM notifications UNION SELECT author_did FROM notifications
  ORDER BY 1;

CREATE TABLE posts_v5 (
  id INTEGER PRIMARY KEY,
  author INTEGER NOT NULL,
  rkey TEXT NOT NULL,
  uri TEXT NOT NULL,
  did TEXT NOT NULL,
  handle TEXT NOT NULL,
  collection TEXT NOT NULL,
  text TEXT NOT NULL,
  cid TEXT NOT NULL,
  parent_uri TEXT,
  root_uri TEXT,
  embed TEXT,
  langs TEXT NOT NULL DEFAULT '[]',
  created_at TEXT NOT NULL,
  like_count INTEGER NOT NULL DEFAULT 0,
  repost_count INTEGER NOT NULL DEFAULT 0,
  avatar_cid TEXT,
  indexed_at TEXT NOT NULL,
  handle_attempted_at TEXT
);
INSERT INTO posts_v5 (id, author, rkey, uri, did, handle, collection, text, cid, parent_uri,
  root_uri, embed, langs, created_at, like_count, repost_count, avatar_cid, indexed_at,
  handle_attempted_at)
SELECT id, (SELECT a.id FROM actors a WHERE a.did = posts.did), rkey, uri, did, handle,
  collection, text, cid, parent_uri, root_uri, embed, langs, created_at, like_count,
  repost_count, avatar_cid, indexed_at, handle_attempted_at
FROM posts;
DROP TABLE posts;
ALTER TABLE posts_v5 RENAME TO posts;
CREATE UNIQUE INDEX posts_by_key ON posts (author, rkey);
CREATE INDEX posts_by_time ON posts (indexed_at DESC, uri DESC, author);
CREATE INDEX posts_by_author ON posts (author, indexed_at DESC, uri DESC);
CREATE INDEX posts_by_parent ON posts (parent_uri, indexed_at, uri) WHERE parent_uri IS NOT NULL;
CREATE INDEX posts_unknown_handle ON posts (author, handle_attempted_at)
  WHERE handle GLOB 'did:*';

DROP TABLE likes;
DROP TABLE reposts;
CREATE TABLE likes (
  actor INTEGER NOT NULL,
  rkey TEXT NOT NULL,
  subject_author INTEGER NOT NULL,
  subject_rkey TEXT NOT NULL,
  subject_cid TEXT NOT NULL,
  created_at TEXT NOT NULL,
  indexed_at TEXT NOT NULL,
  PRIMARY KEY (actor, rkey)
) WITHOUT ROWID;
CREATE INDEX likes_by_subject ON likes (subject_author, subject_rkey, actor);
CREATE TABLE reposts (
  actor INTEGER NOT NULL,
  rkey TEXT NOT NULL,
  subject_author INTEGER NOT NULL,
  subject_rkey TEXT NOT NULL,
  subject_cid TEXT NOT NULL,
  created_at TEXT NOT NULL,
  indexed_at TEXT NOT NULL,
  PRIMARY KEY (actor, rkey)
) WITHOUT ROWID;
CREATE INDEX reposts_by_subject ON reposts (subject_author, subject_rkey, actor);
INSERT INTO likes
  SELECT (SELECT id FROM actors WHERE did = s.did), rkey, (SELECT id FROM actors WHERE did = s.d),
    subject_rkey, subject_cid, created_at, indexed_at
  FROM v5_subjects s WHERE tbl = 'likes';
INSERT INTO reposts
  SELECT (SELECT id FROM actors WHERE did = s.did), rkey, (SELECT id FROM actors WHERE did = s.d),
    subject_rkey, subject_cid, created_at, indexed_at
  FROM v5_subjects s WHERE tbl = 'reposts';
DROP TABLE v5_subjects;

CREATE TABLE follows_v5 (
  follower INTEGER NOT NULL,
  subject INTEGER NOT NULL,
  rkey TEXT,
  created_at TEXT NOT NULL,
  indexed_at TEXT NOT NULL,
  PRIMARY KEY (follower, subject)
) WITHOUT ROWID;
INSERT INTO follows_v5
  SELECT (SELECT id FROM actors WHERE did = f.follower), (SELECT id FROM actors WHERE did = f.subject),
    rkey, created_at, indexed_at
  FROM follows f;
DROP TABLE follows;
ALTER TABLE follows_v5 RENAME TO follows;
CREATE UNIQUE INDEX follows_by_rkey ON follows (follower, rkey) WHERE rkey IS NOT NULL;
CREATE INDEX follows_by_subject ON follows (subject, indexed_at DESC, follower DESC);
CREATE INDEX follows_by_follower ON follows (follower, indexed_at DESC, subject DESC);

CREATE TABLE notifications_v5 (
  id INTEGER PRIMARY KEY,
  recipient INTEGER NOT NULL,
  kind TEXT NOT NULL,
  author INTEGER NOT NULL,
  author_did TEXT NOT NULL,
  subject_uri TEXT,
  subject_author INTEGER,
  subject_rkey TEXT,
  record_uri TEXT NOT NULL,
  created_at TEXT NOT NULL,
  indexed_at TEXT NOT NULL,
  read_at TEXT
);
-- Old rows that the new key makes equal are kept once (the oldest).
CREATE UNIQUE INDEX notifications_v5_dedupe
  ON notifications_v5 (recipient, kind, author, ifnull(subject_rkey, ''));
INSERT OR IGNORE INTO notifications_v5
  SELECT n.id, (SELECT id FROM actors WHERE did = n.recipient_did), n.kind,
    (SELECT id FROM actors WHERE did = n.author_did), n.author_did, n.subject_uri,
    CASE WHEN n.subject_uri IS NULL THEN NULL
      WHEN n.kind = 'reply' THEN (SELECT id FROM actors WHERE did = n.author_did)
      ELSE (SELECT id FROM actors WHERE did = n.recipient_did) END,
    -- The record key: what follows the last '/'.
    substr(n.subject_uri, length(rtrim(n.subject_uri, replace(n.subject_uri, '/', ''))) + 1),
    n.record_uri, n.created_at, n.indexed_at, n.read_at
  FROM notifications n ORDER BY n.id;
DROP TABLE notifications;
ALTER TABLE notifications_v5 RENAME TO notifications;
DROP INDEX notifications_v5_dedupe;
CREATE UNIQUE INDEX notifications_dedupe
  ON notifications (recipient, kind, author, ifnull(subject_rkey, ''));
CREATE INDEX notifications_by_recipient
  ON notifications (recipient, indexed_at DESC, id DESC);
CREATE INDEX notifications_unread
  ON notifications (recipient, indexed_at) WHERE read_at IS NULL;
`;

/**
 * Version 6, fewer and cheaper index writes per ingested op (`deno task bench ingest`):
 * - `posts_by_time` is ascending. New posts carry the newest `indexed_at`, so an ascending index
 *   appends at its right edge, where SQLite packs pages full; the descending one inserted at its
 *   left edge and split half-full pages. Reads walk it backwards: the same order, no sort.
 * - `notifications_unread` is folded into `notifications_by_recipient`, which now ends with
 *   `read_at`: every notification starts unread, so the partial index took an entry in a second
 *   randomly keyed B-tree per notification. The unread count and `seen` read the recipient's
 *   range of the one index (covering for both filters).
 */
const FEWER_INDEX_WRITES_V6 = `
DROP INDEX posts_by_time;
CREATE INDEX posts_by_time ON posts (indexed_at, uri, author);
DROP INDEX notifications_unread;
DROP INDEX notifications_by_recipient;
CREATE INDEX notifications_by_recipient ON notifications (recipient, indexed_at, id, read_at);
`;

/**
 * Version 7, when each stream consumer last stopped being live (`consumer_status.down_since`,
 * kept by `writeConsumerStatus`): `/healthz` answers 503 once a consumer has been connecting or
 * backing off for longer than `APPVIEW_HEALTH_STALL_SECONDS` (issue 36).
 */
const CONSUMER_DOWN_SINCE_V7 = `ALTER TABLE consumer_status ADD COLUMN down_since TEXT;`;

/**
 * Version 8, member safety (issue 37, spec 4.2 rules 10-11):
 * - `blocks`, one row per `app.social.graph.block` record, keyed by (blocker, rkey) so a delete
 *   event (did, rkey) finds its row; `blocks_by_pair` answers "does A block B" in one seek, in
 *   both directions, for the read side's `NOT EXISTS` filters; `blocks_by_subject` tells whether
 *   anyone blocks an account, so a member no block or mute concerns reads the unfiltered plans;
 * - `mutes`, private to the member and written by `/api/mutes` only, keyed by (member, muted);
 *   `mutes_by_time` pages a member's list newest first.
 */
const MEMBER_SAFETY_V8 = `
CREATE TABLE blocks (
  actor INTEGER NOT NULL,
  rkey TEXT NOT NULL,
  subject INTEGER NOT NULL,
  created_at TEXT NOT NULL,
  indexed_at TEXT NOT NULL,
  PRIMARY KEY (actor, rkey)
) WITHOUT ROWID;
CREATE INDEX blocks_by_pair ON blocks (actor, subject);
CREATE INDEX blocks_by_subject ON blocks (subject);
CREATE TABLE mutes (
  actor INTEGER NOT NULL,
  subject INTEGER NOT NULL,
  created_at TEXT NOT NULL,
  PRIMARY KEY (actor, subject)
) WITHOUT ROWID;
CREATE INDEX mutes_by_time ON mutes (actor, created_at, subject);
`;

/**
 * Version 9, account status (issue 37, spec 4.2 rule 12): one row per inactive account (taken
 * down, deactivated, ...), keyed by its interned id so the read side's `NOT EXISTS` filter is one
 * seek on the primary key per candidate row; an active status deletes the row.
 */
const INACTIVE_ACTORS_V9 = `
CREATE TABLE inactive_actors (
  actor INTEGER PRIMARY KEY,
  status TEXT,
  updated_at TEXT NOT NULL
);
`;

/**
 * Version 10, backfill from repositories (issue 38, docs/behaviour.md 6.2 rules 8-11):
 * - `repo_revs.local`: 1 once the account host's stream, its push or a backfill from it applied a
 *   commit of the repository (written in the statement that already writes the rev), so the
 *   index can tell the account host's repositories from those it only saw on the public stream
 *   when the host no longer lists one (restored from an older backup);
 * - `backfill_queue`: the repositories to fetch, one row per DID (so bounded by the repositories
 *   the index knows), written by the write path in the transaction of the commit that revealed a
 *   gap, so a crash never loses one; `not_before` orders the work and holds a failed fetch's
 *   backoff;
 * - `backfill_status`: one row per backfill worker (`local`): totals, the last error, and the last
 *   time the account host was found restored (its head behind the index's cursor), which
 *   `/healthz` reports.
 */
const BACKFILL_V10 = `
ALTER TABLE repo_revs ADD COLUMN local INTEGER NOT NULL DEFAULT 0;
CREATE TABLE backfill_queue (
  did TEXT PRIMARY KEY,
  reason TEXT NOT NULL,
  target_rev TEXT,
  attempts INTEGER NOT NULL DEFAULT 0,
  not_before TEXT NOT NULL,
  last_error TEXT,
  queued_at TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX backfill_queue_due ON backfill_queue (not_before, did);
CREATE TABLE backfill_status (
  name TEXT PRIMARY KEY,
  done INTEGER NOT NULL DEFAULT 0,
  failed INTEGER NOT NULL DEFAULT 0,
  records INTEGER NOT NULL DEFAULT 0,
  last_did TEXT,
  last_error TEXT,
  last_done_at TEXT,
  restored_at TEXT,
  restored_cursor INTEGER,
  restored_head INTEGER,
  updated_at TEXT NOT NULL
) WITHOUT ROWID;
`;

/** Every migration, in order. */
export const MIGRATIONS: readonly Migration[] = Object.freeze([
  { version: 1, name: "initial schema", sql: SCHEMA_V1 },
  { version: 2, name: "covering timeline and reply indexes", sql: READ_INDEXES_V2 },
  { version: 3, name: "latest applied rev per repository", sql: REPO_REVS_V3 },
  { version: 4, name: "drop the unused root-post index", sql: DROP_ROOT_INDEX_V4 },
  { version: 5, name: "interned DIDs in the hot indexes", sql: INTERNED_ACTORS_V5 },
  { version: 6, name: "fewer index writes per op", sql: FEWER_INDEX_WRITES_V6 },
  { version: 7, name: "when each consumer stopped being live", sql: CONSUMER_DOWN_SINCE_V7 },
  { version: 8, name: "blocks and mutes", sql: MEMBER_SAFETY_V8 },
  { version: 9, name: "inactive accounts", sql: INACTIVE_ACTORS_V9 },
  { version: 10, name: "backfill from repositories", sql: BACKFILL_V10 },
  {
    version: 11,
    name: "search vector stored in posts (PostgreSQL; nothing changes on SQLite)",
    sql: "",
  },
]);

const CREATE_MIGRATIONS_TABLE = `CREATE TABLE IF NOT EXISTS schema_migrations (
  version INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  applied_at TEXT NOT NULL
)`;

/** Returns `PRAGMA user_version`: the last migration applied. */
export function schemaVersion(db: DatabaseSync): number {
  const row = db.prepare("PRAGMA user_version").get() as { user_version: number };
  return row.user_version;
}

/**
 * Applies the migrations newer than the database's `user_version`, in order, each in its own
 * transaction. Returns the versions applied by this call (empty when up to date).
 *
 * @throws Error when the database is newer than this code knows (a downgrade)
 */
export function runMigrations(
  db: DatabaseSync,
  opts: { migrations?: readonly Migration[]; now?: () => Date } = {},
): number[] {
  const migrations = opts.migrations ?? MIGRATIONS;
  const now = opts.now ?? (() => new Date());
  const latest = migrations.length === 0 ? 0 : migrations[migrations.length - 1].version;
  const applied: number[] = [];
  if (schemaVersion(db) > latest) {
    throw new Error(
      `Database schema version ${schemaVersion(db)} is newer than this code (${latest})`,
    );
  }
  for (const step of migrations) {
    if (schemaVersion(db) >= step.version) continue; // cheap check outside the lock
    db.exec("BEGIN IMMEDIATE");
    try {
      // Re-checked under the write lock: another process may have migrated meanwhile.
      if (schemaVersion(db) < step.version) {
        db.exec(CREATE_MIGRATIONS_TABLE);
        db.exec(step.sql);
        db.prepare("INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)")
          .run(step.version, step.name, now().toISOString());
        db.exec(`PRAGMA user_version = ${Math.trunc(step.version)}`);
        applied.push(step.version);
      }
      db.exec("COMMIT");
    } catch (e) {
      db.exec("ROLLBACK");
      throw e;
    }
  }
  return applied;
}
