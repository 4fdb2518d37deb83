/**
 * The write path's functions on PostgreSQL (installed by migration 10): `index_apply_op` applies
 * one op with the statements the SQLite indexers run (appview/ingest/indexers/*), in the same
 * order and on the same conditions, so arrival-order rules ("a known recipient before the op",
 * "notify before counting", counters moving only on a real row change, unlike + relike giving
 * one notification) hold by construction. `index_apply_ops` takes the ops of up to 2,000 ops as
 * columns (one round trip: one awaited statement costs 0.1-0.2 ms, about a hundred times an
 * SQLite statement), copies them into a temporary table of the session (`index_op_input`,
 * emptied at COMMIT), and applies them in order, run by run: a run of ops the writer planned as
 * independent by the set-based statements of `RUN_PARTS` (appview/ingest/pg/fast_path.ts says
 * why they give the same rows), any other op by `index_apply_op`. In isolation mode every op
 * runs through `index_apply_op` in a subtransaction of its own, and an op that fails is reported
 * and skipped, as the SQLite write path's savepoint per op.
 *
 * The caller (appview/ingest/pg/pg_writer.ts) validated and flattened every op, resolved the actor
 * ids the op needs (`_a`, `_s`: assigned by then for what SQLite's `idOf` would assign, null for a
 * DID without an id where SQLite's `find` would give null) and decided the rev gate: what reaches
 * these functions is applied. Op kinds are {@link OP_KIND}.
 *
 * @module
 */

import { COLLECTION_POST } from "../../../shared/nsid.ts";
import { PLACEHOLDER_DID_CHARS, PLACEHOLDER_ELLIPSIS } from "../handles.ts";
import { PG_PLACEHOLDER_HANDLE_SQL } from "./schema.ts";

/** Op kinds of the write functions (the `_k` column). */
export const OP_KIND = Object.freeze({
  postPut: 1,
  likePut: 2,
  repostPut: 3,
  followPut: 4,
  blockPut: 5,
  profilePut: 6,
  postDelete: 11,
  likeDelete: 12,
  repostDelete: 13,
  followDelete: 14,
  blockDelete: 15,
  profileDelete: 16,
  handleSet: 20,
  handleClear: 21,
  account: 30,
  statusActive: 31,
  statusInactive: 32,
  statusDeleted: 33,
});

/**
 * The columns of a flattened op, in the order of the functions' parameters, with their types.
 * - `did`, `a`: the op's DID and its actor id; `rkey`, `uri` of the record; `now`: indexing time.
 * - `cid`: the record's CID; `text`: post text or profile display name; `descr`: profile
 *   description; `parent`, `root`, `embed`, `langs`, `created` as the post row holds them.
 * - `sdid`, `s`: the other account (like/repost subject's author, follow/block subject, reply
 *   parent's author) and its id; `srkey`, `suri`, `scid`: the subject post's rkey, URI and CID.
 * - `avatar`, `banner`: profile blob CIDs; `handle`: a handle op's handle, or an account status.
 * - `flag`: 1 for a like/repost update (drop the old row first) or an authoritative handle op.
 */
export const OP_COLUMNS = [
  ["k", "smallint"],
  ["did", "text"],
  ["a", "bigint"],
  ["rkey", "text"],
  ["uri", "text"],
  ["now", "text"],
  ["cid", "text"],
  ["text", "text"],
  ["descr", "text"],
  ["parent", "text"],
  ["root", "text"],
  ["embed", "text"],
  ["langs", "text"],
  ["created", "text"],
  ["sdid", "text"],
  ["s", "bigint"],
  ["srkey", "text"],
  ["suri", "text"],
  ["scid", "text"],
  ["avatar", "text"],
  ["banner", "text"],
  ["handle", "text"],
  ["flag", "smallint"],
] as const;

/** A column name of {@link OP_COLUMNS}. */
export type OpColumn = (typeof OP_COLUMNS)[number][0];

/** SQL placeholder handle of a DID expression (`placeholderHandle`, appview/db/handles.ts). */
export function placeholderSql(did: string): string {
  return `(left(${did}, ${PLACEHOLDER_DID_CHARS}) || '${PLACEHOLDER_ELLIPSIS}')`;
}

/** SQL: the notification insert of `notify.ts` (spec 3.1, 6.5), parameters as expressions. */
function notifySql(n: {
  recipient: string;
  kind: string;
  author: string;
  authorDid: string;
  subjectUri: string;
  subjectAuthor: string;
  subjectRkey: string;
  recordUri: string;
  created: string;
  now: string;
  recipientDid: string;
}): string {
  return `INSERT INTO notifications (recipient, kind, author, author_did, subject_uri,
      subject_author, subject_rkey, record_uri, created_at, indexed_at)
    SELECT ${n.recipient}, ${n.kind}, ${n.author}, ${n.authorDid}, ${n.subjectUri},
      ${n.subjectAuthor}, ${n.subjectRkey}, ${n.recordUri}, ${n.created}, ${n.now}
    WHERE ${n.recipient} <> ${n.author} AND (
      EXISTS (SELECT 1 FROM profiles WHERE did = ${n.recipientDid})
      OR EXISTS (SELECT 1 FROM posts WHERE author = ${n.recipient}))
    ON CONFLICT DO NOTHING;`;
}

/** SQL: `ProfileCounters.increment` of `index_profiles.ts`. */
function incrementSql(did: string, column: string): string {
  return `INSERT INTO profiles (did, ${column}) VALUES (${did}, 1)
    ON CONFLICT (did) DO UPDATE SET ${column} = profiles.${column} + 1;`;
}

/** SQL: `ProfileCounters.decrement` of `index_profiles.ts`. */
function decrementSql(did: string, column: string): string {
  return `UPDATE profiles SET ${column} = ${column} - 1 WHERE did = ${did} AND ${column} > 0;`;
}

/** SQL: the like or repost statements of `index_interactions.ts`. */
function interactionSql(table: "likes" | "reposts", counter: string, kind: string): {
  put: string;
  remove: string;
} {
  const remove = `IF _a IS NOT NULL THEN
      DELETE FROM ${table} WHERE actor = _a AND rkey = _rkey
        RETURNING subject_author, subject_rkey INTO _x, _y;
      IF FOUND THEN
        UPDATE posts SET ${counter} = ${counter} - 1
        WHERE author = _x AND rkey = _y AND ${counter} > 0;
      END IF;
    END IF;`;
  const put = `IF _flag = 1 THEN ${remove} END IF;
    INSERT INTO ${table} (actor, rkey, subject_author, subject_rkey, subject_cid, created_at,
      indexed_at) VALUES (_a, _rkey, _s, _srkey, _scid, _created, _now)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN RETURN NULL; END IF;
    UPDATE posts SET ${counter} = ${counter} + 1 WHERE author = _s AND rkey = _srkey;
    ${
    notifySql({
      recipient: "_s",
      kind: `'${kind}'`,
      author: "_a",
      authorDid: "_did",
      subjectUri: "_suri",
      subjectAuthor: "_s",
      subjectRkey: "_srkey",
      recordUri: "_uri",
      created: "_created",
      now: "_now",
      recipientDid: "_sdid",
    })
  }`;
  return { put, remove };
}

const likes = interactionSql("likes", "like_count", "like");
const reposts = interactionSql("reposts", "repost_count", "repost");
const AUTHOR_ID = "(SELECT id FROM actors WHERE did = _did)";

/**
 * What a run of `index_apply_ops` holds (the `mask` of a run): 0 for ops applied one by one, else
 * the bits of the set-based statements to run (appview/ingest/pg/fast_path.ts plans runs).
 */
export const RUN_PARTS = Object.freeze({
  notify: 1,
  posts: 2,
  postDeletes: 4,
  likes: 8,
  likeDeletes: 16,
  reposts: 32,
  repostDeletes: 64,
  followRemovals: 128,
  follows: 256,
  /** Ops applied one by one after the set-based statements (fast_path.ts: which may wait). */
  deferred: 512,
});

/** Op kinds a fast run may hold and apply after its set-based statements (fast_path.ts). */
export const DEFERRABLE_KINDS: readonly number[] = Object.freeze([
  OP_KIND.profilePut,
  OP_KIND.profileDelete,
  OP_KIND.blockPut,
  OP_KIND.blockDelete,
  OP_KIND.statusActive,
  OP_KIND.statusInactive,
]);

/**
 * The session's table of the ops of the call (`index_apply_ops` fills it; emptied at COMMIT).
 * A run's statements read their ops by position from it: slicing the call's arrays instead
 * copied the whole of every array for each statement (PostgreSQL flattens an array to slice it).
 */
const INPUT_TABLE = "index_op_input";

/** The run's ops (positions `_lo` to `_hi`) of the input table, as `u`. */
function runOps(): string {
  return `${INPUT_TABLE} u`;
}

/** The condition selecting the run's ops of kind `kinds`. */
function inRun(...kinds: number[]): string {
  return `u.n BETWEEN _lo AND _hi AND u.k ${
    kinds.length === 1 ? `= ${kinds[0]}` : `IN (${kinds.join(", ")})`
  }`;
}

/** SQL of the set-based statements of a fast run, by part (appview/ingest/pg/fast_path.ts). */
function runStatements(): Record<Exclude<keyof typeof RUN_PARTS, "deferred">, string> {
  const interaction = (table: "likes" | "reposts", counter: string, put: number, del: number) => ({
    put: `WITH inserted AS (
        INSERT INTO ${table} (actor, rkey, subject_author, subject_rkey, subject_cid, created_at,
          indexed_at)
        SELECT u.a, u.rkey, u.s, u.srkey, u.scid, u.created, u.now
        FROM ${runOps()} WHERE ${inRun(put)}
        ON CONFLICT DO NOTHING
        RETURNING subject_author, subject_rkey)
      UPDATE posts SET ${counter} = posts.${counter} + c.n
      FROM (SELECT subject_author, subject_rkey, count(*) AS n FROM inserted GROUP BY 1, 2) c
      WHERE posts.author = c.subject_author AND posts.rkey = c.subject_rkey;`,
    remove: `WITH deleted AS (
        DELETE FROM ${table} t USING ${runOps()}
        WHERE ${inRun(del)} AND u.a IS NOT NULL AND t.actor = u.a AND t.rkey = u.rkey
        RETURNING t.subject_author, t.subject_rkey)
      UPDATE posts SET ${counter} = greatest(0, posts.${counter} - c.n)
      FROM (SELECT subject_author, subject_rkey, count(*) AS n FROM deleted GROUP BY 1, 2) c
      WHERE posts.author = c.subject_author AND posts.rkey = c.subject_rkey
        AND posts.${counter} > 0;`,
  });
  const likes = interaction("likes", "like_count", OP_KIND.likePut, OP_KIND.likeDelete);
  const reposts = interaction("reposts", "repost_count", OP_KIND.repostPut, OP_KIND.repostDelete);
  const { postPut, likePut, repostPut, followPut, followDelete, postDelete } = OP_KIND;
  return {
    // Decided on the state before the run, in op order (fast_path.ts).
    notify: `INSERT INTO notifications (recipient, kind, author, author_did, subject_uri,
        subject_author, subject_rkey, record_uri, created_at, indexed_at)
      SELECT u.s,
        CASE u.k WHEN ${postPut} THEN 'reply' WHEN ${likePut} THEN 'like'
          WHEN ${repostPut} THEN 'repost' ELSE 'follow' END,
        u.a, u.did,
        CASE u.k WHEN ${postPut} THEN u.uri WHEN ${followPut} THEN NULL ELSE u.suri END,
        CASE u.k WHEN ${postPut} THEN u.a WHEN ${followPut} THEN NULL ELSE u.s END,
        CASE u.k WHEN ${postPut} THEN u.rkey WHEN ${followPut} THEN NULL ELSE u.srkey END,
        u.uri, u.created, u.now
      FROM ${runOps()}
      WHERE ${inRun(postPut, likePut, repostPut, followPut)} AND u.s IS NOT NULL
        AND u.s <> u.a
        AND (u.known = 1 OR (SELECT 1 FROM profiles WHERE did = u.sdid) IS NOT NULL
          OR (SELECT 1 FROM posts WHERE author = u.s LIMIT 1) IS NOT NULL)
        AND CASE u.k
          WHEN ${postPut} THEN (SELECT 1 FROM posts p
            WHERE p.author = u.a AND p.rkey = u.rkey AND p.cid = u.cid) IS NULL
          WHEN ${likePut} THEN (SELECT 1 FROM likes l
            WHERE l.actor = u.a AND l.rkey = u.rkey) IS NULL
          WHEN ${repostPut} THEN (SELECT 1 FROM reposts r
            WHERE r.actor = u.a AND r.rkey = u.rkey) IS NULL
          ELSE (SELECT 1 FROM follows f WHERE f.follower = u.a AND f.subject = u.s) IS NULL
        END
      ORDER BY u.n
      ON CONFLICT DO NOTHING;`,
    // New posts in op order (their authors' post_count raised), known ones with another CID
    // updated; both read the state before the statement, so a new post is not also updated.
    posts: `WITH u AS (
        SELECT * FROM ${runOps()} WHERE ${inRun(postPut)}),
      inserted AS (
        INSERT INTO posts (author, rkey, uri, did, handle, collection, text, cid, parent_uri,
          root_uri, embed, langs, created_at, like_count, repost_count, avatar_cid, indexed_at)
        SELECT u.a, u.rkey, u.uri, u.did,
          coalesce((SELECT handle FROM profiles WHERE did = u.did), ${placeholderSql("u.did")}),
          '${COLLECTION_POST}', u.text, u.cid, u.parent, u.root, u.embed, u.langs, u.created,
          (SELECT count(*) FROM likes WHERE subject_author = u.a AND subject_rkey = u.rkey),
          (SELECT count(*) FROM reposts WHERE subject_author = u.a AND subject_rkey = u.rkey),
          (SELECT avatar_cid FROM profiles WHERE did = u.did), u.now
        FROM u ORDER BY u.n
        ON CONFLICT (author, rkey) DO NOTHING
        RETURNING did),
      updated AS (
        UPDATE posts SET cid = u.cid, text = u.text, parent_uri = u.parent, root_uri = u.root,
          embed = u.embed, langs = u.langs, created_at = u.created,
          avatar_cid = coalesce((SELECT pr.avatar_cid FROM profiles pr WHERE pr.did = posts.did),
            posts.avatar_cid)
        FROM u WHERE posts.author = u.a AND posts.rkey = u.rkey AND posts.cid <> u.cid
        RETURNING 1)
      INSERT INTO profiles (did, post_count)
      SELECT did, count(*) FROM inserted GROUP BY did
      ON CONFLICT (did) DO UPDATE SET post_count = profiles.post_count + excluded.post_count;`,
    postDeletes: `WITH deleted AS (
        DELETE FROM posts p USING ${runOps()}
        WHERE ${inRun(postDelete)} AND u.a IS NOT NULL AND p.author = u.a AND p.rkey = u.rkey
        RETURNING p.did)
      UPDATE profiles SET post_count = greatest(0, post_count - d.n)
      FROM (SELECT did, count(*) AS n FROM deleted GROUP BY did) d
      WHERE profiles.did = d.did AND profiles.post_count > 0;`,
    likes: likes.put,
    likeDeletes: likes.remove,
    reposts: reposts.put,
    repostDeletes: reposts.remove,
    // The rows the run's follow ops remove (a delete's row; the row a create's rkey names under
    // another subject), their counts lowered; then new rows, counts raised; then the newest rkey.
    followRemovals: `WITH removed AS (
        DELETE FROM follows f USING ${runOps()}
        WHERE ${inRun(followPut, followDelete)} AND u.a IS NOT NULL AND f.follower = u.a
          AND f.rkey = u.rkey AND (u.k = ${followDelete} OR f.subject <> u.s)
        RETURNING f.follower, f.subject),
      counts AS (
        SELECT id, sum(following) AS following, sum(followers) AS followers FROM (
          SELECT follower AS id, 1 AS following, 0 AS followers FROM removed
          UNION ALL SELECT subject, 0, 1 FROM removed) c GROUP BY id)
      UPDATE profiles SET following_count = greatest(0, following_count - c.following),
        follower_count = greatest(0, follower_count - c.followers)
      FROM counts c JOIN actors ac ON ac.id = c.id
      WHERE profiles.did = ac.did;`,
    follows: `WITH inserted AS (
        INSERT INTO follows (follower, subject, rkey, created_at, indexed_at)
        SELECT u.a, u.s, u.rkey, u.created, u.now
        FROM ${runOps()} WHERE ${inRun(followPut)}
        ON CONFLICT DO NOTHING
        RETURNING follower, subject),
      counts AS (
        SELECT id, sum(following) AS following, sum(followers) AS followers FROM (
          SELECT follower AS id, 1 AS following, 0 AS followers FROM inserted
          UNION ALL SELECT subject, 0, 1 FROM inserted) c GROUP BY id)
      INSERT INTO profiles (did, following_count, follower_count)
      SELECT ac.did, c.following, c.followers FROM counts c JOIN actors ac ON ac.id = c.id
      ON CONFLICT (did) DO UPDATE SET
        following_count = profiles.following_count + excluded.following_count,
        follower_count = profiles.follower_count + excluded.follower_count;
      UPDATE follows f SET rkey = u.rkey
      FROM ${runOps()}
      WHERE ${inRun(followPut)} AND f.follower = u.a AND f.subject = u.s
        AND f.rkey IS DISTINCT FROM u.rkey;`,
  };
}

/** Arguments of a call of `index_apply_op` for the input row `_op`. */
const OP_ARGS = OP_COLUMNS.map(([name]) => `_op.${name}`).join(", ");

/**
 * `index_apply_ops`: the ops (columns of {@link OP_COLUMNS}, with `_n`: each op's position, unique
 * in the transaction, and `_known`: 1 when a fast run's op's notification recipient was made
 * known earlier in the run) in runs (`_runs`: triples of first and last position and
 * {@link RUN_PARTS} mask), applied in order. Returns a row per op refused (a handle held by
 * another DID) or, with `_isolate`, failed: its position and why.
 */
const APPLY_OPS_FUNCTION = `CREATE FUNCTION index_apply_ops(_n integer[], ${
  OP_COLUMNS.map(([name, type]) => `_${name} ${type}[]`).join(", ")
}, _known smallint[], _runs integer[], _isolate boolean)
RETURNS TABLE (o_pos integer, o_holder text, o_error text) LANGUAGE plpgsql AS $fn$
DECLARE
  _r integer;
  _lo integer;
  _hi integer;
  _mask integer;
  _op record;
  _held text;
BEGIN
  IF to_regclass('pg_temp.${INPUT_TABLE}') IS NULL THEN
    CREATE TEMP TABLE ${INPUT_TABLE} (n integer PRIMARY KEY, ${
  OP_COLUMNS.map(([name, type]) => `${name} ${type}`).join(", ")
}, known smallint) ON COMMIT DELETE ROWS;
  END IF;
  INSERT INTO ${INPUT_TABLE} SELECT * FROM unnest(_n, ${
  OP_COLUMNS.map(([name]) => `_${name}`).join(", ")
}, _known);
  FOR _r IN 0 .. coalesce(array_length(_runs, 1), 0) / 3 - 1 LOOP
    _lo := _runs[3 * _r + 1];
    _hi := _runs[3 * _r + 2];
    _mask := _runs[3 * _r + 3];
    IF _mask = 0 THEN
      FOR _op IN SELECT * FROM ${INPUT_TABLE} WHERE n BETWEEN _lo AND _hi ORDER BY n LOOP
        IF _isolate THEN
          BEGIN
            _held := index_apply_op(${OP_ARGS});
          EXCEPTION WHEN OTHERS THEN
            o_pos := _op.n;
            o_holder := NULL;
            o_error := SQLERRM;
            RETURN NEXT;
            CONTINUE;
          END;
        ELSE
          _held := index_apply_op(${OP_ARGS});
        END IF;
        IF _held IS NOT NULL THEN
          o_pos := _op.n;
          o_holder := _held;
          o_error := NULL;
          RETURN NEXT;
        END IF;
      END LOOP;
      CONTINUE;
    END IF;
${
  Object.entries(runStatements()).map(([part, statement]) =>
    `    IF _mask & ${RUN_PARTS[part as keyof typeof RUN_PARTS]} <> 0 THEN
      ${statement}
    END IF;`
  ).join("\n")
}
    IF _mask & ${RUN_PARTS.deferred} <> 0 THEN
      FOR _op IN SELECT * FROM ${INPUT_TABLE}
        WHERE n BETWEEN _lo AND _hi AND k IN (${DEFERRABLE_KINDS.join(", ")}) ORDER BY n
      LOOP
        PERFORM index_apply_op(${OP_ARGS});
      END LOOP;
    END IF;
  END LOOP;
END
$fn$;`;

/** `index_apply_op` and `index_apply_ops` (module comment). */
export const PG_WRITE_FUNCTIONS_V10 = `
CREATE FUNCTION index_apply_op(${OP_COLUMNS.map(([name, type]) => `_${name} ${type}`).join(", ")})
RETURNS text LANGUAGE plpgsql AS $fn$
DECLARE
  _id bigint;
  _old text;
  _x bigint;
  _y text;
  _other text;
  _moved boolean;
BEGIN
  CASE _k
  WHEN ${OP_KIND.postPut} THEN
    INSERT INTO posts (author, rkey, uri, did, handle, collection, text, cid, parent_uri,
      root_uri, embed, langs, created_at, like_count, repost_count, avatar_cid, indexed_at)
    VALUES (_a, _rkey, _uri, _did,
      coalesce((SELECT handle FROM profiles WHERE did = _did), ${placeholderSql("_did")}),
      '${COLLECTION_POST}', _text, _cid, _parent, _root, _embed, _langs, _created,
      (SELECT count(*) FROM likes WHERE subject_author = _a AND subject_rkey = _rkey),
      (SELECT count(*) FROM reposts WHERE subject_author = _a AND subject_rkey = _rkey),
      (SELECT avatar_cid FROM profiles WHERE did = _did), _now)
    ON CONFLICT (author, rkey) DO NOTHING;
    IF FOUND THEN
      ${incrementSql("_did", "post_count")}
    ELSE
      SELECT id, cid INTO _id, _old FROM posts WHERE author = _a AND rkey = _rkey;
      IF _old = _cid THEN RETURN NULL; END IF;
      UPDATE posts SET cid = _cid, text = _text, parent_uri = _parent, root_uri = _root,
        embed = _embed, langs = _langs, created_at = _created,
        avatar_cid = coalesce((SELECT p.avatar_cid FROM profiles p WHERE p.did = posts.did),
          avatar_cid)
      WHERE id = _id;
    END IF;
    IF _s IS NOT NULL THEN
      ${
  notifySql({
    recipient: "_s",
    kind: "'reply'",
    author: "_a",
    authorDid: "_did",
    subjectUri: "_uri",
    subjectAuthor: "_a",
    subjectRkey: "_rkey",
    recordUri: "_uri",
    created: "_created",
    now: "_now",
    recipientDid: "_sdid",
  })
}
    END IF;
  WHEN ${OP_KIND.postDelete} THEN
    IF _a IS NOT NULL THEN
      DELETE FROM posts WHERE author = _a AND rkey = _rkey;
      IF FOUND THEN ${decrementSql("_did", "post_count")} END IF;
    END IF;
  WHEN ${OP_KIND.likePut} THEN ${likes.put}
  WHEN ${OP_KIND.likeDelete} THEN ${likes.remove}
  WHEN ${OP_KIND.repostPut} THEN ${reposts.put}
  WHEN ${OP_KIND.repostDelete} THEN ${reposts.remove}
  WHEN ${OP_KIND.followPut} THEN
    INSERT INTO follows (follower, subject, rkey, created_at, indexed_at)
    VALUES (_a, _s, _rkey, _created, _now) ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
      -- A known follow (keep the newest rkey), or the rkey named another subject: free the key
      -- and retry once.
      DELETE FROM follows WHERE follower = _a AND rkey = _rkey AND subject <> _s
        RETURNING (SELECT did FROM actors WHERE id = subject) INTO _other;
      _moved := FOUND;
      IF _moved THEN
        ${decrementSql("_did", "following_count")}
        ${decrementSql("_other", "follower_count")}
        INSERT INTO follows (follower, subject, rkey, created_at, indexed_at)
        VALUES (_a, _s, _rkey, _created, _now) ON CONFLICT DO NOTHING;
        _moved := FOUND;
      END IF;
      IF NOT _moved THEN
        UPDATE follows SET rkey = _rkey
        WHERE follower = _a AND subject = _s AND rkey IS DISTINCT FROM _rkey;
        RETURN NULL;
      END IF;
    END IF;
    -- Notify before counting (spec 3.1).
    ${
  notifySql({
    recipient: "_s",
    kind: "'follow'",
    author: "_a",
    authorDid: "_did",
    subjectUri: "NULL",
    subjectAuthor: "NULL",
    subjectRkey: "NULL",
    recordUri: "_uri",
    created: "_created",
    now: "_now",
    recipientDid: "_sdid",
  })
}
    ${incrementSql("_did", "following_count")}
    ${incrementSql("_sdid", "follower_count")}
  WHEN ${OP_KIND.followDelete} THEN
    IF _a IS NOT NULL THEN
      DELETE FROM follows WHERE follower = _a AND rkey = _rkey
        RETURNING (SELECT did FROM actors WHERE id = subject) INTO _other;
      IF FOUND THEN
        ${decrementSql("_did", "following_count")}
        ${decrementSql("_other", "follower_count")}
      END IF;
    END IF;
  WHEN ${OP_KIND.blockPut} THEN
    INSERT INTO blocks (actor, rkey, subject, created_at, indexed_at)
    VALUES (_a, _rkey, _s, _created, _now)
    ON CONFLICT (actor, rkey) DO UPDATE SET subject = excluded.subject,
      created_at = excluded.created_at
    WHERE blocks.subject IS DISTINCT FROM excluded.subject
      OR blocks.created_at IS DISTINCT FROM excluded.created_at;
  WHEN ${OP_KIND.blockDelete} THEN
    IF _a IS NOT NULL THEN DELETE FROM blocks WHERE actor = _a AND rkey = _rkey; END IF;
  WHEN ${OP_KIND.profilePut} THEN
    INSERT INTO profiles (did, handle, display_name, description, avatar_cid, banner_cid,
      has_record, updated_at)
    SELECT _did, CASE WHEN h LIKE 'did:%' THEN NULL ELSE h END, _text, _descr, _avatar, _banner,
      1, _now
    FROM (SELECT (SELECT handle FROM posts WHERE author = ${AUTHOR_ID}
      ORDER BY indexed_at DESC, uri DESC LIMIT 1) AS h) latest
    ON CONFLICT (did) DO UPDATE SET
      handle = coalesce(profiles.handle, excluded.handle),
      display_name = excluded.display_name, description = excluded.description,
      avatar_cid = excluded.avatar_cid, banner_cid = excluded.banner_cid,
      has_record = 1, updated_at = excluded.updated_at
    WHERE profiles.has_record = 0
      OR profiles.display_name IS DISTINCT FROM excluded.display_name
      OR profiles.description IS DISTINCT FROM excluded.description
      OR profiles.avatar_cid IS DISTINCT FROM excluded.avatar_cid
      OR profiles.banner_cid IS DISTINCT FROM excluded.banner_cid
      OR (profiles.handle IS NULL AND excluded.handle IS NOT NULL);
    -- Posts indexed before the profile record get its avatar; never set to null (spec 2.1).
    IF _avatar IS NOT NULL THEN
      UPDATE posts SET avatar_cid = _avatar
      WHERE author = ${AUTHOR_ID} AND avatar_cid IS DISTINCT FROM _avatar;
    END IF;
  WHEN ${OP_KIND.profileDelete} THEN
    UPDATE profiles SET display_name = NULL, description = NULL, avatar_cid = NULL,
      banner_cid = NULL, has_record = 0, updated_at = _now
    WHERE did = _did AND has_record = 1;
  WHEN ${OP_KIND.handleClear} THEN
    UPDATE profiles SET handle = NULL, updated_at = _now WHERE did = _did AND handle IS NOT NULL;
    UPDATE posts SET handle = ${placeholderSql("_did")}
    WHERE author = ${AUTHOR_ID} AND NOT (${PG_PLACEHOLDER_HANDLE_SQL});
  WHEN ${OP_KIND.handleSet} THEN
    -- Only the account host's own word moves a handle another DID holds (index_profiles.ts).
    IF _flag IS DISTINCT FROM 1 THEN
      SELECT did INTO _other FROM profiles
      WHERE lower(handle) = lower(_handle) AND handle IS NOT NULL AND did <> _did LIMIT 1;
      IF FOUND THEN RETURN _other; END IF;
    END IF;
    FOR _other IN
      UPDATE profiles SET handle = NULL, updated_at = _now
      WHERE lower(handle) = lower(_handle) AND handle IS NOT NULL AND did <> _did RETURNING did
    LOOP
      UPDATE posts SET handle = ${placeholderSql("_other")}
      WHERE author = (SELECT id FROM actors WHERE did = _other)
        AND NOT (${PG_PLACEHOLDER_HANDLE_SQL});
    END LOOP;
    INSERT INTO profiles (did, handle, updated_at) VALUES (_did, _handle, _now)
    ON CONFLICT (did) DO UPDATE SET handle = excluded.handle, updated_at = excluded.updated_at
    WHERE profiles.handle IS DISTINCT FROM excluded.handle;
    UPDATE posts SET handle = _handle, handle_attempted_at = NULL
    WHERE author = ${AUTHOR_ID} AND handle <> _handle;
  WHEN ${OP_KIND.account} THEN
    INSERT INTO profiles (did) VALUES (_did) ON CONFLICT DO NOTHING;
  WHEN ${OP_KIND.statusActive} THEN
    IF _a IS NOT NULL THEN DELETE FROM inactive_actors WHERE actor = _a; END IF;
  WHEN ${OP_KIND.statusInactive} THEN
    INSERT INTO inactive_actors (actor, status, updated_at) VALUES (_a, _handle, _now)
    ON CONFLICT (actor) DO UPDATE SET status = excluded.status, updated_at = excluded.updated_at
    WHERE inactive_actors.status IS DISTINCT FROM excluded.status;
  WHEN ${OP_KIND.statusDeleted} THEN
    -- purge_actor.ts: every row naming the account, and the counters it moved elsewhere.
    DELETE FROM profiles WHERE did = _did;
    IF _a IS NOT NULL THEN
      UPDATE posts SET like_count = greatest(0, like_count - (
        SELECT count(*) FROM likes t
        WHERE t.actor = _a AND t.subject_author = posts.author AND t.subject_rkey = posts.rkey))
      WHERE id IN (SELECT p.id FROM likes t
        JOIN posts p ON p.author = t.subject_author AND p.rkey = t.subject_rkey
        WHERE t.actor = _a);
      UPDATE posts SET repost_count = greatest(0, repost_count - (
        SELECT count(*) FROM reposts t
        WHERE t.actor = _a AND t.subject_author = posts.author AND t.subject_rkey = posts.rkey))
      WHERE id IN (SELECT p.id FROM reposts t
        JOIN posts p ON p.author = t.subject_author AND p.rkey = t.subject_rkey
        WHERE t.actor = _a);
      UPDATE profiles SET follower_count = follower_count - 1
      WHERE follower_count > 0 AND did IN (
        SELECT ac.did FROM follows f JOIN actors ac ON ac.id = f.subject
        WHERE f.follower = _a AND f.subject <> _a);
      UPDATE profiles SET following_count = following_count - 1
      WHERE following_count > 0 AND did IN (
        SELECT ac.did FROM follows f JOIN actors ac ON ac.id = f.follower
        WHERE f.subject = _a AND f.follower <> _a);
      DELETE FROM posts WHERE author = _a;
      DELETE FROM likes WHERE actor = _a;
      DELETE FROM likes WHERE subject_author = _a;
      DELETE FROM reposts WHERE actor = _a;
      DELETE FROM reposts WHERE subject_author = _a;
      DELETE FROM follows WHERE follower = _a;
      DELETE FROM follows WHERE subject = _a;
      DELETE FROM notifications WHERE recipient = _a;
      DELETE FROM notifications WHERE author = _a;
      DELETE FROM blocks WHERE actor = _a;
      DELETE FROM blocks WHERE subject = _a;
      DELETE FROM mutes WHERE actor = _a;
      DELETE FROM mutes WHERE subject = _a;
      DELETE FROM inactive_actors WHERE actor = _a;
    END IF;
  ELSE
    RAISE EXCEPTION 'Unknown op kind %', _k;
  END CASE;
  RETURN NULL;
END
$fn$;

${APPLY_OPS_FUNCTION}
`;
