// Per-client request rates (issue 36 item 3): a token bucket per key, bounded.

import assert from "node:assert/strict";
import { RateLimiter } from "./rate_limiter.ts";

Deno.test("RateLimiter passes a burst of perHour, then one every 3600/perHour seconds", () => {
  const limiter = new RateLimiter({ perHour: 4 });
  assert.deepEqual([0, 0, 0, 0].map(() => limiter.take("a", 0)), [0, 0, 0, 0]);
  assert.equal(limiter.take("a", 0), 900);
  assert.equal(limiter.take("a", 899_001), 1);
  assert.equal(limiter.take("b", 0), 0);
  assert.equal(limiter.take("a", 900_000), 0);
  assert.equal(limiter.take("a", 900_000), 900);
});

Deno.test("RateLimiter keeps at most maxEntries keys, forgetting full buckets first", () => {
  const limiter = new RateLimiter({ perHour: 2, maxEntries: 10 });
  limiter.take("busy", 0);
  limiter.take("busy", 0);
  for (let i = 0; i < 100; i++) limiter.take(`once${i}`, 1);
  assert.ok(limiter.size <= 10, `size ${limiter.size}`);
  assert.equal(limiter.take("busy", 2), 1800);
});
