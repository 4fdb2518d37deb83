/**
 * Background ingest of `pg_query_bench.ts`, run as a Web Worker with its own PostgreSQL
 * connections (as a consumer process would have): `{url, opsPerSecond}` starts it, applying the
 * ops of `query_bench.ts`'s `ingestOp` through `PgIndexWriter.applyOps` paced against the clock
 * (a late tick catches up), as `_query_bench_ingest.ts` does on SQLite; `{stop: true}` stops it
 * and answers `{ops, seconds}`.
 */

import { silentLogger } from "../../shared/log.ts";
import type { IndexOp } from "../../shared/ops.ts";
import { openPgIndexStore, type PgIndexStore } from "../../appview/db/pg/store.ts";
import { ingestOp, rng } from "./query_bench.ts";

const TICK_MS = 10;

/** The worker's global scope (the project's type library is the window one). */
const scope = self as unknown as {
  postMessage(message: unknown): void;
  onmessage: ((e: MessageEvent) => void) | null;
};

let stop: (() => Promise<void>) | null = null;

async function start(url: string, opsPerSecond: number): Promise<void> {
  const store: PgIndexStore = await openPgIndexStore(url, {
    migrate: false,
    poolMax: 1,
    log: silentLogger,
    applicationName: "pg-query-bench ingest",
  });
  const random = rng(7);
  const started = performance.now();
  let done = 0;
  let failure: unknown = null;
  /** The write in flight: one at a time, as a consumer applies its batches. */
  let writing: Promise<unknown> = Promise.resolve();
  const timer = setInterval(() => {
    const owed = Math.floor(((performance.now() - started) / 1000) * opsPerSecond) - done;
    if (owed <= 0) return;
    const ops: IndexOp[] = [];
    for (let k = 0; k < owed; k++) ops.push(ingestOp(done + k, random));
    done += owed;
    writing = writing.then(() => store.writer.applyOps(ops)).catch((e) => failure ??= e);
  }, TICK_MS);
  stop = async () => {
    clearInterval(timer);
    await writing;
    const seconds = (performance.now() - started) / 1000;
    await store.close();
    if (failure !== null) throw failure;
    scope.postMessage({ ops: done, seconds });
  };
}

scope.onmessage = (e) => {
  if (e.data.stop) stop?.().catch((err) => scope.postMessage({ error: String(err) }));
  else {
    start(e.data.url, e.data.opsPerSecond).then(
      () => scope.postMessage({ started: true }),
      (err) => scope.postMessage({ error: String(err) }),
    );
  }
};
