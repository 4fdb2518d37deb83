/**
 * Background ingest of `query_bench.ts`, run as a Web Worker with its own database connection:
 * `{path, opsPerSecond}` starts it; `{stop: true}` stops it and answers `{ops, seconds}`.
 */

import { silentLogger } from "../../shared/log.ts";
import type { IndexOp } from "../../shared/ops.ts";
import { openIndexDb } from "../../appview/db/open.ts";
import { openSqliteIndexStore } from "../../appview/db/sqlite_store.ts";
import { ingestOp } from "./query_bench.ts";

const TICK_MS = 10;

/** The worker's global scope (the project's type library is the window one). */
const scope = self as unknown as {
  postMessage(message: unknown): void;
  onmessage: ((e: MessageEvent) => void) | null;
};

let stop: (() => Promise<void>) | null = null;

function start(path: string, opsPerSecond: number): void {
  const db = openIndexDb(path);
  const writer = openSqliteIndexStore(db, { log: silentLogger }).writer;
  let seed = 7;
  const random = () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const started = performance.now();
  let done = 0;
  /** The write in flight: one at a time, as a consumer applies its batches. */
  let writing: Promise<unknown> = Promise.resolve();
  const timer = setInterval(() => {
    const owed = Math.floor(((performance.now() - started) / 1000) * opsPerSecond) - done;
    if (owed <= 0) return;
    const ops: IndexOp[] = [];
    for (let k = 0; k < owed; k++) ops.push(ingestOp(done + k, random));
    done += owed;
    writing = writing.then(() => writer.applyOps(ops));
  }, TICK_MS);
  stop = async () => {
    clearInterval(timer);
    await writing;
    const seconds = (performance.now() - started) / 1000;
    db.close();
    scope.postMessage({ ops: done, seconds });
  };
}

scope.onmessage = (e) => {
  try {
    if (e.data.stop) stop?.().catch((err) => scope.postMessage({ error: String(err) }));
    else start(e.data.path, e.data.opsPerSecond);
  } catch (err) {
    scope.postMessage({ error: String(err) });
  }
};
