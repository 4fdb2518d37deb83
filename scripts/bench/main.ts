/**
 * `deno task bench [name...]`: runs the benchmarks under `scripts/bench/` and prints one table
 * (name, figure, budget, pass/miss) against the budgets of DESIGN.md section 8.
 *
 * Speed is measured here, never by timed unit tests.
 */

import { type BenchResult, printTable } from "./_types.ts";

/** Every benchmark: its short name, module (beside this file) and exported function. */
const BENCHES: readonly { name: string; module: string; fn: string }[] = [
  { name: "ingest", module: "./ingest_bench.ts", fn: "benchIngest" },
  { name: "stream-ingest", module: "./stream_ingest_bench.ts", fn: "benchStreamIngest" },
  { name: "commits", module: "./commit_bench.ts", fn: "benchCommits" },
  { name: "fanout", module: "./fanout_bench.ts", fn: "benchFanout" },
  { name: "auth", module: "./auth_bench.ts", fn: "benchAuth" },
  { name: "query", module: "./query_bench.ts", fn: "benchQueries" },
];

async function main(args: string[]): Promise<number> {
  const wanted = args.length === 0 ? BENCHES : BENCHES.filter((b) => args.includes(b.name));
  if (wanted.length === 0) {
    console.error(`Unknown benchmark: ${args.join(", ")} (known: ${BENCHES.map((b) => b.name)})`);
    return 2;
  }
  const rows: BenchResult[] = [];
  for (const bench of wanted) {
    const url = new URL(bench.module, import.meta.url);
    try {
      await Deno.stat(url);
    } catch {
      console.error(`${bench.name}: ${bench.module} is not built yet, skipped`);
      continue;
    }
    console.error(`running ${bench.name} ...`);
    const mod = await import(url.href);
    const results: BenchResult[] = await mod[bench.fn]();
    rows.push(...results);
  }
  console.log("");
  printTable(rows);
  return rows.every((r) => r.pass) ? 0 : 1;
}

if (import.meta.main) Deno.exit(await main(Deno.args));
