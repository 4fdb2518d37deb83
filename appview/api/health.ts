/**
 * `GET /healthz` (spec 4.2; docs/behaviour.md 10.9): 200 with
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
 * The HTTP status is for container health checks and load balancers (issue 36): 503, with the
 * same body, when a configured consumer has failed or stalled, else 200 (`degraded` included,
 * since a consumer reconnecting for a moment is normal). Failed: its row is stale. Stalled: it
 * has been `connecting` or in `backoff`, without reaching `live` in between, for longer than
 * `APPVIEW_HEALTH_STALL_SECONDS` (`down_since` of its row; the rule is off when that is 0).
 *
 * `backfill` (docs/behaviour.md 6.2 rules 8-10) reports the repositories queued for a backfill
 * (`queued`, of which `retrying` failed at least once), the totals done and failed, the last
 * error, and `restored`: the last time the local stream found the account host's head behind its
 * cursor (a restored backup), with that cursor and head; null when never. Neither changes
 * `status` or the HTTP status: a backfill retries by itself, and a restore is a fact to know.
 *
 * @module
 */

import { Hono } from "hono";
import type { AppviewContext } from "../context.ts";
import { BACKFILL_LOCAL } from "../db/backfill_state.ts";
import {
  CONSUMER_LOCAL,
  CONSUMER_PUBLIC,
  CURSOR_LOCAL_SEQ,
  CURSOR_PUBLIC_TIME_US,
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

/** The backfill entry of the health report. */
export interface BackfillHealth {
  queued: number;
  retrying: number;
  done: number;
  failed: number;
  last_error: string | null;
  last_done_at: string | null;
  restored: { at: string; cursor: number | null; head: number | null } | null;
}

/** The `/healthz` body. */
export interface HealthReport {
  status: "ok" | "degraded";
  consumers: { public: ConsumerHealth; local: ConsumerHealth };
  backfill: BackfillHealth;
}

/** Builds the health report from the database. */
export async function readHealth(ctx: AppviewContext): Promise<HealthReport> {
  return (await assessHealth(ctx)).report;
}

/** The report, and whether a configured consumer failed or stalled (the 503 of `/healthz`). */
export async function assessHealth(
  ctx: AppviewContext,
): Promise<{ report: HealthReport; failing: boolean }> {
  const now = ctx.now().getTime();
  const consumers = {
    public: await consumerHealth(ctx, CONSUMER_PUBLIC, CURSOR_PUBLIC_TIME_US, now),
    local: await consumerHealth(ctx, CONSUMER_LOCAL, CURSOR_LOCAL_SEQ, now),
  };
  const healthy = (c: ConsumerHealth) => c.state === "disabled" || (c.state === "live" && !c.stale);
  let failing = false;
  for (
    const [name, c] of [[CONSUMER_PUBLIC, consumers.public], [
      CONSUMER_LOCAL,
      consumers.local,
    ]] as const
  ) {
    if (c.stale || await isStalled(ctx, name, c.state, now)) {
      failing = true;
      break;
    }
  }
  return {
    report: {
      status: healthy(consumers.public) && healthy(consumers.local) ? "ok" : "degraded",
      consumers,
      backfill: await backfillHealth(ctx),
    },
    failing,
  };
}

/** Routes of `/healthz`, mounted by `createAppviewApp`. */
export function healthRoutes(ctx: AppviewContext): Hono {
  const app = new Hono();
  app.get("/healthz", async (c) => {
    c.header("Cache-Control", "no-store");
    const { report, failing } = await assessHealth(ctx);
    return c.json(report, failing ? 503 : 200);
  });
  return app;
}

async function backfillHealth(ctx: AppviewContext): Promise<BackfillHealth> {
  const { queued, retrying } = await ctx.store.state.backfillQueue.counts();
  const row = await ctx.store.state.readBackfillStatus(BACKFILL_LOCAL);
  return {
    queued,
    retrying,
    done: row?.done ?? 0,
    failed: row?.failed ?? 0,
    last_error: row?.lastError ?? null,
    last_done_at: row?.lastDoneAt ?? null,
    restored: row?.restoredAt == null
      ? null
      : { at: row.restoredAt, cursor: row.restoredCursor, head: row.restoredHead },
  };
}

async function isStalled(
  ctx: AppviewContext,
  name: string,
  state: string,
  now: number,
): Promise<boolean> {
  const limit = ctx.config.healthStallMs;
  if (limit === null || (state !== "connecting" && state !== "backoff")) return false;
  const since = await ctx.store.state.readConsumerDownSince(name);
  return since !== null && now - Date.parse(since) > limit;
}

async function consumerHealth(
  ctx: AppviewContext,
  name: string,
  cursorName: string,
  now: number,
): Promise<ConsumerHealth> {
  const row = await ctx.store.state.readConsumerStatus(name);
  const cursor = await ctx.store.state.readCursor(cursorName) ?? row?.cursor ?? null;
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
