import assert from "node:assert/strict";
import { createLogger, formatLogLine, redactUrl } from "./log.ts";

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

Deno.test("redactUrl hides credentials and query values but keeps the stream cursor", () => {
  assert.equal(
    redactUrl("wss://op:pw@js.example:8443/subscribe?apiKey=k&cursor=5&token=t#frag"),
    "wss://redacted:redacted@js.example:8443/subscribe?apiKey=redacted&cursor=5&token=redacted#frag",
  );
  assert.equal(redactUrl("https://key@idx.example/x"), "https://redacted@idx.example/x");
  assert.equal(
    redactUrl("ws://127.0.0.1:2583/xrpc/com.atproto.sync.subscribeRepos?cursor=42"),
    "ws://127.0.0.1:2583/xrpc/com.atproto.sync.subscribeRepos?cursor=42",
  );
  assert.equal(redactUrl("http://a.example/?k=1&k=2"), "http://a.example/?k=redacted");
  assert.equal(redactUrl("not a url secret=1"), "(unparseable URL)");
});
