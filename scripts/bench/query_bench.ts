/**
 * Query API latency at scale (docs/behaviour.md 12): p50/p99 over real HTTP for the home
 * timeline, profile, thread, notifications and search while ingest runs at 1,000 ops/s.
 * Budgets: p99 <= 10 ms (search <= 50 ms).
 *
 * Data set: 10,000 users with handles and profile records, 1,000,000 posts (10% replies,
 * words drawn from a skewed 5,000-word vocabulary), 50 viewers following 2,000 random accounts
 * each, likes (with notifications) on the viewers' posts. It is built through the real write
 * path (`IndexWriter.applyOps`, 10,000 ops per transaction) and cached as a SQLite file in
 * `$TMPDIR/social-query-bench/<version>.sqlite`, so later runs copy it instead of rebuilding
 * (delete the folder, or change {@link DATA_VERSION}, to rebuild). The file name keeps the schema
 * it was first built with (`schema1`): a newer schema upgrades the cached file in place through
 * its migrations when the run opens it, so schema changes need no rebuild.
 *
 * Blocks and mutes (spec 4.2 rules 10-11) are added to the run's copy, not to the cached file: each
 * viewer blocks {@link BLOCKS_PER_VIEWER} accounts (half of them accounts it follows, so the
 * timeline filter meets them), is blocked by as many, and mutes {@link MUTES_PER_VIEWER} accounts
 * it follows. The timeline and notifications read with those rows present, and profile, thread and
 * search are measured a second time with `viewerDid` (the `+viewer` rows), which applies the block
 * filter to every post they return.
 *
 * The run copies the cached file, serves the real app (`createAppviewApp`, authentication off:
 * token checks are measured by `auth_bench.ts`) with `Deno.serve` on port 0, and applies 1,000
 * ops/s (posts, likes, follows) through `applyOps` in a worker with its own connection, as the
 * consumer tasks (`deno task consumer:local`, ...) do in their own process; WAL lets the server
 * read meanwhile. The load client runs in another worker with one request in flight. Besides
 * the end-to-end latency seen by the client, the server records each request's handler time
 * (routing, queries, presenting, JSON), so queueing and HTTP cost can be told from query cost.
 *
 * Run alone: `deno task bench query` (with the server tasks' V8 flags)
 * (`QUERY_BENCH_INGEST_OPS=0` measures the queries without the background ingest).
 */

import { actorIdSql } from "../../appview/db/schema.ts";
import { DatabaseSync } from "node:sqlite";
import { silentLogger } from "../../shared/log.ts";
import {
  COLLECTION_BLOCK,
  COLLECTION_FOLLOW,
  COLLECTION_LIKE,
  COLLECTION_POST,
  COLLECTION_PROFILE,
  PROFILE_RKEY,
} from "../../shared/nsid.ts";
import type { IndexOp, RecordOp } from "../../shared/ops.ts";
import { createAppviewApp } from "../../appview/app.ts";
import { loadAppviewConfig } from "../../appview/config.ts";
import { createAppviewContext } from "../../appview/context.ts";
import { schemaVersion } from "../../appview/db/migrations.ts";
import { openIndexDb } from "../../appview/db/open.ts";
import { openSqliteIndexStore } from "../../appview/db/sqlite_store.ts";
import type { IndexStore } from "../../appview/db/store.ts";
import { cidOf } from "../../appview/_fixtures.ts";
import { IndexWriter } from "../../appview/ingest/apply_ops.ts";
import { createViews } from "../../appview/views/views.ts";
import { encodeCursor } from "../../appview/views/cursor.ts";
import { type BenchResult, percentile, printTable } from "./_types.ts";

/** Bump when the data set changes; part of the cache file name. */
export const DATA_VERSION = "v1";
const USERS = 10_000;
const POSTS = 1_000_000;
const VIEWERS = 50;
const FOLLOWS_PER_VIEWER = 2_000;
const LIKES_PER_VIEWER = 1_000;
const VOCABULARY = 5_000;
const BLOCKS_PER_VIEWER = 50;
const MUTES_PER_VIEWER = 50;
const REQUESTS = 2_000;
/** Requests per workload sent before the measured ones (not counted). */
export const WARMUP = 200;

/** Deterministic PRNG (mulberry32). */
export function rng(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** DID of bench user `i`. */
export const userDid = (i: number): string => `did:plc:${`bench${i}`.padEnd(24, "x")}`;
/** Handle of bench user `i`. */
export const handleOf = (i: number): string => `user${i}.test`;
/** User index of viewer `v`: each viewer follows 2,000 accounts. */
export const viewerIndex = (v: number): number => v * 7; // viewers are users 0, 7, 14, ...
const word = (i: number) => `w${i.toString(36)}`;
const postRkey = (i: number) => `p${i.toString(36).padStart(8, "0")}`;
const postUri = (i: number, random: () => number) =>
  `at://${userDid(authorOf(i, random))}/${COLLECTION_POST}/${postRkey(i)}`;

/** Author of post `i` (skewed activity, but deterministic per post). */
function authorOf(i: number, _random: () => number): number {
  const r = rng(i * 2654435761)();
  return Math.floor(USERS * r ** 1.5);
}

const CIDS = Array.from({ length: 64 }, (_, i) => cidOf(`bench-${i}`));
const CREATED_AT = "2024-05-01T12:00:00.000Z";

function record(
  did: string,
  collection: string,
  rkey: string,
  value: Record<string, unknown>,
  n: number,
): RecordOp {
  return {
    kind: "record",
    action: "create",
    did,
    collection,
    rkey,
    cid: CIDS[n % CIDS.length],
    record: { $type: collection, ...value },
  };
}

function postOp(i: number, random: () => number): RecordOp {
  const words: string[] = [];
  const n = 3 + Math.floor(random() * 10);
  for (let k = 0; k < n; k++) words.push(word(Math.floor(VOCABULARY * random() ** 3)));
  const value: Record<string, unknown> = {
    text: words.join(" "),
    createdAt: CREATED_AT,
    langs: ["en"],
  };
  if (i > 1000 && random() < 0.1) {
    const parent = i - 1 - Math.floor(random() * 1000);
    const uri = postUri(parent, random);
    value.reply = { root: { uri, cid: CIDS[0] }, parent: { uri, cid: CIDS[0] } };
  }
  return record(userDid(authorOf(i, random)), COLLECTION_POST, postRkey(i), value, i);
}

/** Builds the data set into `path` through the write path. */
function buildDataSet(path: string): void {
  const db = openIndexDb(path);
  try {
    db.exec("PRAGMA synchronous = OFF");
    let ms = Date.parse("2024-06-01T00:00:00.000Z");
    const writer = new IndexWriter(db, { now: () => new Date(ms++), batchSize: 10_000 });
    const random = rng(42);
    const started = performance.now();
    let ops: IndexOp[] = [];
    const flush = () => {
      writer.applyOps(ops);
      ops = [];
    };
    for (let u = 0; u < USERS; u++) {
      ops.push({ kind: "handle", did: userDid(u), handle: handleOf(u) });
      ops.push(
        record(userDid(u), COLLECTION_PROFILE, PROFILE_RKEY, {
          displayName: `User ${u}`,
          description: `Account number ${u}`,
          avatar: { $type: "blob", ref: { $link: CIDS[u % 64] }, mimeType: "image/png", size: 9 },
        }, u),
      );
    }
    flush();
    for (let v = 0; v < VIEWERS; v++) {
      const follower = userDid(viewerIndex(v));
      const set = new Set<number>();
      while (set.size < FOLLOWS_PER_VIEWER) set.add(Math.floor(random() * USERS));
      let k = 0;
      for (const s of set) {
        ops.push(record(follower, COLLECTION_FOLLOW, `f${(k++).toString(36).padStart(8, "0")}`, {
          subject: userDid(s),
          createdAt: CREATED_AT,
        }, k));
      }
      flush();
    }
    for (let i = 0; i < POSTS; i++) {
      ops.push(postOp(i, random));
      if (ops.length === 10_000) {
        flush();
        if (i % 100_000 === 99_999) {
          const s = (performance.now() - started) / 1000;
          console.error(`query bench: built ${i + 1} posts in ${s.toFixed(0)} s`);
        }
      }
    }
    flush();
    // Likes on the viewers' posts, so every viewer has notifications.
    const byAuthor = db.prepare(
      `SELECT uri FROM posts WHERE author = ${actorIdSql("?")} ORDER BY indexed_at DESC LIMIT 200`,
    );
    for (let v = 0; v < VIEWERS; v++) {
      const uris = (byAuthor.all(userDid(viewerIndex(v))) as { uri: string }[]).map((r) => r.uri);
      if (uris.length === 0) continue;
      for (let k = 0; k < LIKES_PER_VIEWER; k++) {
        const liker = userDid(Math.floor(random() * USERS));
        const subject = uris[k % uris.length];
        ops.push(record(liker, COLLECTION_LIKE, `l${v}x${k.toString(36)}`, {
          subject: { uri: subject, cid: CIDS[0] },
          createdAt: CREATED_AT,
        }, k));
      }
    }
    flush();
    db.exec("PRAGMA wal_checkpoint(TRUNCATE)");
    const s = (performance.now() - started) / 1000;
    const stats = writer.stats();
    console.error(
      `query bench: data set built through applyOps in ${s.toFixed(0)} s ` +
        `(${stats.applied} ops, ${Math.round(stats.applied / s)} ops/s)`,
    );
  } finally {
    db.close();
  }
}

/** Path of the cached data set, built when absent (also used by `web_bench.ts`). */
export async function cachedDataSet(): Promise<string> {
  const tmp = Deno.env.get("TMPDIR") ?? "/tmp";
  const dir = `${tmp}/social-query-bench`;
  await Deno.mkdir(dir, { recursive: true });
  // `schema1`: the schema the cached data sets were first built with; later migrations run on
  // the cached file below, so it stays valid across schema changes.
  const name = `${DATA_VERSION}-schema1-${POSTS}p-${USERS}u.sqlite`;
  const path = `${dir}/${name}`;
  try {
    await Deno.stat(path);
    console.error(`query bench: reusing ${path}`);
    upgradeInPlace(path);
    return path;
  } catch (e) {
    if (!(e instanceof Deno.errors.NotFound)) throw e;
    // Build below.
  }
  const building = `${path}.building-${Deno.pid}`;
  buildDataSet(building);
  await Deno.rename(building, path);
  return path;
}

/**
 * Applies pending migrations to the cached file (once: the copies then start up to date) and
 * checkpoints it, so that copying the main file alone copies every change.
 */
function upgradeInPlace(path: string): void {
  const started = performance.now();
  const before = new DatabaseSync(path, { readOnly: true });
  const version = schemaVersion(before);
  before.close();
  const db = openIndexDb(path);
  try {
    db.exec("PRAGMA wal_checkpoint(TRUNCATE)");
    const now = schemaVersion(db);
    if (now !== version) {
      const s = (performance.now() - started) / 1000;
      console.error(
        `query bench: cached data set migrated ${version} -> ${now} in ${s.toFixed(1)} s`,
      );
    }
  } finally {
    db.close();
  }
}

/**
 * Blocks both ways and mutes for every viewer (see the module comment), through the write path
 * (blocks are records) and the mute list (private, written by `/api/mutes` only).
 */
export function seedSafety(db: DatabaseSync, random: () => number): void {
  const writer = new IndexWriter(db, { now: () => new Date(Date.parse(CREATED_AT)) });
  const views = createViews(db);
  const follows = db.prepare(
    `SELECT x.did FROM follows f JOIN actors x ON x.id = f.subject
     WHERE f.follower = ${actorIdSql("?")} LIMIT ?`,
  );
  const ops: IndexOp[] = [];
  for (let v = 0; v < VIEWERS; v++) {
    const viewer = userDid(viewerIndex(v));
    const followed = (follows.all(viewer, BLOCKS_PER_VIEWER / 2 + MUTES_PER_VIEWER) as {
      did: string;
    }[]).map((r) => r.did);
    const blocked = followed.slice(0, BLOCKS_PER_VIEWER / 2);
    while (blocked.length < BLOCKS_PER_VIEWER) blocked.push(userDid(Math.floor(random() * USERS)));
    blocked.forEach((subject, k) => {
      ops.push(record(viewer, COLLECTION_BLOCK, `b${k.toString(36)}`, {
        subject,
        createdAt: CREATED_AT,
      }, k));
      // Blocked by as many: the other direction of the filter.
      const blocker = userDid(Math.floor(random() * USERS));
      ops.push(record(blocker, COLLECTION_BLOCK, `bv${v}x${k.toString(36)}`, {
        subject: viewer,
        createdAt: CREATED_AT,
      }, k));
    });
    for (const subject of followed.slice(BLOCKS_PER_VIEWER / 2)) {
      views.safety.mute(viewer, subject, CREATED_AT);
    }
  }
  writer.applyOps(ops);
}

/** One workload: its request paths (warm-up first) and p99 budget. */
export interface Workload {
  name: string;
  budgetMs: number;
  paths: string[];
}

/** The workloads' request paths, drawn from the data set in `db` (timeline cursors included). */
export function workloads(db: DatabaseSync, random: () => number): Workload[] {
  const views = createViews(db);
  const pick = <T>(xs: readonly T[]) => xs[Math.floor(random() * xs.length)];
  const viewers = Array.from({ length: VIEWERS }, (_, v) => userDid(viewerIndex(v)));
  const timeline: string[] = [];
  for (let k = 0; k < REQUESTS + WARMUP; k++) {
    const did = pick(viewers);
    let path = `/api/timeline/home?did=${did}`;
    if (k % 4 === 3) {
      // Every fourth request reads a deeper page (1 to 5 pages down).
      let next = views.timeline.home(did, { limit: 30, cursor: null }).next;
      for (let p = Math.floor(random() * 4); p > 0 && next !== null; p--) {
        next = views.timeline.home(did, { limit: 30, cursor: next }).next;
      }
      if (next !== null) path += `&cursor=${encodeCursor(next)}`;
    }
    timeline.push(path);
  }
  const replies = (db.prepare(
    "SELECT uri FROM posts WHERE parent_uri IS NOT NULL AND id % 97 = 0 LIMIT 5000",
  ).all() as { uri: string }[]).map((r) => r.uri);
  const repeat = (f: () => string) => Array.from({ length: REQUESTS + WARMUP }, f);
  const searchPath = () => {
    const q = random() < 0.5
      ? word(Math.floor(VOCABULARY * random() ** 2))
      : `${word(Math.floor(300 * random()))} ${word(Math.floor(VOCABULARY * random()))}`;
    return `/api/search?q=${encodeURIComponent(q)}`;
  };
  const asViewer = (path: string) =>
    `${path}${path.includes("?") ? "&" : "?"}viewerDid=${pick(viewers)}`;
  return [
    { name: "timeline", budgetMs: 10, paths: timeline },
    {
      name: "profile",
      budgetMs: 10,
      paths: repeat(() => `/api/profile/${handleOf(Math.floor(random() * USERS))}`),
    },
    { name: "thread", budgetMs: 10, paths: repeat(() => `/api/thread/${pick(replies)}`) },
    {
      name: "notifications",
      budgetMs: 10,
      paths: repeat(() => `/api/notifications?did=${pick(viewers)}`),
    },
    { name: "search", budgetMs: 50, paths: repeat(searchPath) },
    {
      name: "profile+viewer",
      budgetMs: 10,
      paths: repeat(() => asViewer(`/api/profile/${handleOf(Math.floor(random() * USERS))}`)),
    },
    {
      name: "thread+viewer",
      budgetMs: 10,
      paths: repeat(() => asViewer(`/api/thread/${pick(replies)}`)),
    },
    { name: "search+viewer", budgetMs: 50, paths: repeat(() => asViewer(searchPath())) },
  ];
}

/** The `n`-th op of the background ingest: posts (60%), likes (30%) and follows (10%). */
export function ingestOp(n: number, random: () => number): IndexOp {
  const author = userDid(Math.floor(random() * USERS));
  const r = random();
  if (r < 0.6) return postOp(POSTS + n, random);
  if (r < 0.9) {
    return record(author, COLLECTION_LIKE, `i${n.toString(36)}`, {
      subject: { uri: postUri(Math.floor(random() * POSTS), random), cid: CIDS[0] },
      createdAt: CREATED_AT,
    }, n);
  }
  return record(author, COLLECTION_FOLLOW, `i${n.toString(36)}`, {
    subject: userDid(Math.floor(random() * USERS)),
    createdAt: CREATED_AT,
  }, n);
}

/** Request header naming the client's batch, for the server's handler timings. */
export const BATCH_HEADER = "x-query-bench-batch";

/** Ingest rate of the background writer (docs/behaviour.md 12: 1,000 ops/s). */
export const INGEST_OPS_PER_SECOND = Number(Deno.env.get("QUERY_BENCH_INGEST_OPS") ?? 1_000);

/**
 * Starts the background ingest in a worker with its own connection to `path` (as a consumer
 * process would run): {@link INGEST_OPS_PER_SECOND} through `applyOps`, paced against the clock
 * (a late tick catches up). `stop()` resolves to the ops applied and the seconds elapsed.
 */
function startIngest(path: string): IngestHandle {
  const worker = new Worker(new URL("./_query_bench_ingest.ts", import.meta.url).href, {
    type: "module",
  });
  worker.postMessage({ path, opsPerSecond: INGEST_OPS_PER_SECOND });
  return ingestWorkerHandle(worker);
}

/**
 * The handle of a background ingest worker: `stop()` asks it to stop and resolves to the ops it
 * applied and the seconds elapsed (or rejects with its error), then ends the worker.
 */
export function ingestWorkerHandle(worker: Worker): IngestHandle {
  return {
    stop() {
      return new Promise((resolve, reject) => {
        worker.onmessage = (e) => {
          worker.terminate();
          if (e.data.error !== undefined) reject(new Error(e.data.error));
          else resolve(e.data);
        };
        worker.postMessage({ stop: true });
      });
    },
  };
}

/** The background ingest of a run: started before the load, stopped after it. */
export interface IngestHandle {
  stop(): Promise<{ ops: number; seconds: number }>;
}

/**
 * Serves the app over `store` on port 0 (recording each request's handler time), runs `loads`
 * through the load client while `startIngest`'s ingest runs, and returns the rows: the ingest's
 * rate, then p50/p99 over HTTP and of the handler for each workload (both backends' benches).
 */
export async function measureQueries(opts: {
  store: IndexStore;
  loads: Workload[];
  startIngest: () => IngestHandle | Promise<IngestHandle>;
  /** First words of each workload row (`query`, `pg query`). */
  rowPrefix: string;
  /** Name of the ingest row. */
  ingestRow: string;
  /** Prefix of the log lines. */
  logPrefix: string;
}): Promise<BenchResult[]> {
  const config = loadAppviewConfig({ APPVIEW_AUTH_REQUIRED: "false" });
  const ctx = createAppviewContext({ config, store: opts.store, log: silentLogger });
  const app = createAppviewApp(ctx, { verifier: null });
  // Handler time per batch (the client names its batch in a header).
  const handlerMs = new Map<string, number[]>();
  const timed = async (req: Request): Promise<Response> => {
    const start = performance.now();
    const res = await app.fetch(req);
    const batch = req.headers.get(BATCH_HEADER);
    if (batch !== null) {
      let xs = handlerMs.get(batch);
      if (xs === undefined) handlerMs.set(batch, xs = []);
      xs.push(performance.now() - start);
    }
    return res;
  };
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, timed);
  try {
    const url = `http://127.0.0.1:${server.addr.port}`;
    const batches = opts.loads.flatMap((w) => [
      { name: `${w.name}:warmup`, paths: w.paths.slice(0, WARMUP) },
      { name: w.name, paths: w.paths.slice(WARMUP) },
    ]);
    const ingest = await opts.startIngest();
    let results;
    let ingestRate = 0;
    try {
      results = await runClient(url, batches);
    } finally {
      const { ops, seconds } = await ingest.stop();
      ingestRate = ops / seconds;
      console.error(
        `${opts.logPrefix}: ingest ran at ${Math.round(ingestRate)} ops/s during the run`,
      );
    }
    const rows: BenchResult[] = [{
      name: opts.ingestRow,
      figure: ingestRate,
      unit: "ops/s",
      budget: `>= ${INGEST_OPS_PER_SECOND * 0.95} ops/s`,
      pass: ingestRate >= INGEST_OPS_PER_SECOND * 0.95,
    }];
    for (const w of opts.loads) {
      const r = results.get(w.name)!;
      if (r.errors > 0) console.error(`${opts.logPrefix}: ${w.name}: ${r.errors} non-200 answers`);
      const p99 = percentile(r.latenciesMs, 99);
      const over = `${opts.rowPrefix} ${w.name} over HTTP, 1M posts, ingest 1k ops/s`;
      rows.push({
        name: `${over} (p50)`,
        figure: percentile(r.latenciesMs, 50),
        unit: "ms p50",
        budget: "-",
        pass: true,
      }, {
        name: `${over} (p99)`,
        figure: p99,
        unit: "ms p99",
        budget: `<= ${w.budgetMs} ms`,
        pass: p99 <= w.budgetMs && r.errors === 0,
      });
      const handler = handlerMs.get(w.name) ?? [];
      for (const p of [50, 99]) {
        rows.push({
          name: `${opts.rowPrefix} ${w.name}: server handler time, same run (p${p})`,
          figure: percentile(handler, p),
          unit: `ms p${p}`,
          budget: "-",
          pass: true,
        });
      }
    }
    return rows;
  } finally {
    await server.shutdown();
    await server.finished;
  }
}

/** Runs the workloads in a worker against `url`; returns latencies per workload. */
export function runClient(url: string, batches: { name: string; paths: string[] }[]) {
  const worker = new Worker(new URL("./_query_bench_client.ts", import.meta.url).href, {
    type: "module",
  });
  const out = new Map<string, { latenciesMs: number[]; errors: number }>();
  return new Promise<typeof out>((resolve, reject) => {
    worker.onmessage = (e) => {
      const msg = e.data;
      if (msg.error !== undefined) {
        worker.terminate();
        reject(new Error(msg.error));
      } else if (msg.done) {
        worker.terminate();
        resolve(out);
      } else out.set(msg.name, { latenciesMs: msg.latenciesMs, errors: msg.errors });
    };
    worker.onerror = (e) => {
      worker.terminate();
      reject(e);
    };
    worker.postMessage({ url, batches });
  });
}

export async function benchQueries(): Promise<BenchResult[]> {
  const cached = await cachedDataSet();
  const work = await Deno.makeTempDir({ prefix: "social-query-bench-run-" });
  const path = `${work}/index.sqlite`;
  await Deno.copyFile(cached, path);
  const db = openIndexDb(path);
  try {
    seedSafety(db, rng(7));
    const store = openSqliteIndexStore(db, { log: silentLogger });
    return await measureQueries({
      store,
      loads: workloads(db, rng(1)),
      startIngest: () => startIngest(path),
      rowPrefix: "query",
      ingestRow: "query bench: background ingest through applyOps (separate connection)",
      logPrefix: "query bench",
    });
  } finally {
    db.close();
    await Deno.remove(work, { recursive: true });
  }
}

if (import.meta.main) printTable(await benchQueries());
