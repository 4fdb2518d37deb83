/**
 * Local-stream ingest benchmark (docs/behaviour.md 12: ">= 20,000 ops/s sustained; local-stream
 * CBOR decode included"): ops/s from pre-encoded `subscribeRepos` `#commit` frames to committed
 * rows, through the consumer's own path: frames parsed in its worker thread (`OffThreadParser`
 * running `parseLocalFrame`: `decodeFrame`, CAR read with CID verification, `opsFromCommitEvent`),
 * accepted on the main thread (`acceptLocalFrame`), folded as the consumer folds queued frames
 * (up to `MAX_BATCH_MESSAGES`) into the store's `writer.applyOps` (`db/store.ts`), one batch at
 * a time, with the `seq` cursor in the same
 * transaction and each commit gated by its repository's rev. One op per frame here. Decoding on
 * the main thread alone is reported too (informational).
 *
 * The op mix is the ingest benchmark's (`generateOps`: posts with FTS and replies, likes,
 * reposts, follows, deletes, profiles), one op per commit as `createRecord` produces them (handle
 * ops are not stream events and are left out). Frames are encoded before the clock starts.
 *
 * Run alone: `deno task bench stream-ingest` (with the server tasks' V8 flags).
 */

import { cpuUsage } from "node:process";
import { WalCheckpointer } from "../../runtime/wal_checkpointer.ts";
import { openIndexDb } from "../../appview/db/open.ts";
import { CURSOR_LOCAL_SEQ } from "../../appview/db/state.ts";
import { makeCommit } from "../../appview/_test_helpers.ts";
import { openSqliteIndexStore } from "../../appview/db/sqlite_store.ts";
import { LocalStreamProtocol } from "../../appview/ingest/sources/local_stream.ts";
import { OffThreadParser } from "../../appview/ingest/sources/parse_worker.ts";
import type { StreamControl } from "../../appview/ingest/sources/stream_protocol.ts";
import { foldMessages } from "../../appview/ingest/sources/stream_queue.ts";
import { silentLogger } from "../../shared/log.ts";
import type { IndexOp, RecordOp } from "../../shared/ops.ts";
import { type BenchResult, informationalRow, ingestBudgetRow, printTable } from "./_types.ts";
import { generateOps } from "./ingest_bench.ts";

const TOTAL_OPS = Number(Deno.env.get("STREAM_BENCH_OPS") ?? 100_000);

/**
 * Pre-encodes one `#commit` frame per record op, seq from 1, each naming its repository's previous
 * commit as `since` (null for the first, which also says the account exists: one account op per
 * repository), as a real stream does, so no commit shows a gap (docs/behaviour.md 6.2 rule 8).
 */
function encodeFrames(ops: readonly IndexOp[]): { frames: ArrayBuffer[]; accounts: number } {
  const records = ops.filter((op): op is RecordOp => op.kind === "record");
  const last = new Map<string, string>();
  const frames = records.map((op, i) => {
    // Unsigned: the local stream does not check signatures, and signing 100k commits is a minute.
    const commit = makeCommit(i + 1, [op], { sign: false, since: last.get(op.did) ?? null });
    last.set(op.did, commit.rev);
    const bytes = commit.frame();
    return bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) as ArrayBuffer;
  });
  return { frames, accounts: last.size };
}

/** Runs the benchmark and returns its figures. */
export async function benchStreamIngest(): Promise<BenchResult[]> {
  const { frames, accounts } = encodeFrames(generateOps(TOTAL_OPS));
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
  decodedOps -= accounts; // record ops only
  const decodeSeconds = (performance.now() - decodeStart) / 1000;

  const dir = await Deno.makeTempDir({ prefix: "stream-ingest-bench-" });
  const db = openIndexDb(`${dir}/index.sqlite`);
  // As the server runs its writer: the WAL copied back by a worker thread.
  const checkpointer = new WalCheckpointer(`${dir}/index.sqlite`, { log: silentLogger });
  try {
    if (!checkpointer.start()) throw new Error("The checkpoint worker did not start");
    // Default batch size, as the server's writer.
    const writer = openSqliteIndexStore(db, { log: silentLogger }).writer;
    let cursor: number | null = null;
    let applied = 0;
    let received = 0;
    let halfway = 0;
    let halfwayFrames = 0;
    // As the consumer: frames are parsed by the protocol's worker (OffThreadParser), results
    // queue up while the main thread writes, and each drain folds them with the consumer's own
    // foldMessages (ops, commit spans gated by rev, the cursor) into applyOps calls.
    let queue: unknown[] = [];
    let drainTimer: ReturnType<typeof setTimeout> | null = null;
    let finished!: () => void;
    const done = new Promise<void>((r) => (finished = r));
    // One batch in flight at a time: the timer stays set while a drain runs, and the drain takes
    // what arrived meanwhile before it ends.
    const drain = async () => {
      while (queue.length > 0) {
        const batch = queue;
        queue = [];
        await applyAll(batch);
      }
      drainTimer = null;
      if (received === frames.length) finished();
    };
    const applyAll = async (batch: unknown[]) => {
      for (let i = 0; i < batch.length;) {
        const folded = foldMessages(
          batch,
          i,
          cursor,
          (parsed, at) => protocol.parser.accept(parsed, at, control),
        );
        const { ops, commits } = folded;
        cursor = folded.cursor;
        received += folded.next - i;
        i = folded.next;
        applied += (await writer.applyOps(ops, {
          cursor: { name: CURSOR_LOCAL_SEQ, value: cursor! },
          commits,
        })).applied;
        if (halfway === 0 && received >= frames.length / 2) {
          halfway = performance.now();
          halfwayFrames = received;
        }
      }
    };
    const parser = new OffThreadParser({
      parser: protocol.parser,
      log: silentLogger,
      deliver: (parsed) => {
        for (const p of parsed) queue.push(p);
        drainTimer ??= setTimeout(() => void drain(), 0);
      },
      onFailure: (reason) => {
        failures.push(reason);
        finished();
      },
    });
    if (!parser.start()) throw new Error("The parse worker did not start");
    await parser.settle(10_000); // the worker is loaded before the clock starts
    const cpuStart = cpuUsage();
    const start = performance.now();
    for (const frame of frames) parser.push(frame); // transferred: the bench is done with them
    await done;
    parser.close();
    // Sustained means durable in the database file: what is left in the WAL is copied back
    // inside the timed window.
    db.exec("PRAGMA wal_checkpoint(PASSIVE)");
    const stop = performance.now();
    const cpu = cpuUsage(cpuStart);
    const cpuSeconds = (cpu.user + cpu.system) / 1e6;
    applied -= accounts; // record ops only, as before `since` was sent
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
      ingestBudgetRow(
        `local-stream ingest (decode + applyOps, realistic mix, ${frames.length / 1000}k frames)`,
        overall,
      ),
      ingestBudgetRow("local-stream ingest, second half (sustained)", secondHalf),
      informationalRow(
        "local-stream frame decode alone (decodeFrame + CAR + opsFromCommitEvent)",
        decodedOps / decodeSeconds,
        "ops/s",
      ),
    ];
  } finally {
    await checkpointer.stop();
    db.close();
    await Deno.remove(dir, { recursive: true });
  }
}

if (import.meta.main) printTable(await benchStreamIngest());
