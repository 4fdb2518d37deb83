import assert from "node:assert/strict";
import {
  CONSUMER_LOCAL,
  CONSUMER_PUBLIC,
  CURSOR_LOCAL_SEQ,
  CURSOR_PUBLIC_TIME_US,
  writeConsumerStatus,
  writeCursor,
} from "../db/state.ts";
import { openTestContext } from "../ingest/_stream_testing.ts";
import { healthRoutes, STALE_STATUS_MS } from "./health.ts";

const NOW = Date.parse("2024-06-01T00:00:00.000Z");
const at = (ms: number) => new Date(NOW + ms).toISOString();

async function getHealth(ctx: Parameters<typeof healthRoutes>[0]) {
  const res = await healthRoutes(ctx).request("/healthz");
  assert.equal(res.status, 200);
  assert.equal(res.headers.get("cache-control"), "no-store");
  return await res.json();
}

Deno.test("/healthz reports the public and the local consumer separately from their status rows", async () => {
  using ctx = openTestContext({ now: () => new Date(NOW) });
  writeCursor(ctx.db, CURSOR_PUBLIC_TIME_US, 1_725_911_162_329_308);
  writeCursor(ctx.db, CURSOR_LOCAL_SEQ, 42);
  writeConsumerStatus(ctx.db, {
    name: CONSUMER_PUBLIC,
    state: "live",
    cursor: 1_725_911_162_000_000,
    lastEventAt: at(-500),
    lastError: null,
    updatedAt: at(-1000),
  });
  writeConsumerStatus(ctx.db, {
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
  });
});

Deno.test("/healthz reports consumers that never ran as disabled and the index as ok", async () => {
  using ctx = openTestContext({ now: () => new Date(NOW) });
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
});

Deno.test("/healthz marks a live consumer whose row stopped updating as stale", async () => {
  using ctx = openTestContext({ now: () => new Date(NOW) });
  for (const name of [CONSUMER_PUBLIC, CONSUMER_LOCAL]) {
    writeConsumerStatus(ctx.db, {
      name,
      state: name === CONSUMER_LOCAL ? "live" : "disabled",
      cursor: null,
      lastEventAt: null,
      lastError: null,
      updatedAt: at(-STALE_STATUS_MS - 1),
    });
  }
  const body = await getHealth(ctx);
  assert.equal(body.status, "degraded");
  assert.equal(body.consumers.local.stale, true);
  assert.equal(body.consumers.public.stale, false);
});
