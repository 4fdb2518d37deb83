/**
 * Query API latency at scale on PostgreSQL (issue 40; docs/behaviour.md 12): the workloads,
 * budgets (p99 <= 10 ms, search <= 50 ms) and rows of `query_bench.ts`, against the index on a
 * throwaway cluster on this machine (`runtime/_postgres.ts`) with the durable settings of
 * `pg_ingest_bench.ts`.
 *
 * Data set: the very rows of the SQLite run. The cached SQLite data set (`cachedDataSet`, built
 * when absent) is copied, its blocks and mutes seeded as the SQLite run seeds them
 * (`seedSafety`), and the request paths drawn from it (`workloads`, same seeds, so both benches
 * send the same requests). Its tables are then copied into the PostgreSQL schema with COPY, ids
 * kept, secondary indexes dropped before and built after each table's COPY (the search index
 * among them), the identity sequences moved past the copied ids, then ANALYZE. Nothing is
 * cached on PostgreSQL: the load takes about a minute and a half on this machine.
 *
 * The run serves the real app (`createAppviewApp` over `openPgIndexStore`, authentication off)
 * with `Deno.serve` on port 0, applies 1,000 ops/s through `PgIndexWriter.applyOps` in a worker
 * with its own connections (`_pg_query_bench_ingest.ts`), and measures with `query_bench.ts`'s
 * load client (one request in flight, in a worker). Skipped, with the message saying how to
 * install PostgreSQL, when it is not installed.
 *
 * Run alone: `deno task bench pg-query`; alternate with `deno task bench query` to compare
 * (`QUERY_BENCH_INGEST_OPS=0` measures the queries without the background ingest).
 */

import { DatabaseSync } from "node:sqlite";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import postgres from "postgres";
import { silentLogger } from "../../shared/log.ts";
import { POSTGRES_SKIP_MESSAGE, startPostgres } from "../../runtime/_postgres.ts";
import { openIndexDb } from "../../appview/db/open.ts";
import { openPgIndexStore, type PgIndexStore } from "../../appview/db/pg/store.ts";
import { BENCH_SETTINGS } from "./pg_ingest_bench.ts";
import {
  cachedDataSet,
  INGEST_OPS_PER_SECOND,
  type IngestHandle,
  ingestWorkerHandle,
  measureQueries,
  rng,
  seedSafety,
  type Workload,
  workloads,
} from "./query_bench.ts";
import { type BenchResult, printTable } from "./_types.ts";

/** The index tables copied, parents before the tables that refer to them. */
const TABLES = [
  "actors",
  "profiles",
  "posts",
  "likes",
  "reposts",
  "follows",
  "blocks",
  "mutes",
  "notifications",
  "repo_revs",
  "inactive_actors",
] as const;
/** Tables whose `id` is an identity column, moved past the copied ids. */
const IDENTITY_TABLES = ["actors", "posts", "notifications"] as const;
/** Rows of COPY text per chunk written to the connection. */
const COPY_CHUNK_ROWS = 2_000;

/** A value in COPY's text format (`\N` for null; backslash, tab, newline, return escaped). */
function copyValue(v: unknown): string {
  if (v === null || v === undefined) return "\\N";
  const s = String(v);
  return /[\\\t\n\r]/.test(s)
    ? s.replace(/\\/g, "\\\\").replace(/\t/g, "\\t").replace(/\n/g, "\\n").replace(/\r/g, "\\r")
    : s;
}

/** The rows of `rows` as COPY text, {@link COPY_CHUNK_ROWS} a chunk, counted in `counted`. */
function* copyChunks(
  rows: Iterable<unknown>,
  columns: readonly string[],
  counted: { rows: number },
): Generator<string> {
  let chunk: string[] = [];
  for (const row of rows as Iterable<Record<string, unknown>>) {
    chunk.push(columns.map((c) => copyValue(row[c])).join("\t"));
    counted.rows++;
    if (chunk.length === COPY_CHUNK_ROWS) {
      yield chunk.join("\n") + "\n";
      chunk = [];
    }
  }
  if (chunk.length > 0) yield chunk.join("\n") + "\n";
}

/**
 * Copies the index tables of the SQLite file `db` into the PostgreSQL database at `url` (migrated
 * and empty): per table, its secondary indexes dropped, COPY, the indexes built again; then the
 * identity sequences and ANALYZE. Returns the rows copied.
 */
export async function copyIntoPg(db: DatabaseSync, url: string): Promise<number> {
  const sql = postgres(url, {
    max: 1,
    onnotice: () => {},
    connection: { application_name: "pg-query-bench load", maintenance_work_mem: "512MB" },
  });
  let total = 0;
  try {
    for (const table of TABLES) {
      const started = performance.now();
      const columns = (db.prepare(`SELECT name FROM pragma_table_info('${table}')`).all() as {
        name: string;
      }[]).map((r) => r.name);
      // Indexes that back no constraint (primary keys stay): built once, after the rows.
      const indexes = await sql<{ indexname: string; indexdef: string }[]>`
        SELECT indexname, indexdef FROM pg_indexes
        WHERE schemaname = current_schema() AND tablename = ${table}
          AND indexname NOT IN (SELECT conname FROM pg_constraint)`;
      for (const ix of indexes) await sql.unsafe(`DROP INDEX ${ix.indexname}`);
      const select = db.prepare(`SELECT ${columns.join(", ")} FROM ${table}`);
      const counted = { rows: 0 };
      const writable = await sql.unsafe(`COPY ${table} (${columns.join(", ")}) FROM STDIN`)
        .writable();
      await pipeline(Readable.from(copyChunks(select.iterate(), columns, counted)), writable);
      const copied = performance.now();
      for (const ix of indexes) await sql.unsafe(ix.indexdef);
      const rows = counted.rows;
      total += rows;
      if (rows > 0) {
        console.error(
          `pg-query: ${table}: ${rows} rows copied in ${
            ((copied - started) / 1000).toFixed(1)
          } s, ` +
            `${indexes.length} indexes built in ${
              ((performance.now() - copied) / 1000).toFixed(1)
            } s`,
        );
      }
    }
    for (const table of IDENTITY_TABLES) {
      await sql.unsafe(
        `SELECT setval(pg_get_serial_sequence('${table}', 'id'), coalesce(max(id), 0) + 1, false)
         FROM ${table}`,
      );
    }
    await sql`ANALYZE`;
    await sql`CHECKPOINT`;
  } finally {
    await sql.end();
  }
  return total;
}

/**
 * Starts the background ingest in a worker with its own connections to `url`; resolves once it
 * is connected. `stop()` resolves to the ops applied and the seconds elapsed.
 */
async function startPgIngest(
  url: string,
): Promise<IngestHandle> {
  const worker = new Worker(new URL("./_pg_query_bench_ingest.ts", import.meta.url).href, {
    type: "module",
  });
  await new Promise<void>((resolve, reject) => {
    worker.onmessage = (e) => {
      if (e.data.error !== undefined) {
        worker.terminate();
        reject(new Error(e.data.error));
      } else resolve();
    };
    worker.postMessage({ url, opsPerSecond: INGEST_OPS_PER_SECOND });
  });
  return ingestWorkerHandle(worker);
}

/** Runs the benchmark and returns its rows (none when PostgreSQL is not installed). */
export async function benchPgQueries(): Promise<BenchResult[]> {
  const pg = await startPostgres({ settings: BENCH_SETTINGS });
  if (pg === null) {
    console.error(`pg-query: ${POSTGRES_SKIP_MESSAGE}`);
    return [];
  }
  const work = await Deno.makeTempDir({ prefix: "social-pg-query-bench-run-" });
  let store: PgIndexStore | null = null;
  try {
    // The SQLite run's rows and requests: its data set, its blocks and mutes, its paths.
    const path = `${work}/index.sqlite`;
    await Deno.copyFile(await cachedDataSet(), path);
    let loads: Workload[];
    const dbUrl = await pg.createDatabase("query_bench");
    const db = openIndexDb(path);
    const loadStarted = performance.now();
    try {
      seedSafety(db, rng(7));
      loads = workloads(db, rng(1));
      store = await openPgIndexStore(dbUrl, { log: silentLogger });
      const rows = await copyIntoPg(db, dbUrl);
      console.error(
        `pg-query: ${rows} rows loaded into PostgreSQL in ` +
          `${((performance.now() - loadStarted) / 1000).toFixed(0)} s`,
      );
    } finally {
      db.close();
    }
    await Deno.remove(work, { recursive: true });

    return await measureQueries({
      store,
      loads,
      startIngest: () => startPgIngest(dbUrl),
      rowPrefix: "pg query",
      ingestRow: "pg query bench: background ingest through PgIndexWriter (own connections)",
      logPrefix: "pg-query",
    });
  } finally {
    await store?.close();
    await Deno.remove(work, { recursive: true }).catch(() => {});
    await pg.stop();
  }
}

if (import.meta.main) printTable(await benchPgQueries());
