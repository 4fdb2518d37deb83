/**
 * Local-stream ingest benchmark (DESIGN.md section 8: ">= 20,000 ops/s sustained; local-stream
 * CBOR decode included"): ops/s from pre-encoded `subscribeRepos` `#commit` frames to committed
 * rows, through the consumer's own decoding (`LocalStreamProtocol.decode`: `decodeFrame`, CAR
 * read with CID verification, `opsFromCommitEvent`) and `IndexWriter.applyOps` with the `seq`
 * cursor in the same transaction and each commit gated by its repository's rev, in batches of `MAX_BATCH_MESSAGES` frames as the consumer folds
 * queued frames (one op per frame here).
 *
 * The op mix is the ingest benchmark's (`generateOps`: posts with FTS and replies, likes,
 * reposts, follows, deletes, profiles), one op per commit as `createRecord` produces them (handle
 * ops are not stream events and are left out). Frames are encoded before the clock starts.
 *
 * Run alone: `deno run -A scripts/bench/stream_ingest_bench.ts`.
 */

import { cpuUsage } from "node:process";
import { openIndexDb } from "../../appview/db/open.ts";
import { CURSOR_LOCAL_SEQ } from "../../appview/db/state.ts";
import { makeCommit } from "../../appview/ingest/_stream_testing.ts";
import { type CommitSpan, IndexWriter } from "../../appview/ingest/apply_ops.ts";
import { LocalStreamProtocol } from "../../appview/ingest/local_stream.ts";
import {
  MAX_BATCH_MESSAGES,
  MAX_BATCH_OPS,
  type StreamControl,
} from "../../appview/ingest/stream_consumer.ts";
import { silentLogger } from "../../shared/log.ts";
import type { IndexOp, RecordOp } from "../../shared/ops.ts";
import type { BenchResult } from "./_types.ts";
import { generateOps } from "./ingest_bench.ts";

const TOTAL_OPS = Number(Deno.env.get("STREAM_BENCH_OPS") ?? 100_000);
/** Frames folded into one `applyOps` call: the consumer's fold limit for queued frames. */
const FRAMES_PER_BATCH = Math.min(MAX_BATCH_MESSAGES, MAX_BATCH_OPS);
const BUDGET_OPS_PER_SECOND = 20_000;

/** Pre-encodes one `#commit` frame per record op, seq from 1. */
function encodeFrames(ops: readonly IndexOp[]): ArrayBuffer[] {
  const records = ops.filter((op): op is RecordOp => op.kind === "record");
  return records.map((op, i) => {
    const bytes = makeCommit(i + 1, [op]).frame();
    return bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) as ArrayBuffer;
  });
}

/** Runs the benchmark and returns its figures. */
export async function benchStreamIngest(): Promise<BenchResult[]> {
  const frames = encodeFrames(generateOps(TOTAL_OPS));
  const totalBytes = frames.reduce((n, f) => n + f.byteLength, 0);
  const protocol = new LocalStreamProtocol("ws://127.0.0.1:1/xrpc/com.atproto.sync.subscribeRepos");
  const failures: string[] = [];
  const control: StreamControl = {
    log: silentLogger,
    fail: (reason) => failures.push(reason),
    disconnect: (reason) => failures.push(reason),
  };

  // Decoding alone (informational).
  const decodeStart = performance.now();
  let decodedOps = 0;
  for (const frame of frames) decodedOps += protocol.decode(frame, null, control)?.ops.length ?? 0;
  const decodeSeconds = (performance.now() - decodeStart) / 1000;

  const dir = await Deno.makeTempDir({ prefix: "stream-ingest-bench-" });
  const db = openIndexDb(`${dir}/index.sqlite`);
  try {
    const writer = new IndexWriter(db); // default batch size, as the server's writer
    let cursor: number | null = null;
    let applied = 0;
    const cpuStart = cpuUsage();
    const start = performance.now();
    let halfway = start;
    let halfwayFrames = 0;
    for (let i = 0; i < frames.length; i += FRAMES_PER_BATCH) {
      // Folded as the consumer's drain folds queued frames: ops, commit spans (each commit gated
      // by its repository's rev), the cursor in the same transaction.
      const ops: IndexOp[] = [];
      const commits: CommitSpan[] = [];
      const end = Math.min(frames.length, i + FRAMES_PER_BATCH);
      for (let j = i; j < end; j++) {
        const decoded = protocol.decode(frames[j], cursor, control);
        if (decoded === null) continue;
        const start = ops.length;
        for (const op of decoded.ops) ops.push(op);
        if (decoded.commit !== undefined) {
          commits.push({ start, end: ops.length, commit: decoded.commit });
        }
        cursor = decoded.cursor;
      }
      applied += writer.applyOps(ops, {
        cursor: { name: CURSOR_LOCAL_SEQ, value: cursor! },
        commits,
      }).applied;
      if (halfway === start && end >= frames.length / 2) {
        halfway = performance.now();
        halfwayFrames = end;
      }
    }
    const stop = performance.now();
    const cpu = cpuUsage(cpuStart);
    const cpuSeconds = (cpu.user + cpu.system) / 1e6;
    if (failures.length > 0 || writer.stats().skipped > 0 || applied !== frames.length) {
      throw new Error(
        `Benchmark frames failed: ${failures.length} decode, ${writer.stats().skipped} skipped`,
      );
    }
    const overall = applied / ((stop - start) / 1000);
    const secondHalf = (frames.length - halfwayFrames) / ((stop - halfway) / 1000);
    console.error(
      `stream ingest: ${frames.length} frames (${(totalBytes / 1e6).toFixed(1)} MB) in ` +
        `${((stop - start) / 1000).toFixed(2)} s wall, ${cpuSeconds.toFixed(2)} s CPU ` +
        `(${Math.round(applied / cpuSeconds)} ops per CPU second); decode alone ${
          Math.round(decodedOps / decodeSeconds)
        } ops/s`,
    );
    return [
      {
        name: `local-stream ingest (decode + applyOps, realistic mix, ${
          frames.length / 1000
        }k frames)`,
        figure: overall,
        unit: "ops/s",
        budget: ">= 20,000 ops/s",
        pass: overall >= BUDGET_OPS_PER_SECOND,
      },
      {
        name: "local-stream ingest, second half (sustained)",
        figure: secondHalf,
        unit: "ops/s",
        budget: ">= 20,000 ops/s",
        pass: secondHalf >= BUDGET_OPS_PER_SECOND,
      },
      {
        name: "local-stream frame decode alone (decodeFrame + CAR + opsFromCommitEvent)",
        figure: decodedOps / decodeSeconds,
        unit: "ops/s",
        budget: "-",
        pass: true,
      },
    ];
  } finally {
    db.close();
    await Deno.remove(dir, { recursive: true });
  }
}

if (import.meta.main) {
  for (const r of await benchStreamIngest()) {
    console.log(
      `${r.name}: ${Math.round(r.figure)} ${r.unit} (${r.budget}) ${r.pass ? "pass" : "MISS"}`,
    );
  }
}
