/**
 * Index ingest benchmark (docs/behaviour.md 12): ops/s through the store's `writer.applyOps`
 * (`db/store.ts`, the boundary every ingest source calls) on a temporary SQLite file, for a realistic mix of posts (with full-text indexing and replies),
 * likes, reposts, follows, deletes, profile records and handle ops, most of them creating
 * notifications. Ops are generated before the clock starts; validation, SQL and commits are
 * timed. Local-stream CBOR decoding is measured by the consumer's own benchmark.
 *
 * Run alone: `deno task bench ingest` (with the server tasks' V8 flags).
 */

import { WalCheckpointer } from "../../runtime/wal_checkpointer.ts";
import { openIndexDb } from "../../appview/db/open.ts";
import { silentLogger } from "../../shared/log.ts";
import { openSqliteIndexStore } from "../../appview/db/sqlite_store.ts";
import { MAX_BATCH_OPS } from "../../appview/ingest/sources/stream_queue.ts";
import {
  cidOf,
  deleteOp,
  didOf,
  followOp,
  handleOp,
  likeOp,
  postOp,
  profileOp,
  repostOp,
  uriOf,
} from "../../appview/_fixtures.ts";
import { COLLECTION_FOLLOW, COLLECTION_LIKE, COLLECTION_POST } from "../../shared/nsid.ts";
import type { IndexOp } from "../../shared/ops.ts";
import process from "node:process";
import { type BenchResult, informationalRow, ingestBudgetRow, printTable } from "./_types.ts";

const TOTAL_OPS = Number(Deno.env.get("INGEST_BENCH_OPS") ?? 200_000);
const USERS = 10_000;
/** Ops per applyOps call: what a consumer folds from a backlog (`MAX_BATCH_OPS`). */
const CHUNK = MAX_BATCH_OPS;

/** Deterministic pseudo-random numbers (mulberry32). */
function makeRandom(seed: number): (n: number) => number {
  let s = seed;
  return (n) => {
    s = (s + 0x6d2b79f5) | 0;
    let t = Math.imul(s ^ (s >>> 15), 1 | s);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return Math.floor((((t ^ (t >>> 14)) >>> 0) / 4294967296) * n);
  };
}

/**
 * Builds the op mix: 30% posts (a quarter replies), 35% likes, 12% reposts, 14% follows,
 * 6% deletes, 2% profiles, 1% handles.
 */
export function generateOps(total: number): IndexOp[] {
  const rand = makeRandom(42);
  const words = Array.from({ length: 2000 }, (_, i) => `w${i.toString(36)}${"abcdefgh"[i % 8]}`);
  const dids = Array.from({ length: USERS }, (_, i) => didOf(`user${i}`));
  const posts: string[] = [];
  const likes: { did: string; rkey: string }[] = [];
  const follows: { did: string; rkey: string }[] = [];
  const recentPost = () =>
    posts[Math.max(0, posts.length - 1 - rand(Math.min(posts.length, 5000)))];
  const ops: IndexOp[] = [];
  // Start with a few thousand posts so likes and replies have subjects.
  for (let i = 0; ops.length < total; i++) {
    const did = dids[rand(USERS)];
    const roll = posts.length < 2000 ? 0 : rand(100);
    const rkey = `r${i.toString(36)}`;
    if (roll < 30) {
      const n = 6 + rand(14);
      const text = Array.from({ length: n }, () => words[rand(words.length)]).join(" ");
      const parent = posts.length > 0 && rand(4) === 0 ? recentPost() : undefined;
      ops.push(postOp(did, rkey, text.slice(0, 160), { parent, langs: ["en"] }));
      posts.push(uriOf(did, COLLECTION_POST, rkey));
    } else if (roll < 65) {
      ops.push(likeOp(did, rkey, recentPost()));
      likes.push({ did, rkey });
    } else if (roll < 77) {
      ops.push(repostOp(did, rkey, recentPost()));
    } else if (roll < 91) {
      ops.push(followOp(did, rkey, dids[rand(USERS)]));
      follows.push({ did, rkey });
    } else if (roll < 94) {
      const like = likes[rand(likes.length)];
      ops.push(deleteOp(like.did, COLLECTION_LIKE, like.rkey));
    } else if (roll < 96) {
      const follow = follows[rand(follows.length)];
      ops.push(deleteOp(follow.did, COLLECTION_FOLLOW, follow.rkey));
    } else if (roll < 97) {
      const uri = posts[rand(posts.length)];
      const [, , author, , postRkey] = uri.split("/");
      ops.push(deleteOp(author, COLLECTION_POST, postRkey));
    } else if (roll < 99) {
      ops.push(profileOp(did, { displayName: `User ${i}`, avatar: cidOf(`avatar${i}`) }));
    } else {
      ops.push(handleOp(did, `user${i}.test`));
    }
  }
  return ops;
}

/** What {@link timedIngest} measured. */
export interface IngestTiming {
  start: number;
  end: number;
  /** CPU of this process over the run. */
  cpu: NodeJS.CpuUsage;
  /** Ops a second over the whole run. */
  overall: number;
  /** Ops a second after the first chunk boundary at or past the middle (all when one chunk). */
  secondHalf: number;
  /** How many ops that second part holds. */
  secondHalfOps: number;
}

/**
 * Applies `ops` through `writer` in calls of {@link CHUNK} ops, as a stream consumer hands them
 * over, then `flush` (what makes the work durable in the database files), all inside the timed
 * window. Shared by the SQLite and the PostgreSQL ingest benches.
 */
export async function timedIngest(
  writer: { applyOps(ops: IndexOp[]): Promise<unknown> },
  ops: IndexOp[],
  flush: () => unknown,
): Promise<IngestTiming> {
  const cpuStart = process.cpuUsage();
  const start = performance.now();
  let halfway = start;
  let halfwayOps = 0;
  for (let i = 0; i < ops.length; i += CHUNK) {
    await writer.applyOps(ops.slice(i, i + CHUNK));
    const done = Math.min(ops.length, i + CHUNK);
    if (halfwayOps === 0 && done >= ops.length / 2 && done < ops.length) {
      halfway = performance.now();
      halfwayOps = done;
    }
  }
  await flush();
  const end = performance.now();
  const cpu = process.cpuUsage(cpuStart);
  const overall = ops.length / ((end - start) / 1000);
  return {
    start,
    end,
    cpu,
    overall,
    secondHalf: halfwayOps === 0 ? overall : (ops.length - halfwayOps) / ((end - halfway) / 1000),
    secondHalfOps: ops.length - halfwayOps,
  };
}

/** Runs the ingest benchmark and returns its figures. */
export async function benchIngest(): Promise<BenchResult[]> {
  const ops = generateOps(TOTAL_OPS);
  const dir = await Deno.makeTempDir({ prefix: "ingest-bench-" });
  const db = openIndexDb(`${dir}/index.sqlite`);
  // As the server runs its writer: the WAL copied back by a worker thread.
  const checkpointer = new WalCheckpointer(`${dir}/index.sqlite`, { log: silentLogger });
  try {
    if (!checkpointer.start()) throw new Error("The checkpoint worker did not start");
    // Default batch size, as the server's writer.
    const writer = openSqliteIndexStore(db, { log: silentLogger }).writer;
    // Sustained means durable in the database file: what is left in the WAL is copied back
    // inside the timed window.
    const { start, end, cpu, overall, secondHalf, secondHalfOps } = await timedIngest(
      writer,
      ops,
      () => db.exec("PRAGMA wal_checkpoint(PASSIVE)"),
    );
    const stats = writer.stats();
    if (stats.skipped !== 0) throw new Error(`Benchmark ops were skipped: ${stats.skipped}`);
    const notifications = db.prepare("SELECT count(*) AS n FROM notifications").get()?.n;
    console.error(
      `ingest: ${ops.length} ops in ${((end - start) / 1000).toFixed(2)} s, ` +
        `${notifications} notifications, ${stats.batches} transactions, ` +
        `${((cpu.user + cpu.system) / 1e6).toFixed(2)} s CPU (${
          (cpu.system / 1e6).toFixed(2)
        } s system)`,
    );
    const perCpuSecond = ops.length / ((cpu.user + cpu.system) / 1e6);
    return [
      ingestBudgetRow(`index ingest (applyOps, realistic mix, ${ops.length / 1000}k ops)`, overall),
      ingestBudgetRow(
        `index ingest, second ${secondHalfOps / 1000}k ops (sustained)`,
        secondHalf,
      ),
      // Informational: throughput per CPU-second of this process, which stays meaningful
      // when other processes compete for the two cores.
      informationalRow("index ingest per CPU-second (informational)", perCpuSecond, "ops/cpu-s"),
    ];
  } finally {
    await checkpointer.stop();
    db.close();
    await Deno.remove(dir, { recursive: true });
  }
}

if (import.meta.main) printTable(await benchIngest());
