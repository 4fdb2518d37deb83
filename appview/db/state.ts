/**
 * Stream cursors and consumer status rows (schema: `cursors`, `consumer_status`).
 *
 * The two streams keep separate cursor rows (spec 6.2 rule 2): the local stream's `seq` is a small
 * counter from 1 while the public stream's `time_us` is around 1.7e15, so one shared row would
 * push the local cursor beyond any real `seq`. Consumers can also advance a cursor inside the
 * write transaction of the ops it covers: `IndexWriter.applyOps(ops, {cursor})`.
 *
 * @module
 */

import type { DatabaseSync } from "node:sqlite";

/** Cursor row of the account host's local stream (`seq`). */
export const CURSOR_LOCAL_SEQ = "local_seq";
/** Cursor row of the public stream (Jetstream `time_us`, microseconds). */
export const CURSOR_PUBLIC_TIME_US = "public_time_us";

/** Consumer names of `consumer_status` (the two entries of `/healthz`). */
export const CONSUMER_PUBLIC = "public";
export const CONSUMER_LOCAL = "local";

/**
 * State of a stream consumer (docs/behaviour.md 10.9, `/healthz`). `waiting`: on PostgreSQL,
 * another process holds this consumer's lock and this one waits to take over (its own report
 * only: never written to `consumer_status`, whose row is the running consumer's).
 */
export type ConsumerState = "disabled" | "connecting" | "live" | "backoff" | "waiting";

/** One `consumer_status` row. */
export interface ConsumerStatus {
  name: string;
  state: ConsumerState;
  cursor: number | null;
  lastEventAt: string | null;
  lastError: string | null;
  updatedAt: string;
}

const UPSERT_CURSOR = `INSERT INTO cursors (name, value, updated_at) VALUES (?, ?, ?)
  ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`;

/** Reads the cursor named `name`; null when none was stored. */
export function readCursor(db: DatabaseSync, name: string): number | null {
  const row = db.prepare("SELECT value FROM cursors WHERE name = ?").get(name) as
    | { value: number }
    | undefined;
  return row === undefined ? null : row.value;
}

/** Stores `value` as the cursor named `name` (must be a safe integer). */
export function writeCursor(db: DatabaseSync, name: string, value: number, now = new Date()): void {
  if (!Number.isSafeInteger(value)) throw new RangeError(`Cursor is not a safe integer: ${value}`);
  db.prepare(UPSERT_CURSOR).run(name, value, now.toISOString());
}

/** The statement that stores a cursor, for callers that keep it prepared. */
export function prepareCursorWrite(
  db: DatabaseSync,
): (name: string, value: number, at: string) => void {
  const stmt = db.prepare(UPSERT_CURSOR);
  return (name, value, at) => {
    if (!Number.isSafeInteger(value)) {
      throw new RangeError(`Cursor is not a safe integer: ${value}`);
    }
    stmt.run(name, value, at);
  };
}

/** States in which a consumer is trying to reach its stream rather than reading it. */
const DOWN_STATES: ReadonlySet<ConsumerState> = new Set(["connecting", "backoff"]);

/**
 * Upserts the status row of one consumer. The row also keeps `down_since`: the `updatedAt` of
 * the first write in `connecting` or `backoff` after the consumer was `live` or `disabled` (or
 * had no row), so going back and forth between the two down states does not restart the count.
 */
export function writeConsumerStatus(db: DatabaseSync, status: ConsumerStatus): void {
  db.prepare(
    `INSERT INTO consumer_status
       (name, state, cursor, last_event_at, last_error, updated_at, down_since)
     VALUES (?, ?, ?, ?, ?, ?, ?)
     ON CONFLICT (name) DO UPDATE SET state = excluded.state, cursor = excluded.cursor,
       last_event_at = excluded.last_event_at, last_error = excluded.last_error,
       updated_at = excluded.updated_at,
       down_since = CASE WHEN excluded.down_since IS NULL THEN NULL
         ELSE coalesce(consumer_status.down_since, excluded.down_since) END`,
  ).run(...consumerStatusParams(status));
}

/**
 * The parameters of a `consumer_status` upsert, in column order (`name, state, cursor,
 * last_event_at, last_error, updated_at, down_since`), on either backend: `down_since` is the
 * write's time in a down state, else null (the statements keep the first one).
 */
export function consumerStatusParams(status: ConsumerStatus): (string | number | null)[] {
  return [
    status.name,
    status.state,
    status.cursor,
    status.lastEventAt,
    status.lastError,
    status.updatedAt,
    DOWN_STATES.has(status.state) ? status.updatedAt : null,
  ];
}

/**
 * When the consumer `name` last stopped being live (ISO 8601); null while it is live or
 * disabled, or when it never reported.
 */
export function readConsumerDownSince(db: DatabaseSync, name: string): string | null {
  const row = db.prepare("SELECT down_since FROM consumer_status WHERE name = ?").get(name) as
    | { down_since: string | null }
    | undefined;
  return row?.down_since ?? null;
}

/** Reads the status row of one consumer; null when it never reported. */
export function readConsumerStatus(db: DatabaseSync, name: string): ConsumerStatus | null {
  const row = db.prepare(
    `SELECT name, state, cursor, last_event_at, last_error, updated_at
     FROM consumer_status WHERE name = ?`,
  ).get(name) as Record<string, unknown> | undefined;
  return row === undefined ? null : consumerStatusOf(row);
}

/** A `consumer_status` row (`name, state, cursor, last_event_at, last_error, updated_at`). */
export function consumerStatusOf(row: Record<string, unknown>): ConsumerStatus {
  return {
    name: row.name as string,
    state: row.state as ConsumerState,
    cursor: row.cursor as number | null,
    lastEventAt: row.last_event_at as string | null,
    lastError: row.last_error as string | null,
    updatedAt: row.updated_at as string,
  };
}
