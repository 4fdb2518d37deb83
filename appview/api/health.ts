/**
 * `GET /healthz` (spec 4.2; DESIGN.md section 4): 200 with
 * `{status, consumers: {public: {...}, local: {...}}}`, each consumer reporting `state`
 * (`disabled|connecting|live|backoff`), `cursor`, `last_event_at`, `last_error` and
 * `updated_at`, read from the `consumer_status` rows so the report is right also when the
 * consumers run as other processes. `cursor` is the committed cursor of the `cursors` table (it
 * is written in the transaction of the ops it covers, so it is exact).
 *
 * A running consumer rewrites its row at least every 10 s; a row not in state `disabled` and not
 * updated for {@link STALE_STATUS_MS} is reported `stale: true` (its process is gone or stuck).
 * `status` is `ok` when no enabled consumer is in backoff, connecting or stale, else `degraded`.
 *
 * @module
 */

import { Hono } from "hono";
import type { AppviewContext } from "../context.ts";
import {
  CONSUMER_LOCAL,
  CONSUMER_PUBLIC,
  CURSOR_LOCAL_SEQ,
  CURSOR_PUBLIC_TIME_US,
  readConsumerStatus,
  readCursor,
} from "../db/state.ts";

/** A status row older than this (and not `disabled`) is reported stale. */
export const STALE_STATUS_MS = 30_000;

/** One consumer's entry in the health report. */
export interface ConsumerHealth {
  state: string;
  cursor: number | null;
  last_event_at: string | null;
  last_error: string | null;
  updated_at: string | null;
  stale: boolean;
}

/** The `/healthz` body. */
export interface HealthReport {
  status: "ok" | "degraded";
  consumers: { public: ConsumerHealth; local: ConsumerHealth };
}

/** Builds the health report from the database. */
export function readHealth(ctx: AppviewContext): HealthReport {
  const now = ctx.now().getTime();
  const consumers = {
    public: consumerHealth(ctx, CONSUMER_PUBLIC, CURSOR_PUBLIC_TIME_US, now),
    local: consumerHealth(ctx, CONSUMER_LOCAL, CURSOR_LOCAL_SEQ, now),
  };
  const healthy = (c: ConsumerHealth) => c.state === "disabled" || (c.state === "live" && !c.stale);
  return {
    status: healthy(consumers.public) && healthy(consumers.local) ? "ok" : "degraded",
    consumers,
  };
}

/** Routes of `/healthz`, mounted by `createAppviewApp`. */
export function healthRoutes(ctx: AppviewContext): Hono {
  const app = new Hono();
  app.get("/healthz", (c) => {
    c.header("Cache-Control", "no-store");
    return c.json(readHealth(ctx));
  });
  return app;
}

function consumerHealth(
  ctx: AppviewContext,
  name: string,
  cursorName: string,
  now: number,
): ConsumerHealth {
  const row = readConsumerStatus(ctx.db, name);
  const cursor = readCursor(ctx.db, cursorName) ?? row?.cursor ?? null;
  if (row === null) {
    return {
      state: "disabled",
      cursor,
      last_event_at: null,
      last_error: null,
      updated_at: null,
      stale: false,
    };
  }
  const age = now - Date.parse(row.updatedAt);
  return {
    state: row.state,
    cursor,
    last_event_at: row.lastEventAt,
    last_error: row.lastError,
    updated_at: row.updatedAt,
    stale: row.state !== "disabled" && age > STALE_STATUS_MS,
  };
}
