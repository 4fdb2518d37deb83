/**
 * `deno task bench [name...]`: runs the benchmarks under `scripts/bench/` and prints one table
 * (name, figure, budget, pass/miss) against the budgets of docs/behaviour.md 12.
 *
 * Each benchmark runs in a process of its own (this script again, with `--child <name>`), as
 * each server runs in a deployment: the account host's commit latency is not measured in a
 * heap that still holds what the index benchmarks before it built (in one process the host's
 * createRecord throughput was about a fifth lower, and its garbage collections longer).
 *
 * Speed is measured here, never by timed unit tests.
 */

import { type BenchResult, printTable } from "./_types.ts";

/** Every benchmark: its short name, module (beside this file) and exported function. */
const BENCHES: readonly { name: string; module: string; fn: string }[] = [
  { name: "ingest", module: "./ingest_bench.ts", fn: "benchIngest" },
  { name: "pg-ingest", module: "./pg_ingest_bench.ts", fn: "benchPgIngest" },
  { name: "stream-ingest", module: "./stream_ingest_bench.ts", fn: "benchStreamIngest" },
  { name: "commits", module: "./commit_bench.ts", fn: "benchCommits" },
  { name: "fanout", module: "./fanout_bench.ts", fn: "benchFanout" },
  { name: "auth", module: "./auth_bench.ts", fn: "benchAuth" },
  { name: "query", module: "./query_bench.ts", fn: "benchQueries" },
  { name: "pg-query", module: "./pg_query_bench.ts", fn: "benchPgQueries" },
  { name: "web", module: "./web_bench.ts", fn: "benchWeb" },
  {
    name: "subscriber-memory",
    module: "./subscriber_memory_bench.ts",
    fn: "benchSubscriberMemory",
  },
  { name: "public-ingest", module: "./public_ingest_bench.ts", fn: "benchPublicIngest" },
  { name: "backfill", module: "./backfill_bench.ts", fn: "benchBackfill" },
];

/**
 * The V8 flags of the server tasks (deno.json: `pds`, `appview`, `dev`, ...), given to every
 * benchmark process so that each measures its server as those tasks run it (docs/operations.md,
 * "Garbage collection"). Concurrent marking is off: on a 2-core box, V8's marking threads took the
 * cores the main thread and KV's SQLite writer were using, and each major GC of the account host
 * became a burst of createRecord latency (p99 at 1,000/s stayed within 25 ms in 3 of 16 runs with
 * it, 10 of 16 without; spec 4.1, docs/behaviour.md 12). A 256 MB initial old space makes those
 * major GCs about 3-8 times rarer under load, for about 250-300 MB of heap.
 */
export const SERVER_V8_FLAGS: readonly string[] = [
  "--v8-flags=--no-concurrent-marking,--initial-old-space-size=256",
];

/** The permission set of `deno task bench` (deno.json `permissions`), for the benchmark processes. */
export const CHILD_PERMISSIONS: readonly string[] = ["-P=test"];
/** Marks the line of a benchmark process's stdout that carries its results. */
const RESULTS_PREFIX = "bench-results ";

/** Runs one benchmark in this process (`--child <name>`): results on stdout, one line. */
async function child(name: string): Promise<number> {
  const bench = BENCHES.find((b) => b.name === name);
  if (!bench) throw new Error(`Unknown benchmark: ${name}`);
  const mod = await import(new URL(bench.module, import.meta.url).href);
  const results: BenchResult[] = await mod[bench.fn]();
  console.log(RESULTS_PREFIX + JSON.stringify(results));
  return 0;
}

/** The `deno` arguments of the process that runs benchmark `name`. */
export function childArgs(name: string): string[] {
  return [
    "run",
    `--config=${new URL("../../deno.json", import.meta.url).pathname}`,
    ...SERVER_V8_FLAGS,
    ...CHILD_PERMISSIONS,
    new URL(import.meta.url).pathname,
    "--child",
    name,
  ];
}

/** Runs one benchmark in a new process; its progress goes to stderr as it runs. */
async function runIsolated(name: string): Promise<BenchResult[]> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: childArgs(name),
    stdin: "null",
    stdout: "piped",
    stderr: "inherit",
  }).output();
  const text = new TextDecoder().decode(out.stdout);
  const line = text.split("\n").find((l) => l.startsWith(RESULTS_PREFIX));
  if (!out.success || line === undefined) {
    throw new Error(`benchmark ${name} failed (exit code ${out.code})`);
  }
  return JSON.parse(line.slice(RESULTS_PREFIX.length));
}

async function main(args: string[]): Promise<number> {
  if (args[0] === "--child") return await child(args[1]);
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
    rows.push(...await runIsolated(bench.name));
  }
  console.log("");
  printTable(rows);
  return rows.every((r) => r.pass) ? 0 : 1;
}

if (import.meta.main) Deno.exit(await main(Deno.args));
