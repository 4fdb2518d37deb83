/**
 * Worker-thread side of {@link ThreadedPublicConsumer} (`public_consumer_thread.ts`): the
 * public-stream consumer as it runs in its own process (`deno task consumer:public`: everything
 * queued applied in one go), on its own connection to the index database, so that its
 * transactions never hold the HTTP API's event loop; in transactions of up to
 * {@link THREAD_BATCH_OPS} ops.
 *
 * Messages from the main thread: one {@link PublicThreadStart}, then at most one `"close"`.
 * Messages to it: {@link PublicThreadMessage}s (log records, status, `closed`).
 *
 * @module
 */

/// <reference lib="deno.worker" />

import type { LogFields, Logger, LogLevel } from "../../../shared/log.ts";
import { createAppviewContext } from "../../context.ts";
import { openIndexStore } from "../../db/open.ts";
import type { IndexStore } from "../../db/store.ts";
import { createJetstreamConsumer } from "./jetstream.ts";
import type {
  PublicThreadMessage,
  PublicThreadStart,
  ThreadLogRecord,
} from "./public_consumer_thread.ts";
import type { StreamConsumer } from "./stream_consumer.ts";
import type { StreamConsumerStatus } from "./stream_status.ts";

/**
 * Ops per transaction of the thread: 40,000, twice the writer's default. Fewer commits write
 * fewer WAL pages per op (pages that several ops touch go once). The write path alone over the
 * public-ingest mix at 600,000 events, alternated in one session: 18,200 and 18,500 ops/s at
 * 20,000 (COMMIT 6.9 s of the run), 21,500 and 20,400 at 40,000 (COMMIT 4.1 s), 20,100 and 22,200
 * at 80,000. The cost is the time a write on the main thread may wait for one transaction (about
 * 2 s, module notes of `public_consumer_thread.ts`).
 */
export const THREAD_BATCH_OPS = 40_000;

/** How often the consumer's status is compared with the last one posted (ms). */
const STATUS_POLL_MS = 100;

function post(message: PublicThreadMessage): void {
  self.postMessage(message);
}

/** A logger whose lines are written by the main thread's logger (`path` names its children). */
function forwardingLogger(path: string[]): Logger {
  const emit = (level: LogLevel) => (msg: string, fields?: LogFields) => {
    const record: ThreadLogRecord = { kind: "log", level, path, msg, fields };
    try {
      post(record);
    } catch {
      // A field that cannot be cloned (a function, a class instance with private state) goes
      // as its text rather than losing the line.
      post({ ...record, fields: { fields: String(fields) } });
    }
  };
  return {
    debug: emit("debug"),
    info: emit("info"),
    warn: emit("warn"),
    error: emit("error"),
    child: (sub) => forwardingLogger([...path, sub]),
  };
}

let consumer: StreamConsumer | null = null;
let store: IndexStore | null = null;
/** The start in progress or done (a close waits for it). */
let started: Promise<void> = Promise.resolve();
let statusTimer: ReturnType<typeof setInterval> | undefined;
let lastStatus = "";

function postStatus(): void {
  if (consumer === null) return;
  const status: StreamConsumerStatus = consumer.status();
  const text = JSON.stringify(status);
  if (text === lastStatus) return;
  lastStatus = text;
  post({ kind: "status", status });
}

async function start(msg: PublicThreadStart): Promise<void> {
  const log = forwardingLogger([]);
  store = await openIndexStore(msg.config, {
    log: log.child("writer"),
    batchSize: THREAD_BATCH_OPS,
  });
  const ctx = createAppviewContext({ config: msg.config, store, log });
  consumer = createJetstreamConsumer(ctx, { maxBatchOps: THREAD_BATCH_OPS, ...msg.options });
  if (consumer === null) throw new Error("APPVIEW_JETSTREAM_URL is unset");
  const starting = consumer.start();
  postStatus();
  statusTimer = setInterval(postStatus, STATUS_POLL_MS);
  await starting;
}

async function close(): Promise<void> {
  await started;
  clearInterval(statusTimer);
  await consumer?.close();
  postStatus();
  await store?.close();
  store = null;
  post({ kind: "closed" });
}

self.onmessage = (event: MessageEvent<PublicThreadStart | "close">) => {
  if (event.data === "close") {
    close().catch((e) => {
      post({ kind: "closed", error: e instanceof Error ? e.message : String(e) });
    });
  } else {
    started = start(event.data).catch((e) => {
      post({ kind: "failed", error: e instanceof Error ? e.message : String(e) });
    });
  }
};
