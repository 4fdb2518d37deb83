/**
 * Worker thread of {@link WalCheckpointer} (`wal_checkpointer.ts`): its own connection to the
 * SQLite file, running a passive WAL checkpoint every `intervalMs` on its own timer (so a main
 * thread busy with a long transaction does not hold the checkpoints back) and on request.
 *
 * A timed run first reads `PRAGMA data_version`: when no other connection has committed since the
 * last timed checkpoint, and that one copied every frame, there is nothing to copy, and the run
 * neither checkpoints nor posts (an idle server wakes the main thread for nothing).
 *
 * In: `{path, intervalMs, reportTimed}` once, then `{run: id}` per requested checkpoint, and
 * `{stop: true}` to close the connection. Out: `{ready: true}` once open (or `{fatal}` when it
 * cannot open the database), then `{done, id}` per requested checkpoint and, with `reportTimed`,
 * `{done}` per timed one; `{error, id?}` when a checkpoint fails (for timed runs only the first of
 * a series of failures), and `{stopped: true}` once closed.
 *
 * @module
 */

import { DatabaseSync, type StatementSync } from "node:sqlite";

/** A message to the worker. */
export type CheckpointRequest =
  | { path: string; intervalMs: number; reportTimed: boolean }
  | { run: number }
  | { stop: true };

/** Outcome of one passive checkpoint (`PRAGMA wal_checkpoint` columns and its duration). */
export interface CheckpointResult {
  busy: number;
  log: number;
  checkpointed: number;
  ms: number;
}

const scope = self as unknown as {
  onmessage: ((event: MessageEvent<CheckpointRequest>) => void) | null;
  postMessage(message: unknown): void;
};

let db: DatabaseSync | null = null;
let checkpoint: StatementSync | null = null;
let dataVersion: StatementSync | null = null;
let intervalMs = 0; // set by the open message; no checkpoint runs before it
let reportTimed = true;
let timer: ReturnType<typeof setTimeout> | null = null;
/** `data_version` read before the last timed checkpoint (null before the first). */
let lastVersion: number | null = null;
/** Whether the last checkpoint copied every frame of the WAL back. */
let copiedAll = false;
/** Whether the last timed run failed (a series of failures is reported once). */
let failing = false;

function run(id?: number): void {
  if (timer !== null) clearTimeout(timer);
  try {
    if (id === undefined) {
      const version = (dataVersion!.get() as { data_version: number }).data_version;
      if (version === lastVersion && copiedAll) {
        timer = setTimeout(run, intervalMs);
        return;
      }
      lastVersion = version;
    }
    const start = performance.now();
    const row = checkpoint!.get() as { busy: number; log: number; checkpointed: number };
    copiedAll = row.busy === 0 && row.checkpointed === row.log;
    failing = false;
    if (id !== undefined || reportTimed) {
      const done: CheckpointResult = {
        busy: row.busy,
        log: row.log,
        checkpointed: row.checkpointed,
        ms: performance.now() - start,
      };
      scope.postMessage({ done, id });
    }
  } catch (e) {
    if (id !== undefined || !failing) {
      scope.postMessage({ error: String((e as Error)?.message ?? e), id });
    }
    failing = id === undefined;
    copiedAll = false;
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
    checkpoint = dataVersion = null;
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
    // Never wait on the writer: a checkpoint that finds the database busy is simply retried
    // at the next interval.
    db.exec("PRAGMA busy_timeout = 0");
    checkpoint = db.prepare("PRAGMA wal_checkpoint(PASSIVE)");
    dataVersion = db.prepare("PRAGMA data_version");
    intervalMs = msg.intervalMs;
    reportTimed = msg.reportTimed;
    scope.postMessage({ ready: true });
    timer = setTimeout(run, intervalMs);
  } catch (e) {
    db?.close();
    db = null;
    checkpoint = dataVersion = null;
    scope.postMessage({ fatal: String((e as Error)?.message ?? e) });
  }
};
