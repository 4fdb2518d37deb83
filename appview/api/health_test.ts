import assert from "node:assert/strict";
import {
  CONSUMER_LOCAL,
  CONSUMER_PUBLIC,
  type ConsumerState,
  CURSOR_LOCAL_SEQ,
  CURSOR_PUBLIC_TIME_US,
} from "../db/state.ts";
import {
  type Backend,
  type BackendContext,
  endBackendTests,
  forEachBackend,
  openBackendContext,
} from "../_test_helpers.ts";
import { HEALTH_STALL_SECONDS } from "../config.ts";
import { BACKFILL_LOCAL } from "../db/backfill_state.ts";
import { healthRoutes, STALE_STATUS_MS } from "./health.ts";

const NOW = Date.parse("2024-06-01T00:00:00.000Z");
const NO_BACKFILL = {
  queued: 0,
  retrying: 0,
  done: 0,
  failed: 0,
  last_error: null,
  last_done_at: null,
  restored: null,
};
const at = (ms: number) => new Date(NOW + ms).toISOString();

/** Stores a stream cursor the way consumers do: through the write path, with no ops. */
async function writeCursor(ctx: BackendContext, name: string, value: number): Promise<void> {
  await ctx.store.writer.applyOps([], { cursor: { name, value } });
}

async function getHealth(ctx: Parameters<typeof healthRoutes>[0], status = 200) {
  const res = await healthRoutes(ctx).request("/healthz");
  assert.equal(res.status, status);
  assert.equal(res.headers.get("cache-control"), "no-store");
  return await res.json();
}

forEachBackend(
  "/healthz reports the public and the local consumer separately from their status rows",
  async (backend) => {
    await using ctx = await openBackendContext(backend, { now: () => new Date(NOW) });
    await writeCursor(ctx, CURSOR_PUBLIC_TIME_US, 1_725_911_162_329_308);
    await writeCursor(ctx, CURSOR_LOCAL_SEQ, 42);
    await ctx.store.state.writeConsumerStatus({
      name: CONSUMER_PUBLIC,
      state: "live",
      cursor: 1_725_911_162_000_000,
      lastEventAt: at(-500),
      lastError: null,
      updatedAt: at(-1000),
    });
    await ctx.store.state.writeConsumerStatus({
      name: CONSUMER_LOCAL,
      state: "backoff",
      cursor: 40,
      lastEventAt: at(-9000),
      lastError: "Cannot connect to ws://127.0.0.1:2583/xrpc/com.atproto.sync.subscribeRepos",
      updatedAt: at(-2000),
    });
    assert.deepEqual(await getHealth(ctx), {
      status: "degraded",
      consumers: {
        public: {
          state: "live",
          cursor: 1_725_911_162_329_308,
          last_event_at: at(-500),
          last_error: null,
          updated_at: at(-1000),
          stale: false,
        },
        local: {
          state: "backoff",
          cursor: 42,
          last_event_at: at(-9000),
          last_error: "Cannot connect to ws://127.0.0.1:2583/xrpc/com.atproto.sync.subscribeRepos",
          updated_at: at(-2000),
          stale: false,
        },
      },
      backfill: NO_BACKFILL,
    });
  },
);

forEachBackend(
  "/healthz reports consumers that never ran as disabled and the index as ok",
  async (backend) => {
    await using ctx = await openBackendContext(backend, { now: () => new Date(NOW) });
    const body = await getHealth(ctx);
    assert.equal(body.status, "ok");
    for (const name of ["public", "local"]) {
      assert.deepEqual(body.consumers[name], {
        state: "disabled",
        cursor: null,
        last_event_at: null,
        last_error: null,
        updated_at: null,
        stale: false,
      });
    }
  },
);

forEachBackend(
  "/healthz marks a live consumer whose row stopped updating as stale",
  async (backend) => {
    await using ctx = await openBackendContext(backend, { now: () => new Date(NOW) });
    for (const name of [CONSUMER_PUBLIC, CONSUMER_LOCAL]) {
      await ctx.store.state.writeConsumerStatus({
        name,
        state: name === CONSUMER_LOCAL ? "live" : "disabled",
        cursor: null,
        lastEventAt: null,
        lastError: null,
        updatedAt: at(-STALE_STATUS_MS - 1),
      });
    }
    const body = await getHealth(ctx, 503);
    assert.equal(body.status, "degraded");
    assert.equal(body.consumers.local.stale, true);
    assert.equal(body.consumers.public.stale, false);
  },
);

/** A clock the test moves, and the local consumer's row written at its current time. */
async function movingClock(backend: Backend, env: Record<string, string> = {}) {
  let now = NOW;
  const ctx = await openBackendContext(backend, { now: () => new Date(now), env });
  return {
    ctx,
    at(ms: number) {
      now = NOW + ms;
    },
    write(state: ConsumerState): Promise<void> {
      return ctx.store.state.writeConsumerStatus({
        name: CONSUMER_LOCAL,
        state,
        cursor: 7,
        lastEventAt: at(0),
        lastError: state === "live" ? null : "Cannot connect to ws://127.0.0.1:2583",
        updatedAt: new Date(now).toISOString(),
      });
    },
    [Symbol.asyncDispose]: () => ctx[Symbol.asyncDispose](),
  };
}

forEachBackend(
  "/healthz answers 503, with the same body, once a consumer has not been live for APPVIEW_HEALTH_STALL_SECONDS (issue 36)",
  async (backend) => {
    assert.equal(HEALTH_STALL_SECONDS, 120);
    await using clock = await movingClock(backend);
    const stall = HEALTH_STALL_SECONDS * 1000;
    await clock.write("live");
    clock.at(1_000);
    await clock.write("backoff"); // down from here
    clock.at(21_000);
    await clock.write("connecting"); // still down: reconnecting does not restart the count
    clock.at(1_000 + stall - 1_000);
    await clock.write("backoff");
    const degraded = await getHealth(clock.ctx, 200);
    assert.equal(degraded.status, "degraded");
    clock.at(1_000 + stall + 1);
    await clock.write("backoff");
    assert.deepEqual(await getHealth(clock.ctx, 503), {
      status: "degraded",
      consumers: {
        public: {
          state: "disabled",
          cursor: null,
          last_event_at: null,
          last_error: null,
          updated_at: null,
          stale: false,
        },
        local: {
          state: "backoff",
          cursor: 7,
          last_event_at: at(0),
          last_error: "Cannot connect to ws://127.0.0.1:2583",
          updated_at: at(1_000 + stall + 1),
          stale: false,
        },
      },
      backfill: NO_BACKFILL,
    });
    // Live again: healthy; a new outage counts from its own start.
    clock.at(2 * stall);
    await clock.write("live");
    assert.equal((await getHealth(clock.ctx, 200)).status, "ok");
    clock.at(2 * stall + 1_000);
    await clock.write("backoff");
    clock.at(3 * stall);
    await clock.write("backoff");
    await getHealth(clock.ctx, 200);
    clock.at(3 * stall + 1_001);
    await clock.write("connecting");
    await getHealth(clock.ctx, 503);
  },
);

forEachBackend(
  "/healthz takes the stall threshold from APPVIEW_HEALTH_STALL_SECONDS; 0 turns the stall rule off (issue 36)",
  async (backend) => {
    {
      await using clock = await movingClock(backend, { APPVIEW_HEALTH_STALL_SECONDS: "5" });
      await clock.write("connecting");
      clock.at(5_000);
      await clock.write("connecting");
      await getHealth(clock.ctx, 200);
      clock.at(5_001);
      await clock.write("backoff");
      await getHealth(clock.ctx, 503);
    }
    {
      await using clock = await movingClock(backend, { APPVIEW_HEALTH_STALL_SECONDS: "0" });
      await clock.write("backoff");
      clock.at(86_400_000);
      await clock.write("backoff");
      assert.equal((await getHealth(clock.ctx, 200)).status, "degraded");
      // A consumer whose row stopped updating has failed all the same.
      clock.at(86_400_000 + STALE_STATUS_MS + 1);
      await getHealth(clock.ctx, 503);
    }
  },
);

forEachBackend(
  "/healthz reports the backfill queue, its totals and the last restore of the account host without changing the status",
  async (backend) => {
    await using ctx = await openBackendContext(backend, { now: () => new Date(NOW) });
    const state = ctx.store.state;
    await state.backfillQueue.enqueue("did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", "gap", null, at(0));
    await state.backfillQueue.enqueue("did:plc:bbbbbbbbbbbbbbbbbbbbbbbb", "restore", null, at(0));
    await state.backfillQueue.failed(
      "did:plc:bbbbbbbbbbbbbbbbbbbbbbbb",
      "Host answered 502",
      at(5_000),
    );
    await state.recordBackfillOutcome(BACKFILL_LOCAL, {
      did: "did:plc:cccccccccccccccccccccccc",
      at: at(-10),
      records: 12,
    });
    await state.recordBackfillOutcome(BACKFILL_LOCAL, {
      did: "did:plc:bbbbbbbbbbbbbbbbbbbbbbbb",
      at: at(-5),
      error: "Host answered 502",
    });
    await state.recordRestore(BACKFILL_LOCAL, { cursor: 120, head: 80, at: at(-20) });
    const body = await getHealth(ctx);
    assert.equal(body.status, "ok");
    assert.deepEqual(body.backfill, {
      queued: 2,
      retrying: 1,
      done: 1,
      failed: 1,
      last_error: "Host answered 502",
      last_done_at: at(-10),
      restored: { at: at(-20), cursor: 120, head: 80 },
    });
  },
);

endBackendTests();
