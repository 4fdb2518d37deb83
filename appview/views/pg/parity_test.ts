/**
 * The PostgreSQL views answer exactly what the SQLite views answer (issue 40). Every view method
 * is asked the same questions on both backends, every page of every list followed by its cursor,
 * for viewers with blocks either way, mutes, inactive accounts, threads with cycles, a depth past
 * the limit and blocked parents and replies, and search words with punctuation, diacritics, case
 * and no match. Answers are compared as the API serialises them (JSON: key order inside objects
 * does not count, value types do).
 *
 * Two ways to the same rows:
 * - copied: one index built by the SQLite write path, copied row for row (ids included) into a
 *   database made by the PostgreSQL migrations; a test of the queries alone, with many rows
 *   sharing an `indexed_at` so every tiebreak is exercised;
 * - written: the same ops applied by `IndexWriter` and by `PgIndexWriter`, each with a clock that
 *   reads alike; surrogate ids may differ there (see `comparable`).
 */

import assert from "node:assert/strict";
import type { DatabaseSync } from "node:sqlite";
import { COLLECTION_POST } from "../../../shared/nsid.ts";
import type { IndexOp } from "../../../shared/ops.ts";
import {
  accountStatusOp,
  blockOp,
  cidOf,
  deleteOp,
  didOf,
  followOp,
  handleOp,
  likeOp,
  postOp,
  profileOp,
  repostOp,
  safetyWorld,
  uriOf,
} from "../../_fixtures.ts";
import { openIndexDb } from "../../db/open.ts";
import { openFreshPgIndex, pgTest, stopPgClusterAfterTests } from "../../db/pg/_test_helpers.ts";
import type { PgSql } from "../../db/pg/open.ts";
import type { AsyncViews } from "../../db/store.ts";
import { IndexWriter } from "../../ingest/apply_ops.ts";
import type { IdKey, TextKey } from "../cursor.ts";
import { PostHydrator } from "../posts.ts";
import type { PostRow } from "../present.ts";
import { TimelineView } from "../timeline.ts";
import { createViews, type Views } from "../views.ts";
import { PgIndexWriter } from "../../ingest/pg/pg_writer.ts";
import { PgSearchView } from "./search.ts";
import { PgTimelineView } from "./timeline.ts";
import { createPgViews, type PgViews } from "./views.ts";

/** Deterministic PRNG (mulberry32). */
function rng(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The tables the views read, copied in this order. */
const TABLES = [
  "actors",
  "posts",
  "likes",
  "reposts",
  "follows",
  "profiles",
  "notifications",
  "blocks",
  "mutes",
  "inactive_actors",
] as const;

/** Copies every row the views read from SQLite to PostgreSQL, ids included. */
async function copyIndex(db: DatabaseSync, sql: PgSql): Promise<void> {
  for (const table of TABLES) {
    const rows = db.prepare(`SELECT * FROM ${table}`).all().map((r) => ({ ...r }));
    for (let i = 0; i < rows.length; i += 2_000) {
      await sql`INSERT INTO ${sql(table)} ${sql(rows.slice(i, i + 2_000))}`;
    }
  }
  for (const table of ["actors", "posts", "notifications"]) {
    await sql.unsafe(
      `SELECT setval(pg_get_serial_sequence('${table}', 'id'), coalesce(max(id), 0) + 1, false)
       FROM ${table}`,
    );
  }
  await sql`ANALYZE`;
}

/** Both backends over the same rows. */
interface Pair extends AsyncDisposable {
  readonly db: DatabaseSync;
  readonly sql: PgSql;
  readonly lite: Views;
  readonly pg: PgViews;
  /** Timelines whose global walk reads at most 2 rows per result (both backends). */
  readonly tight: { lite: TimelineView; pg: PgTimelineView };
  /** Asks both; asserts equal answers (as JSON, see {@link comparable}); returns SQLite's. */
  same<T>(label: string, ask: (v: Views | PgViews) => T | Promise<T>): Promise<T>;
  /** Asks both; asserts equal answers; returns both. */
  both<T>(label: string, ask: (v: Views | PgViews) => T | Promise<T>): Promise<[T, T]>;
  /** PostgreSQL's rows were written by PgIndexWriter (ids may differ from SQLite's). */
  readonly written: boolean;
  /** Counts the questions asked. */
  readonly asked: () => number;
}

/**
 * Applies `ops` to a fresh SQLite index (the clock moves 1 ms on about one reading in `tieEvery`,
 * so many rows share an `indexed_at`), runs `prepare` on its connection, and copies it.
 */
async function openPair(
  ops: IndexOp[],
  opts: {
    tieEvery?: number;
    prepare?: (db: DatabaseSync) => void;
    seed?: number;
    writer?: boolean;
  } = {},
): Promise<Pair> {
  const random = rng(opts.seed ?? 1);
  const tieEvery = opts.tieEvery ?? 5;
  let ms = Date.parse("2024-06-01T00:00:00.000Z");
  const db = openIndexDb(":memory:");
  const writer = new IndexWriter(db, {
    now: () => new Date(random() * tieEvery < 1 ? ++ms : ms),
    batchSize: 10_000,
  });
  const result = writer.applyOps(ops);
  assert.equal(result.skipped, 0);
  opts.prepare?.(db);
  const sql = await openFreshPgIndex();
  if (opts.writer) {
    const random2 = rng(opts.seed ?? 1);
    let ms2 = Date.parse("2024-06-01T00:00:00.000Z");
    const pgWriter = new PgIndexWriter(sql, {
      now: () => new Date(random2() * tieEvery < 1 ? ++ms2 : ms2),
      batchSize: 10_000,
    });
    assert.deepEqual(await pgWriter.applyOps(ops), result);
  } else {
    await copyIndex(db, sql);
  }
  const lite = createViews(db);
  const pg = createPgViews(sql) satisfies AsyncViews;
  let asked = 0;
  const written = opts.writer ?? false;
  async function both<T>(label: string, ask: (v: Views | PgViews) => T | Promise<T>) {
    asked++;
    const want = await ask(lite);
    const got = await ask(pg);
    assert.deepEqual(comparable(got, written), comparable(want, written), label);
    return [want, got] as [T, T];
  }
  return {
    db,
    sql,
    lite,
    pg,
    tight: {
      lite: new TimelineView(db, new PostHydrator(db), { scanRowsPerResult: 2 }),
      pg: new PgTimelineView(sql, { scanRowsPerResult: 2 }),
    },
    async same(label, ask) {
      return (await both(label, ask))[0];
    },
    both,
    written,
    asked: () => asked,
    async [Symbol.asyncDispose]() {
      await sql.end();
      db.close();
    },
  };
}

/**
 * An answer as the API serialises it (JSON). Over rows written by each backend's own writer,
 * surrogate ids (post and notification ids, actor ids in cursors) may differ: row `id`s are left
 * out, and a cursor's id (`next` as a number, or the number of an (time, id) key) is only there.
 */
function comparable(value: unknown, written: boolean): unknown {
  if (value === undefined) return undefined;
  const json = JSON.parse(JSON.stringify(value));
  return written ? withoutIds(json) : json;
}

function withoutIds(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withoutIds);
  if (value === null || typeof value !== "object") return value;
  const out: Record<string, unknown> = {};
  for (const [key, v] of Object.entries(value)) {
    if (key === "id") continue;
    if (key === "next" && typeof v === "number") out[key] = "a row id";
    else if (key === "next" && Array.isArray(v) && typeof v[1] === "number") {
      out[key] = [v[0], "an id"];
    } else out[key] = withoutIds(v);
  }
  return out;
}

/**
 * Follows a list page by page on both backends until its end (or `maxPages`); returns how many
 * pages. `cursorOf` reads the next page's cursor of an answer (null: the last page).
 */
async function allPages<P, C>(
  pair: Pair,
  label: string,
  ask: (v: Views | PgViews, cursor: C | null) => P | Promise<P>,
  cursorOf: (page: P) => C | null,
  maxPages = 1_000,
): Promise<number> {
  // Each backend pages with its own cursors (equal unless ids differ, see `comparable`).
  let cursors: [C | null, C | null] = [null, null];
  for (let n = 1;; n++) {
    const [a, b]: (C | null)[] = cursors;
    const pages = await pair.both(`${label} page ${n}`, (v) => ask(v, v === pair.lite ? a : b));
    cursors = [cursorOf(pages[0]), cursorOf(pages[1])];
    if (cursors[0] === null || n === maxPages) return n;
  }
}

/** A little world of people, follows, posts with replies, likes, reposts, blocks and statuses. */
interface World {
  users: string[];
  handles: Map<string, string>;
  posts: string[];
  ops: IndexOp[];
}

const WORDS = [
  "hello",
  "world",
  "Café",
  "cafe",
  "CAFÉ",
  "naïve",
  "NAIVE",
  "foo-bar",
  "bar",
  "example.com",
  "e-mail",
  "don't",
  "x2y",
  "1,000",
  "3.14",
  "日本語",
  "ελληνικά",
  "snake_case",
  "(paren)",
  '"quoted"',
  "#tag",
  "@mention",
  "needle",
  "Needle",
  "😀",
  "über",
  "Zoë",
  "a\u200bb",
];

function randomWorld(seed: number, opts: { users: number; posts: number }): World {
  const random = rng(seed);
  const pick = <T>(xs: readonly T[]) => xs[Math.floor(random() * xs.length)];
  const users = Array.from({ length: opts.users }, (_, i) => didOf(`user${i}`));
  const handles = new Map<string, string>();
  const ops: IndexOp[] = [];
  users.forEach((u, i) => {
    // Some accounts never get a handle (placeholders), some no profile record.
    if (i % 9 !== 4) {
      handles.set(u, `user${i}.test`);
      ops.push(handleOp(u, `user${i}.test`));
    }
    if (i % 3 === 0) {
      ops.push(profileOp(u, { displayName: `User ${i}`, avatar: cidOf(`avatar${i}`) }));
    }
  });
  // Follows: mostly a few, three accounts above the per-followee threshold when there are enough.
  users.forEach((u, i) => {
    const n = i < 3 && users.length > 110 ? 105 + i * 5 : Math.floor(random() * 12);
    const set = new Set<string>();
    while (set.size < Math.min(n, users.length - 1)) {
      const s = pick(users);
      if (s !== u) set.add(s);
    }
    [...set].forEach((s, j) => ops.push(followOp(u, `3kf${String(j).padStart(10, "0")}`, s)));
  });
  const posts: string[] = [];
  for (let i = 0; i < opts.posts; i++) {
    const author = users[Math.floor(users.length * random() ** 2)];
    const rkey = `3kp${String(i).padStart(10, "0")}`;
    const text = Array.from({ length: 1 + Math.floor(random() * 5) }, () => pick(WORDS)).join(" ");
    const r = random();
    let reply: { parent?: string; root?: string } = {};
    if (r < 0.35 && posts.length > 0) {
      const parent = posts[Math.floor(posts.length * (1 - random() ** 3))];
      reply = { parent, root: posts[0] };
    } else if (r < 0.37) {
      // A parent indexed later (or never): chains that end at a missing post, and cycles.
      const later = Math.min(opts.posts - 1, i + 1 + Math.floor(random() * 3));
      const parentAuthor = users[Math.floor(users.length * random() ** 2)];
      reply = {
        parent: uriOf(parentAuthor, COLLECTION_POST, `3kp${String(later).padStart(10, "0")}`),
      };
    }
    ops.push(postOp(author, rkey, text, reply));
    posts.push(uriOf(author, COLLECTION_POST, rkey));
  }
  // Cycles: two posts replying to each other, and one replying to itself.
  const [c1, c2] = [users[1], users[2]];
  const cyc1 = uriOf(c1, COLLECTION_POST, "3kcycle000001");
  const cyc2 = uriOf(c2, COLLECTION_POST, "3kcycle000002");
  const self = uriOf(c1, COLLECTION_POST, "3kcycle000003");
  ops.push(postOp(c1, "3kcycle000001", "cycle one", { parent: cyc2 }));
  ops.push(postOp(c2, "3kcycle000002", "cycle two", { parent: cyc1 }));
  ops.push(postOp(c1, "3kcycle000003", "cycle self", { parent: self }));
  posts.push(cyc1, cyc2, self);
  // A reply chain deeper than 20, for the depth limit.
  let parent = posts[0];
  for (let d = 0; d < 25; d++) {
    const author = users[d % 5];
    const rkey = `3kdeep${String(d).padStart(7, "0")}`;
    ops.push(postOp(author, rkey, `deep ${d}`, { parent, root: posts[0] }));
    parent = uriOf(author, COLLECTION_POST, rkey);
    posts.push(parent);
  }
  // Likes and reposts (some twice by one account: two records), some undone.
  for (let i = 0; i < opts.posts; i++) {
    const actor = pick(users);
    const subject = pick(posts);
    const rkey = `3kl${String(i).padStart(10, "0")}`;
    ops.push(likeOp(actor, rkey, subject));
    if (i % 17 === 0) ops.push(likeOp(actor, `${rkey}b`, subject));
    if (i % 23 === 0) ops.push(deleteOp(actor, "app.social.feed.like", rkey));
    if (i % 3 === 0) ops.push(repostOp(pick(users), `3kr${String(i).padStart(10, "0")}`, subject));
  }
  // Blocks both ways (one deleted, one account blocked twice), and inactive accounts.
  for (let i = 0; i < Math.max(4, users.length / 8); i++) {
    const actor = users[(i * 7 + 3) % users.length];
    const subject = users[(i * 11 + 5) % users.length];
    if (actor !== subject) ops.push(blockOp(actor, `3kb${String(i).padStart(10, "0")}`, subject));
  }
  ops.push(blockOp(users[3], "3kbtwice00001", users[5]));
  ops.push(blockOp(users[3], "3kbtwice00002", users[5]));
  ops.push(blockOp(users[6], "3kbdeleted001", users[7]));
  ops.push(deleteOp(users[6], "app.social.graph.block", "3kbdeleted001"));
  ops.push(accountStatusOp(users[8], "takendown"));
  ops.push(accountStatusOp(users[9], "deactivated"));
  ops.push(accountStatusOp(users[10], "deactivated"));
  ops.push(accountStatusOp(users[10], null));
  ops.push(accountStatusOp(users[1], "takendown")); // an author in the cycle and deep chain
  return { users, handles, posts, ops };
}

/** Mutes applied through both backends' views (they write), with equal answers. */
async function muteSome(pair: Pair, users: string[]): Promise<void> {
  let t = Date.parse("2024-07-01T00:00:00.000Z");
  for (let i = 0; i < users.length; i += 3) {
    const actor = users[i];
    for (const k of [1, 4, 2]) {
      const subject = users[(i + k * 5) % users.length];
      // Some mutes share an instant: the tiebreak is the muted account's id (which only copied
      // rows share with SQLite).
      const now = new Date(k === 2 && !pair.written ? t : ++t).toISOString();
      await pair.same(`mute ${actor} ${subject}`, (v) => v.safety.mute(actor, subject, now));
    }
  }
  // Again (already muted), one undone, an unknown account muted, one unmute of nothing.
  const now = new Date(++t).toISOString();
  await pair.same("mute again", (v) => v.safety.mute(users[0], users[5], now));
  await pair.same("unmute", (v) => v.safety.unmute(users[0], users[20 % users.length]));
  await pair.same("unmute nothing", (v) => v.safety.unmute(users[0], users[0]));
  await pair.same("mute unknown", (v) => v.safety.mute(users[0], didOf("nobody"), now));
}

/** Every view question about the world, for `viewers`. */
async function askEverything(pair: Pair, world: World, viewers: string[]): Promise<void> {
  const { users, handles, posts } = world;
  const unknown = didOf("unknown");
  const someUsers = [...users.slice(0, 12), unknown];
  for (const viewer of [...viewers, unknown]) {
    for (const strategy of ["per_followee", "global_scan", "auto"] as const) {
      for (const limit of [1, 7, 30]) {
        await allPages<{ next: TextKey | null }, TextKey>(
          pair,
          `timeline ${viewer} ${strategy} ${limit}`,
          (v, cursor) => v.timeline.home(viewer, { limit, cursor, strategy }),
          (p) => p.next,
          // Pages of 30 cover the whole timeline, smaller ones its newest part.
          limit === 30 ? 1_000 : 40,
        );
      }
    }
    await allPages<{ next: TextKey | null }, TextKey>(
      pair,
      `timeline (tight walk) ${viewer}`,
      (_, cursor) => {
        const opts = { limit: 6, cursor, strategy: "global_scan" as const };
        return _ === pair.lite
          ? pair.tight.lite.home(viewer, opts)
          : pair.tight.pg.home(viewer, opts);
      },
      (p) => p.next,
    );
    await allPages<{ next: IdKey | null }, IdKey>(
      pair,
      `notifications ${viewer}`,
      (v, cursor) => v.notifications.list(viewer, { limit: 13, cursor }),
      (p) => p.next,
    );
    await pair.same(`unread ${viewer}`, (v) => v.notifications.unreadCount(viewer));
    await allPages<{ next: IdKey | null }, IdKey>(
      pair,
      `mutes ${viewer}`,
      (v, cursor) => v.safety.mutes(viewer, { limit: 2, cursor }),
      (p) => p.next,
    );
    for (const subject of someUsers) {
      for (const list of ["followers", "following"] as const) {
        await allPages<{ next: IdKey | null }, IdKey>(
          pair,
          `${list} of ${subject} for ${viewer}`,
          (v, cursor) => v.graph[list](subject, { limit: 4, cursor, viewerDid: viewer }),
          (p) => p.next,
        );
      }
      await pair.same(
        `profile ${subject} for ${viewer}`,
        (v) => v.profiles.byDid(subject, { viewerDid: viewer }),
      );
      const handle = handles.get(subject);
      if (handle !== undefined) {
        await pair.same(
          `profile @${handle} for ${viewer}`,
          (v) => v.profiles.byHandle(`@${handle.toUpperCase()}`, { viewerDid: viewer }),
        );
      }
      await pair.same(`blocked ${viewer} ${subject}`, (v) => v.safety.blocked(viewer, subject));
      await pair.same(
        `unavailable ${viewer} ${subject}`,
        (v) => v.safety.unavailable(viewer, subject),
      );
      await pair.same(`muted ${viewer} ${subject}`, (v) => v.safety.muted(viewer, subject));
    }
    const asked = [...posts.filter((_, i) => i % 37 === 0), ...posts.slice(-30)];
    await pair.same(`viewer records of ${viewer}`, (v) =>
      v.viewer.records(viewer, {
        uris: [...asked, asked[0], "at://did:plc:x/app.social.feed.like/3k", "not a uri"],
        actors: [...users, users[0], unknown],
      }));
    for (const uri of asked) {
      const row = await pair.same(`post ${uri}`, (v) => v.threads.post(uri));
      if (row === null) continue;
      await pair.same(
        `ancestors of ${uri} for ${viewer}`,
        (v) => v.threads.ancestors(row as PostRow, viewer),
      );
      await pair.same(`replies of ${uri} for ${viewer}`, (v) => v.threads.replies(uri, viewer));
      await pair.same(
        `viewer state of ${uri} for ${viewer}`,
        (v) => v.threads.viewerState(uri, viewer),
      );
    }
  }
  // Without a viewer.
  for (const uri of [...posts.filter((_, i) => i % 29 === 0), ...posts.slice(-30)]) {
    const row = await pair.same(`post ${uri}`, (v) => v.threads.post(uri));
    if (row === null) continue;
    await pair.same(`ancestors of ${uri}`, (v) => v.threads.ancestors(row as PostRow));
    await pair.same(`replies of ${uri}`, (v) => v.threads.replies(uri));
  }
  for (const subject of someUsers) {
    await pair.same(`profile ${subject}`, (v) => v.profiles.byDid(subject));
    await pair.same(`inactive ${subject}`, (v) => v.safety.inactive(subject));
    await pair.same(`blocked nobody ${subject}`, (v) => v.safety.blocked(null, subject));
    await pair.same(`unavailable nobody ${subject}`, (v) => v.safety.unavailable(null, subject));
  }
  for (const handle of ["user0.test", "USER0.TEST", "@user0.test", "nobody.test", "not a handle"]) {
    await pair.same(`profile ${handle}`, (v) => v.profiles.byHandle(handle));
  }
  // The newest 40 by id, some twice, some not indexed: each backend asked its own ids.
  const ids = (pair.db.prepare("SELECT id FROM posts ORDER BY id DESC LIMIT 40").all() as {
    id: number;
  }[]).map((r) => r.id);
  const pgIds = (await pair.sql`SELECT id FROM posts ORDER BY id DESC LIMIT 40`).map((r) =>
    r.id as number
  );
  await pair.same("byIds", (v) => {
    const asked = v === pair.lite ? ids : pgIds;
    return v.posts.byIds([...asked, 0, asked[3], 10_000_000]);
  });
  await pair.same("byIds none", (v) => v.posts.byIds([]));
  for (const uri of [posts[0], posts[5], "at://handle.test/app.social.feed.post/3k", "x"]) {
    await pair.same(`byUri ${uri}`, (v) => v.posts.byUri(uri));
  }
}

/** Search words: punctuation, diacritics, case, several words, nothing searchable, no match. */
const SEARCHES = [
  "post",
  "a reply post",
  "hello",
  "HELLO world",
  "cafe",
  "CAFÉ",
  "Café",
  "naive",
  "NAÏVE",
  "foo-bar",
  "bar foo",
  "bar-foo",
  "foo",
  "example.com",
  "com",
  "e-mail",
  "mail",
  "don't",
  "dont",
  "x2y",
  "1,000",
  "000",
  "3.14",
  "日本語",
  "ελληνικά",
  "snake_case",
  "snake",
  "paren",
  "(paren",
  '"quoted"',
  "#tag",
  "tag",
  "@mention",
  "needle",
  "NEEDLE hello",
  "über",
  "uber",
  "zoe",
  "ZOË",
  "ab",
  "a b",
  "😀",
  "😀 hello",
  "hello*",
  "hello AND",
  "NOT hello",
  "NEAR(hello world)",
  "text:hello",
  "hello\u0000world",
  "-",
  "",
  "   ",
  "zzzz",
  "hello zzzz",
  "cafe cafe cafe",
  "a".repeat(70),
  Array.from({ length: 20 }, (_, i) => (i < 16 ? "hello" : "zzzz")).join(" "),
];

/**
 * Every page of every search, for each viewer, and the first pages again with first walks so
 * short that most pages go on by another way (`pg/search.ts`): the cheapest, and each way fixed.
 */
async function askSearches(pair: Pair, viewers: (string | null)[]): Promise<void> {
  const short = [
    ...[1, 4].map((firstWalk) => new PgSearchView(pair.sql, { firstWalk })),
    ...(["walk", "window", "index"] as const).map((way) =>
      new PgSearchView(pair.sql, { firstWalk: 2, way })
    ),
  ];
  for (const viewerDid of viewers) {
    for (const q of SEARCHES) {
      const variants: [PgSearchView, number][] = [
        [pair.pg.search, 1_000],
        ...short.map((s): [PgSearchView, number] => [s, 8]),
      ];
      for (const [pg, maxPages] of variants) {
        await allPages<{ next: number | null }, number>(
          pair,
          `search ${JSON.stringify(q)} for ${viewerDid}`,
          (v, before) =>
            (v === pair.lite ? v.search : pg).search(q, { limit: 25, before, viewerDid }),
          (p) => p.next,
          maxPages,
        );
      }
    }
  }
}

pgTest("PostgreSQL views answer as SQLite in the member-safety world", async () => {
  const w = safetyWorld();
  const ops = [
    ...w.ops,
    profileOp(w.ALICE, { displayName: "Alice", description: "hi" }),
    blockOp(w.DAVE, "3kblock000022", w.CAROL),
    likeOp(w.CAROL, "3klike0000122", w.BR),
    repostOp(w.DAVE, "3krepost00022", w.A1),
    postOp(w.DAVE, "3kdddddddd022", "a reply post by dave", { parent: w.CR, root: w.A1 }),
    accountStatusOp(didOf("eve"), "takendown"),
    postOp(didOf("eve"), "3keeeeeeee022", "a post by eve", { parent: w.A1 }),
  ];
  await using pair = await openPair(ops);
  const world: World = {
    users: [w.ALICE, w.BOB, w.CAROL, w.DAVE, didOf("eve")],
    handles: new Map([[w.ALICE, "alice.test"], [w.BOB, "bob.test"], [w.CAROL, "carol.test"]]),
    posts: [w.A1, w.B1, w.BR, w.CR, w.C1, uriOf(w.DAVE, COLLECTION_POST, "3kdddddddd022")],
    ops,
  };
  await pair.same("mute", (v) => v.safety.mute(w.ALICE, w.CAROL, "2024-07-01T00:00:00.000Z"));
  await askEverything(pair, world, world.users);
  await askSearches(pair, [null, w.ALICE, w.DAVE, w.CAROL]);
  // The thread of Carol's reply as Dave sees it (Dave blocks Carol): stopped at the block.
  const dave = await pair.same(
    "dave's reply",
    (v) => v.threads.post(uriOf(w.DAVE, COLLECTION_POST, "3kdddddddd022")),
  );
  const seen = await pair.same(
    "ancestors for dave",
    (v) => v.threads.ancestors(dave as PostRow, w.DAVE),
  );
  assert.deepEqual(seen, { chain: [], blocked: true });
  const alice = await pair.same(
    "ancestors for alice",
    (v) => v.threads.ancestors(dave as PostRow, w.ALICE),
  );
  assert.deepEqual(alice.chain.map((p) => p.uri), [w.A1, w.BR, w.CR]);
});

pgTest("PostgreSQL views answer as SQLite on a random world, every page", async () => {
  const world = randomWorld(11, { users: 130, posts: 3_000 });
  await using pair = await openPair(world.ops, {
    seed: 5,
    // A follow row from before follows stored their record key.
    prepare: (db) =>
      db.prepare(
        `INSERT OR IGNORE INTO follows (follower, subject, rkey, created_at, indexed_at)
         SELECT a.id, b.id, NULL, '2024-01-01T00:00:00.000Z', '2024-06-01T00:00:00.000Z'
         FROM actors a, actors b WHERE a.did = ? AND b.did = ?`,
      ).run(world.users[12], world.users[13]),
  });
  await muteSome(pair, world.users);
  // Viewers: the three who follow many (global walk under auto), blockers and blocked ones, the
  // inactive, and a few others.
  const viewers = [0, 1, 2, 3, 5, 7, 8, 12, 40, 77].map((i) => world.users[i]);
  await askEverything(pair, world, viewers);
  await askSearches(pair, [null, world.users[3]]);
  // Marking read on both, then the lists and counts again.
  for (const viewer of viewers.slice(0, 5)) {
    const notes = await pair.same(
      `notifications of ${viewer}`,
      (v) => v.notifications.list(viewer, { limit: 5, cursor: null }),
    );
    const seenAt = notes.rows[notes.rows.length - 1]?.indexed_at ?? null;
    const now = "2024-08-01T00:00:00.000Z";
    await pair.same(`seen ${viewer}`, (v) => v.notifications.markSeen(viewer, seenAt, now));
    await pair.same(`unread after seen ${viewer}`, (v) => v.notifications.unreadCount(viewer));
    await pair.same(`seen all ${viewer}`, (v) => v.notifications.markSeen(viewer, null, now));
    await pair.same(`unread after all ${viewer}`, (v) => v.notifications.unreadCount(viewer));
  }
  assert.ok(pair.asked() > 5_000, `asked ${pair.asked()}`);
});

pgTest(
  "PostgreSQL views over PgIndexWriter's rows answer as SQLite's over IndexWriter's",
  async () => {
    const world = randomWorld(23, { users: 40, posts: 800 });
    // A clock moving at every reading: both writers read it alike, but assign actor ids in
    // their own orders, which order ties of the actor-keyed lists.
    await using pair = await openPair(world.ops, { seed: 9, writer: true, tieEvery: 1 });
    await muteSome(pair, world.users);
    await askEverything(pair, world, [0, 1, 3, 5, 8].map((i) => world.users[i]));
    await askSearches(pair, [null, world.users[3]]);
  },
);

pgTest("search differs from FTS5 only where docs/behaviour.md 10.9 says", async () => {
  const author = didOf("writer");
  const texts = [
    "Straße œuvre Æther",
    "ΣΊΣΥΦΟΣ Ελλάδα",
    "½ ² ٣",
    "ﬁne Ⅻ x²",
    "plain words",
  ];
  await using pair = await openPair(
    texts.map((t, i) => postOp(author, `3kt${String(i).padStart(10, "0")}`, t)),
  );
  const found = async (q: string) => {
    const ask = (v: Views | PgViews) => v.search.search(q, { limit: 10, before: null });
    const texts = async (v: Views | PgViews) => (await ask(v)).rows.map((r) => r.text);
    return { sqlite: await texts(pair.lite), pg: await texts(pair.pg) };
  };
  // Ligatures and ß fold to their letters on PostgreSQL (unaccent), FTS5 keeps them.
  assert.deepEqual(await found("strasse"), { sqlite: [], pg: ["Straße œuvre Æther"] });
  assert.deepEqual(await found("oeuvre aether"), { sqlite: [], pg: ["Straße œuvre Æther"] });
  assert.deepEqual(await found("fine xii"), { sqlite: [], pg: ["ﬁne Ⅻ x²"] });
  assert.deepEqual(await found("ﬁne Ⅻ"), { sqlite: ["ﬁne Ⅻ x²"], pg: ["ﬁne Ⅻ x²"] });
  assert.deepEqual(await found("straße"), {
    sqlite: ["Straße œuvre Æther"],
    pg: ["Straße œuvre Æther"],
  });
  // Greek: FTS5 keeps the tonos and folds final sigma; PostgreSQL the other way round.
  assert.deepEqual(await found("ελλαδα"), { sqlite: [], pg: ["ΣΊΣΥΦΟΣ Ελλάδα"] });
  assert.deepEqual(await found("σίσυφος"), { sqlite: ["ΣΊΣΥΦΟΣ Ελλάδα"], pg: [] });
  // Numbers that are not digits (fractions, superscripts) are words to FTS5, not to PostgreSQL,
  // and a word PostgreSQL cannot index makes the whole query match nothing.
  assert.deepEqual(await found("½"), { sqlite: ["½ ² ٣"], pg: [] });
  assert.deepEqual(await found("٣ ²"), { sqlite: ["½ ² ٣"], pg: [] });
  assert.deepEqual(await found("x"), { sqlite: [], pg: ["ﬁne Ⅻ x²"] });
  assert.deepEqual(await found("x²"), { sqlite: ["ﬁne Ⅻ x²"], pg: ["ﬁne Ⅻ x²"] });
  assert.deepEqual(await found("٣"), { sqlite: ["½ ² ٣"], pg: ["½ ² ٣"] });
  assert.deepEqual(await found("plain"), { sqlite: ["plain words"], pg: ["plain words"] });
});

stopPgClusterAfterTests();
