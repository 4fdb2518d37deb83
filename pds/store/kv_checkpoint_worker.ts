/**
 * Worker thread of {@link KvCheckpointer} (`kv_checkpointer.ts`): its own SQLite connection to
 * the Deno KV file, running a passive WAL checkpoint every `intervalMs` on its own timer.
 *
 * In: `{path, intervalMs}` once, then `{run: id}` per requested checkpoint and `{stop: true}`.
 * Out: `{ready: true}` once open (`{fatal}` when it cannot open the file), `{done, id}` per
 * requested checkpoint, `{error, id?}` when a checkpoint fails (a timed one: only the first of a
 * run of failures), and `{stopped: true}` once the connection is closed.
 *
 * @module
 */

import { DatabaseSync, type StatementSync } from "node:sqlite";

/** A message to the worker. */
export type KvCheckpointRequest =
  | { path: string; intervalMs: number }
  | { run: number }
  | { stop: true };

/** Result of one passive checkpoint: WAL frames in the log and frames copied back. */
export interface KvCheckpointResult {
  log: number;
  checkpointed: number;
}

const scope = self as unknown as {
  onmessage: ((event: MessageEvent<KvCheckpointRequest>) => void) | null;
  postMessage(message: unknown): void;
};

let db: DatabaseSync | null = null;
let checkpoint: StatementSync | null = null;
let intervalMs = 0;
let timer: ReturnType<typeof setTimeout> | null = null;
let failing = false;

function run(id?: number): void {
  if (timer !== null) clearTimeout(timer);
  try {
    const row = checkpoint!.get() as { log: number; checkpointed: number };
    failing = false;
    if (id !== undefined) {
      scope.postMessage({ done: { log: row.log, checkpointed: row.checkpointed }, id });
    }
  } catch (e) {
    if (id !== undefined || !failing) {
      scope.postMessage({ error: String((e as Error)?.message ?? e), id });
    }
    failing = id === undefined;
  }
  timer = setTimeout(run, intervalMs);
}

scope.onmessage = (event) => {
  const msg = event.data;
  if ("run" in msg) {
    if (checkpoint !== null) run(msg.run);
    else scope.postMessage({ error: "The checkpoint connection is not open", id: msg.run });
    return;
  }
  if ("stop" in msg) {
    if (timer !== null) clearTimeout(timer);
    timer = null;
    checkpoint = null;
    try {
      db?.close();
    } finally {
      db = null;
      scope.postMessage({ stopped: true });
    }
    return;
  }
  try {
    db = new DatabaseSync(msg.path);
    // Never wait for the KV writer: a checkpoint that finds the file busy is retried at the
    // next interval.
    db.exec("PRAGMA busy_timeout = 0");
    checkpoint = db.prepare("PRAGMA wal_checkpoint(PASSIVE)");
    intervalMs = msg.intervalMs;
    scope.postMessage({ ready: true });
    timer = setTimeout(run, intervalMs);
  } catch (e) {
    db?.close();
    db = null;
    scope.postMessage({ fatal: String((e as Error)?.message ?? e) });
  }
};
