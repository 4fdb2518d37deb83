/**
 * Index ingest benchmark on PostgreSQL (issue 40): ops/s through `PgIndexWriter.applyOps`, the
 * same realistic mix, size and calls as `ingest_bench.ts` (SQLite), against a throwaway cluster
 * on this machine (`runtime/_postgres.ts`) with durable settings: fsync and full-page writes on,
 * 256 MB of shared buffers (SQLite's page cache is 256 MiB), the writer committing with
 * `synchronous_commit = off` as it always does (SQLite's `synchronous = NORMAL`). Ops are
 * generated before the clock starts; validation, SQL and commits are timed, and a CHECKPOINT at
 * the end (the data files written, as the SQLite bench's WAL checkpoint).
 *
 * Budget (issue 40): at least 10,000 ops/s with the database on the same machine. Skipped, with
 * the message saying how to install PostgreSQL, when it is not installed.
 *
 * Run alone: `deno task bench pg-ingest`; alternate with `deno task bench ingest` to compare.
 */

import { POSTGRES_SKIP_MESSAGE, startPostgres } from "../../runtime/_postgres.ts";
import { openPgIndex } from "../../appview/db/pg/open.ts";
import { PgIndexWriter } from "../../appview/ingest/pg/pg_writer.ts";
import { generateOps, timedIngest } from "./ingest_bench.ts";
import { type BenchResult, informationalRow } from "./_types.ts";

const TOTAL_OPS = Number(Deno.env.get("INGEST_BENCH_OPS") ?? 200_000);
/** The PostgreSQL ingest budget (issue 40), in ops a second. */
export const PG_INGEST_BUDGET_OPS_PER_SECOND = 10_000;

/** Server settings of the benchmark's cluster: durable, as a deployment runs it. */
export const BENCH_SETTINGS: Readonly<Record<string, string>> = Object.freeze({
  fsync: "on",
  full_page_writes: "on",
  synchronous_commit: "on",
  shared_buffers: "256MB",
  max_wal_size: "4GB",
});

function budgetRow(name: string, figure: number): BenchResult {
  return {
    name,
    figure,
    unit: "ops/s",
    budget: ">= 10,000 ops/s",
    pass: figure >= PG_INGEST_BUDGET_OPS_PER_SECOND,
  };
}

/** Runs the benchmark and returns its figures (none when PostgreSQL is not installed). */
export async function benchPgIngest(): Promise<BenchResult[]> {
  const fastPath = Deno.env.get("PG_INGEST_FAST_PATH") !== "0";
  const settings = Deno.env.get("PG_INGEST_TEST_SETTINGS") === "1" ? {} : BENCH_SETTINGS;
  const pg = await startPostgres({ settings });
  if (pg === null) {
    console.error(`pg-ingest: ${POSTGRES_SKIP_MESSAGE}`);
    return [];
  }
  try {
    const ops = generateOps(TOTAL_OPS);
    const sql = await openPgIndex(await pg.createDatabase("ingest_bench"), { max: 2 });
    try {
      await sql`CHECKPOINT`;
      const writer = new PgIndexWriter(sql, { fastPath }); // default batch size
      let checkpointStart = 0;
      const { start, end, cpu, overall, secondHalf, secondHalfOps } = await timedIngest(
        writer,
        ops,
        async () => {
          checkpointStart = performance.now();
          await sql`CHECKPOINT`;
        },
      );
      const stats = writer.stats();
      if (stats.skipped !== 0) throw new Error(`Benchmark ops were skipped: ${stats.skipped}`);
      const [{ n }] = await sql`SELECT count(*) AS n FROM notifications`;
      console.error(
        `pg-ingest: ${ops.length} ops in ${((end - start) / 1000).toFixed(2)} s, ` +
          `${n} notifications, ${stats.batches} transactions, fast path ${fastPath}, ` +
          `final CHECKPOINT ${((end - checkpointStart) / 1000).toFixed(2)} s, ` +
          `${((cpu.user + cpu.system) / 1e6).toFixed(2)} s CPU in this process`,
      );
      return [
        budgetRow(
          `index ingest on PostgreSQL (applyOps, realistic mix, ${ops.length / 1000}k ops)`,
          overall,
        ),
        budgetRow(
          `index ingest on PostgreSQL, second ${secondHalfOps / 1000}k ops (sustained)`,
          secondHalf,
        ),
        informationalRow(
          "index ingest on PostgreSQL per CPU-second of the writer process (informational)",
          ops.length / ((cpu.user + cpu.system) / 1e6),
          "ops/cpu-s",
        ),
      ];
    } finally {
      await sql.end();
    }
  } finally {
    await pg.stop();
  }
}

if (import.meta.main) {
  const { printTable } = await import("./_types.ts");
  printTable(await benchPgIngest());
}
