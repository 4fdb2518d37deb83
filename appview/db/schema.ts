/**
 * Schema of the index database (SQLite via `node:sqlite`): version 1 is the SQL below; later
 * versions are the migrations in `migrations.ts` (never edits of this text once released). This
 * comment describes the current version (6).
 *
 * Conventions
 * - Timestamps are ISO 8601 strings from `Date.prototype.toISOString()` (fixed width, UTC), so
 *   text order is time order. `created_at` columns hold the record's own `createdAt` verbatim.
 * - DIDs are interned (version 5): the randomly keyed indexes hold `actors.id`, a small integer,
 *   and a post is identified by (author id, rkey) instead of its URI. Rows keep the text the
 *   views return (post `uri` and `did`, notification `author_did`, `subject_uri`, `record_uri`).
 *   CIDs and handles are plain text.
 * - No foreign keys: the three sources deliver ops in any order (a like before its post, a follow
 *   before either account), so every table stands alone and the write path keeps counters exact.
 * - Every row change goes through `IndexWriter.applyOps` (appview/ingest/apply_ops.ts), except
 *   `cursors`, `consumer_status` (appview/db/state.ts) and `notifications.read_at` (query API).
 *
 * Tables
 *
 * actors (version 5): id INTEGER PK, did TEXT UNIQUE. One row per DID any other row names;
 *   never deleted, so an id read once stays valid (the write path caches them, see
 *   appview/ingest/indexers/actors.ts).
 *
 * posts: one row per indexed `app.social.feed.post` record (the spec 2.1 wire fields).
 *   id INTEGER PK (rowid; also the rowid of posts_fts; grows with indexing order, so
 *   `ORDER BY rowid DESC` in posts_fts is newest-indexed first), author (actor id), rkey,
 *   unique together (the post's identity); uri, did (text, as served), handle (author handle, or the placeholder `did:plc:abcdefghij…` from
 *   `placeholderHandle`; placeholders always start with `did:`), rkey, collection, text, cid,
 *   parent_uri, root_uri (null unless a reply), embed (JSON text or null, verbatim),
 *   langs (JSON array text, `[]` when absent), created_at, like_count, repost_count (exact
 *   denormalised counters), avatar_cid (author avatar from the profile cache; never reset to
 *   null by re-indexing), indexed_at (first insert only; updates keep it, so paging is stable),
 *   handle_attempted_at (last handle-resolution attempt; null when none or after success).
 *   Indexes: (author, rkey) unique; (indexed_at, uri, author) global timeline (read
 *   backwards; ascending since version 6, so new posts append at its right edge), covering the
 *   followee filter of the timeline scan; (author, indexed_at DESC, uri DESC) per
 *   author; (parent_uri, indexed_at, uri) (partial, replies only; replies read in order without a
 *   sort); (author, handle_attempted_at) partial over placeholder handles for handle sync
 *   (`WHERE handle GLOB 'did:*'`). Version 5 replaced the did/uri keys by author ids. Version 1 created posts_by_time and posts_by_parent without
 *   their trailing columns; migration 2 recreates them as described here. Version 1 also created
 *   posts_by_root (root_uri, partial); migration 4 drops it (no query used it).
 *
 * posts_fts: FTS5, contentless (`content=''`, `contentless_delete=1`), column `text`,
 *   rowid = posts.id. Search: `SELECT rowid FROM posts_fts WHERE posts_fts MATCH ? ORDER BY
 *   rowid DESC LIMIT ?` then join posts by id (newest first without sorting all matches).
 *
 * likes, reposts: one row per record; identity (actor, rkey) = the actor's id and the record
 *   key. subject_author, subject_rkey (the post's identity; the subject must be a post URI with
 *   a DID authority), subject_cid, created_at, indexed_at.
 *   Index (subject_author, subject_rkey, actor): counts per post and the viewer's like/repost.
 *
 * follows: identity (follower, subject) (spec 2.11, both actor ids): re-applying never adds a row.
 *   rkey (of the follow record; null only in rows that predate it), created_at, indexed_at.
 *   Unique (follower, rkey) where rkey is not null: a delete event (did, rkey) resolves and
 *   deletes in one statement. Indexes (subject, indexed_at DESC, follower DESC) for followers
 *   lists and (follower, indexed_at DESC, subject DESC) for following lists; the PK serves the
 *   timeline's "whom does X follow".
 *
 * profiles: per-DID cache (spec 2.4). did PK, handle (null until known from a HandleOp, a push
 *   or the author's indexed posts), display_name, description, avatar_cid, banner_cid
 *   (from the profile record), has_record (1 while a profile record is indexed; 0 for rows that
 *   only hold counts or a handle), post_count, follower_count, following_count (exact counters
 *   kept by the write path; rows are never deleted, so counters survive a profile delete),
 *   updated_at (last change of handle or record fields).
 *   Index: handle COLLATE NOCASE (profile by handle, spec 4.2 rule 3).
 *
 * notifications (spec 2.7, 3.1, 6.5): id INTEGER PK (tiebreak), recipient (actor id), kind
 *   (`like`, `repost`, `follow`, `reply`), author (actor id), author_did, subject_uri
 *   (liked/reposted post; the reply's own URI; null for follow), subject_author and
 *   subject_rkey (that post's identity), record_uri (the like/repost/follow/reply record that
 *   caused it), created_at (the record's createdAt), indexed_at (sort key, echoed as
 *   `seenAt`), read_at. Unique (recipient, kind, author, ifnull(subject_rkey, '')) (a like's
 *   subject is the recipient's post, a reply's the author's, so the rkey names it): INSERT OR
 *   IGNORE, so unlike + relike (or unfollow + refollow) gives no second row. Deleting the like,
 *   repost, follow or reply keeps the notification (it happened; and the unique rule needs the
 *   row to deduplicate a later relike). Index (recipient, indexed_at, id, read_at) for
 *   the list (read backwards), the unread count and `seen` (version 6 folded the partial
 *   unread index into it: one randomly keyed index write per notification instead of two).
 *
 * repo_revs (migration 3): did PK, rev (TID of the latest commit of that repository whose ops
 *   were applied; WITHOUT ROWID). TIDs sort as strings. Gates ingest per commit
 *   (`IndexWriter.applyOps` option `commit`/`commits`): the local stream applies a commit only
 *   when its rev is newer, a push only when its `since` equals the stored rev (exactly the next
 *   commit), Jetstream when its rev is newer or equal (one rev per op of a multi-op commit).
 *   Written in the transaction of the commit's ops, never moves backwards, except by a backfill
 *   that finds the account host behind it (restored from a backup, docs/behaviour.md 6.2 rule 10).
 *   local (migration 10): 1 once a commit from the account host (stream, push, backfill) was
 *   applied, so a restore can tell its repositories from the public stream's.
 *
 * backfill_queue (migration 10): did PK, reason (`gap`, `unknown`, `sync`, `restore`), target_rev
 *   (the rev that prompted it, when known), attempts, not_before (next attempt; a failure's
 *   backoff), last_error, queued_at (changed by every new trigger). Written by the write path in
 *   the transaction of the commit that revealed a gap; index (not_before, did).
 *
 * backfill_status (migration 10): name PK (`local`), done, failed, records (totals), last_did,
 *   last_error, last_done_at, restored_at / restored_cursor / restored_head (the last time the
 *   account host's head was found behind the stored cursor), updated_at. Read by /healthz.
 *
 * cursors: name PK, value INTEGER, updated_at. One row per stream (spec 6.2 rule 2): the local
 *   stream's `seq` and the public stream's `time_us` never share a row. Names in `state.ts`.
 *
 * consumer_status: name PK (`public`, `local`), state (`disabled|connecting|live|backoff`),
 *   cursor, last_event_at, last_error, updated_at: what /healthz reports when consumers run in
 *   other processes. down_since (migration 7): when the consumer last left `live` (or started
 *   without reaching it); null while live or disabled.
 *
 * ingest_skips: reason + collection PK, count, last_detail, last_uri, updated_at. Counts ops the
 *   write path skipped (`invalid_record`, `unsupported_collection`, `apply_error`), by reason.
 *   An event counter, not state: applying the same bad op twice counts it twice. Collections the
 *   index does not handle are recorded as `*`, so hostile input cannot grow the table.
 *
 * schema_migrations: version PK, name, applied_at (with `PRAGMA user_version`).
 *
 * @module
 */

/** SQL condition true for rows whose `handle` is a placeholder (matches the partial index). */
export const PLACEHOLDER_HANDLE_SQL = "handle GLOB 'did:*'";

/**
 * SQL scalar subquery for the interned id of the DID bound to `param` (`"?"`, `"?1"`, ...);
 * NULL when the DID has none, which then matches no row.
 */
export function actorIdSql(param: string): string {
  return `(SELECT id FROM actors WHERE did = ${param})`;
}

/** Version 1 of the schema. */
export const SCHEMA_V1 = `
CREATE TABLE posts (
  id INTEGER PRIMARY KEY,
  uri TEXT NOT NULL UNIQUE,
  did TEXT NOT NULL,
  handle TEXT NOT NULL,
  rkey TEXT NOT NULL,
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
CREATE INDEX posts_by_time ON posts (indexed_at DESC, uri DESC);
CREATE INDEX posts_by_author ON posts (did, indexed_at DESC, uri DESC);
CREATE INDEX posts_by_parent ON posts (parent_uri) WHERE parent_uri IS NOT NULL;
CREATE INDEX posts_by_root ON posts (root_uri) WHERE root_uri IS NOT NULL;
CREATE INDEX posts_unknown_handle ON posts (did, handle_attempted_at)
  WHERE ${PLACEHOLDER_HANDLE_SQL};

CREATE VIRTUAL TABLE posts_fts USING fts5 (
  text,
  content = '',
  contentless_delete = 1,
  tokenize = 'unicode61 remove_diacritics 2'
);

CREATE TABLE likes (
  did TEXT NOT NULL,
  rkey TEXT NOT NULL,
  subject_uri TEXT NOT NULL,
  subject_cid TEXT NOT NULL,
  created_at TEXT NOT NULL,
  indexed_at TEXT NOT NULL,
  PRIMARY KEY (did, rkey)
) WITHOUT ROWID;
CREATE INDEX likes_by_subject ON likes (subject_uri, did);

CREATE TABLE reposts (
  did TEXT NOT NULL,
  rkey TEXT NOT NULL,
  subject_uri TEXT NOT NULL,
  subject_cid TEXT NOT NULL,
  created_at TEXT NOT NULL,
  indexed_at TEXT NOT NULL,
  PRIMARY KEY (did, rkey)
) WITHOUT ROWID;
CREATE INDEX reposts_by_subject ON reposts (subject_uri, did);

CREATE TABLE follows (
  follower TEXT NOT NULL,
  subject TEXT NOT NULL,
  rkey TEXT,
  created_at TEXT NOT NULL,
  indexed_at TEXT NOT NULL,
  PRIMARY KEY (follower, subject)
) WITHOUT ROWID;
CREATE UNIQUE INDEX follows_by_rkey ON follows (follower, rkey) WHERE rkey IS NOT NULL;
CREATE INDEX follows_by_subject ON follows (subject, indexed_at DESC, follower DESC);
CREATE INDEX follows_by_follower ON follows (follower, indexed_at DESC, subject DESC);

CREATE TABLE profiles (
  did TEXT PRIMARY KEY,
  handle TEXT,
  display_name TEXT,
  description TEXT,
  avatar_cid TEXT,
  banner_cid TEXT,
  has_record INTEGER NOT NULL DEFAULT 0,
  post_count INTEGER NOT NULL DEFAULT 0,
  follower_count INTEGER NOT NULL DEFAULT 0,
  following_count INTEGER NOT NULL DEFAULT 0,
  updated_at TEXT
) WITHOUT ROWID;
CREATE INDEX profiles_by_handle ON profiles (handle COLLATE NOCASE) WHERE handle IS NOT NULL;

CREATE TABLE notifications (
  id INTEGER PRIMARY KEY,
  recipient_did TEXT NOT NULL,
  kind TEXT NOT NULL,
  author_did TEXT NOT NULL,
  subject_uri TEXT,
  record_uri TEXT NOT NULL,
  created_at TEXT NOT NULL,
  indexed_at TEXT NOT NULL,
  read_at TEXT
);
CREATE UNIQUE INDEX notifications_dedupe
  ON notifications (recipient_did, kind, author_did, ifnull(subject_uri, ''));
CREATE INDEX notifications_by_recipient
  ON notifications (recipient_did, indexed_at DESC, id DESC);
CREATE INDEX notifications_unread
  ON notifications (recipient_did, indexed_at) WHERE read_at IS NULL;

CREATE TABLE cursors (
  name TEXT PRIMARY KEY,
  value INTEGER NOT NULL,
  updated_at TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE consumer_status (
  name TEXT PRIMARY KEY,
  state TEXT NOT NULL,
  cursor INTEGER,
  last_event_at TEXT,
  last_error TEXT,
  updated_at TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE ingest_skips (
  reason TEXT NOT NULL,
  collection TEXT NOT NULL,
  count INTEGER NOT NULL DEFAULT 0,
  last_detail TEXT,
  last_uri TEXT,
  updated_at TEXT NOT NULL,
  PRIMARY KEY (reason, collection)
) WITHOUT ROWID;
`;
