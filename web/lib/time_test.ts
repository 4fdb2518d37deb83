import assert from "node:assert/strict";
import { shortAge } from "./time.ts";

Deno.test("shortAge reads as now, minutes, hours and days, then a date", () => {
  const now = Date.parse("2026-11-27T12:00:00Z");
  assert.equal(shortAge("2026-11-27T11:59:30Z", now), "now");
  assert.equal(shortAge("2026-11-27T12:00:30Z", now), "now"); // a clock slightly ahead
  assert.equal(shortAge("2026-11-27T11:55:00Z", now), "5m");
  assert.equal(shortAge("2026-11-27T09:00:00Z", now), "3h");
  assert.equal(shortAge("2026-11-25T12:00:00Z", now), "2d");
  assert.match(shortAge("2026-10-01T12:00:00Z", now), /2026/);
  assert.equal(shortAge("not a time", now), "");
});
