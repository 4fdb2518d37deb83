import assert from "node:assert/strict";
import { createLogger, formatLogLine } from "./log.ts";

Deno.test("createLogger writes one JSON line per event at or above its level", () => {
  const lines: string[] = [];
  const now = () => new Date("2026-01-02T03:04:05.000Z");
  const log = createLogger("pds", { level: "info", sink: (l) => lines.push(l), now });
  log.debug("dropped");
  log.info("started", { port: 2583 });
  log.child("invites").warn("relaxed", { err: new TypeError("boom") });
  assert.deepEqual(lines.map((l) => JSON.parse(l)), [
    {
      time: "2026-01-02T03:04:05.000Z",
      level: "info",
      component: "pds",
      msg: "started",
      port: 2583,
    },
    {
      time: "2026-01-02T03:04:05.000Z",
      level: "warn",
      component: "pds.invites",
      msg: "relaxed",
      err: { name: "TypeError", message: "boom" },
    },
  ]);
});

Deno.test("formatLogLine survives unserialisable fields", () => {
  const cyclic: Record<string, unknown> = {};
  cyclic.self = cyclic;
  const line = JSON.parse(formatLogLine(new Date(0), "error", "x", "m", { cyclic }));
  assert.equal(line.fields, "unserialisable");
  assert.equal(line.msg, "m");
});
