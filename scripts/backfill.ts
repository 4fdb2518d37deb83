/**
 * `deno task backfill [--all | DID...]` (docs/operations.md "Rebuilding the index",
 * docs/behaviour.md 6.2 rule 11): fetches repositories from the account host and applies them to
 * the index through its one write path, with the index's own settings (`APPVIEW_DB_PATH` or
 * `DATA_DIR`, or `APPVIEW_DATABASE_URL` for an index on PostgreSQL; `PDS_INTERNAL_URL` /
 * `PDS_PUBLIC_URL`, `APPVIEW_BACKFILL_*`).
 *
 * - `--all`: every repository the account host lists (`listRepos`, paged): each account is made
 *   known, inactive ones are marked so, every active repository is fetched, and repositories the
 *   index holds as the host's that it no longer lists are removed. Rebuilds a deleted index.
 * - `DID...`: those repositories.
 *
 * The work goes through the index's durable backfill queue: a repository that fails stays queued
 * (with its backoff) for the running index to retry, and an interrupted run loses nothing. The
 * index may be running meanwhile. Progress goes to stdout once a second, then a summary; JSON log
 * lines go to stderr. Exit codes: 0 done, 1 some repositories failed (or the host could not be
 * listed), 2 bad arguments.
 *
 * @module
 */

import { parseArgs } from "node:util";
import { loadAppviewConfig, readAppviewEnv } from "../appview/config.ts";
import { createAppviewContext } from "../appview/context.ts";
import type { BackfillQueue } from "../appview/db/backfill_state.ts";
import { openIndexStore } from "../appview/db/open.ts";
import type { AsyncMethods } from "../appview/db/store.ts";
import {
  Backfiller,
  type BackfillOutcome,
  createRepoSource,
} from "../appview/ingest/backfill/backfiller.ts";
import { compareWithHost } from "../appview/ingest/backfill/host_reconcile.ts";
import { createLogger } from "../shared/log.ts";
import { isValidDid } from "../shared/syntax.ts";
import { type CliIo, CliUsageError, parseCliArgs } from "./_pds_store.ts";

const USAGE = "Usage: deno task backfill [--all | <DID>...]";
const PROGRESS_MS = 1_000;

/** Totals of one run. */
interface Tally {
  applied: number;
  unchanged: number;
  inactive: number;
  removed: number;
  gone: number;
  failed: number;
  records: number;
}

/** Runs the command line on `args` with the index environment `env`; returns the exit code. */
export async function runBackfillCli(
  args: string[],
  env: Record<string, string | undefined>,
  io: CliIo,
): Promise<number> {
  const parsed = parseCliArgs("backfill", io, USAGE, () => {
    const { values, positionals } = parseArgs({
      args,
      options: { all: { type: "boolean" }, help: { type: "boolean" } },
      allowPositionals: true,
      strict: true,
    });
    if (values.help) return { help: true as const };
    if (values.all && positionals.length > 0) {
      throw new CliUsageError("Give --all or DIDs, not both");
    }
    if (!values.all && positionals.length === 0) throw new CliUsageError("Give --all or DIDs");
    for (const did of positionals) {
      if (!isValidDid(did)) throw new CliUsageError(`Not a DID: ${JSON.stringify(did)}`);
    }
    return { all: values.all === true, dids: positionals };
  });
  if (parsed === null) return 2;
  if ("help" in parsed) {
    io.out(USAGE);
    io.out("  --all    every repository the account host lists (rebuilds the index)");
    io.out("  <DID>... these repositories");
    return 0;
  }
  const config = loadAppviewConfig(env);
  const log = createLogger("backfill", { level: config.logLevel });
  const store = await openIndexStore(config, { log: log.child("writer") });
  try {
    const ctx = createAppviewContext({ config, store, log });
    const source = createRepoSource(config);
    const queue = store.state.backfillQueue;
    const started = performance.now();
    const elapsed = () => `${((performance.now() - started) / 1000).toFixed(1)} s`;
    let target: number;
    if (parsed.all) {
      io.out(`Listing the repositories of ${config.pdsUrl} ...`);
      let found;
      try {
        found = await compareWithHost(ctx, source, {
          all: true,
          reason: "requested",
          immediate: true,
          onPage: (n) => io.out(`  listed ${n} repositories`),
        });
      } catch (e) {
        io.err(`backfill: cannot list the repositories of ${config.pdsUrl}: ${messageOf(e)}`);
        return 1;
      }
      io.out(
        `Listed ${found.listed} repositories (${found.inactive} inactive, ${found.skipped} malformed entries left out); ${found.vanished} held by the index are no longer listed`,
      );
      target = found.queued;
    } else {
      const at = ctx.now().toISOString();
      for (const did of parsed.dids) await queue.requestNow(did, "requested", null, at);
      target = parsed.dids.length;
    }
    const tally: Tally = {
      applied: 0,
      unchanged: 0,
      inactive: 0,
      removed: 0,
      gone: 0,
      failed: 0,
      records: 0,
    };
    const failures: string[] = [];
    const worker = new Backfiller(ctx, {
      source,
      concurrency: config.backfill.concurrency,
      onOutcome: (did, outcome) => count(tally, failures, did, outcome),
    });
    io.out(`Fetching ${target} repositories, ${config.backfill.concurrency} at a time ...`);
    const done = () =>
      tally.applied + tally.unchanged + tally.inactive + tally.removed + tally.gone + tally.failed;
    const progress = setInterval(() => {
      io.out(
        `  [${elapsed()}] ${done()} of ${target} repositories, ${tally.records} records, ${tally.failed} failed`,
      );
    }, PROGRESS_MS);
    try {
      await drain(worker, queue, ctx.now);
    } finally {
      clearInterval(progress);
      await worker.close();
    }
    const seconds = (performance.now() - started) / 1000;
    const rate = seconds > 0 ? Math.round(tally.records / seconds) : tally.records;
    io.out(
      `Backfill done in ${elapsed()}: ${tally.applied} repositories applied (${tally.records} records, ${rate} records/s), ${tally.unchanged} already current, ${tally.inactive} inactive, ${tally.removed} removed, ${tally.gone} not on the host, ${tally.failed} failed`,
    );
    for (const line of failures) io.out(`  failed ${line}`);
    const left = (await queue.counts()).queued;
    if (left > 0) io.out(`${left} repositories stay queued; the running index retries them`);
    return tally.failed > 0 ? 1 : 0;
  } finally {
    await store.close();
  }
}

/** Runs the worker until nothing due is left and nothing is in flight. */
async function drain(
  worker: Backfiller,
  queue: AsyncMethods<BackfillQueue>,
  now: () => Date,
): Promise<void> {
  for (;;) {
    await worker.wake();
    if (worker.running === 0 && (await queue.due(now().toISOString(), 1)).length === 0) return;
    await new Promise((r) => setTimeout(r, 20));
  }
}

function count(tally: Tally, failures: string[], did: string, outcome: BackfillOutcome | Error) {
  if (outcome instanceof Error) {
    tally.failed++;
    failures.push(`${did}: ${outcome.message}`);
    return;
  }
  switch (outcome.kind) {
    case "applied":
      tally.applied++;
      tally.records += outcome.records;
      break;
    case "current":
      tally.unchanged++;
      break;
    case "inactive":
      tally.inactive++;
      break;
    case "removed":
      tally.removed++;
      break;
    case "gone":
      tally.gone++;
      break;
    case "stale":
      break; // tried again shortly: counted then
  }
}

function messageOf(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

if (import.meta.main) {
  const code = await runBackfillCli(Deno.args, readAppviewEnv(), {
    out: (line) => console.log(line),
    err: (line) => console.error(line),
  }).catch((e) => {
    console.error(`backfill: ${messageOf(e)}`);
    return 1;
  });
  Deno.exit(code);
}
