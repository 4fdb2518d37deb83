// requestCrawl to the relays of PDS_CRAWLERS (docs/behaviour.md 6.1 rule 11): at start, then on
// the first commit after 20 quiet minutes, in the background, each failure logged once with the
// relay and nothing else. The relays are stand-ins: real HTTP servers on port 0 that record calls.

import assert from "node:assert/strict";
import { offsetClock, signUp, startTestServer, xrpcPost } from "../_test_helpers.ts";
import { captureLogRecords, waitFor } from "../../runtime/_test_helpers.ts";
import { COLLECTION_POST } from "../../shared/nsid.ts";
import { CRAWL_NOTIFY_INTERVAL_MS, Crawlers } from "./crawlers.ts";

/** A stand-in relay: records each call's path and JSON body, answers `status`. */
function startRelay(status = 200) {
  const calls: { path: string; body: unknown }[] = [];
  let release!: () => void;
  const released = new Promise<void>((r) => release = r);
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    calls.push({ path: new URL(req.url).pathname, body: await req.json() });
    if (status === 0) await released; // silent: answers only when the test ends
    return Response.json({}, { status: status || 200 });
  });
  return {
    url: `http://127.0.0.1:${server.addr.port}`,
    calls,
    async [Symbol.asyncDispose]() {
      release();
      await server.shutdown();
    },
  };
}

Deno.test("each relay of PDS_CRAWLERS is asked to crawl at start, not again within 20 minutes, and again on the first commit after", async () => {
  await using a = startRelay();
  await using b = startRelay();
  const clock = offsetClock();
  await using s = await startTestServer({
    env: { PDS_CRAWLERS: `${a.url},${b.url}`, PDS_PUBLIC_URL: "https://pds.example.com:8443" },
    now: clock.now,
  });
  const expected = {
    path: "/xrpc/com.atproto.sync.requestCrawl",
    body: { hostname: "pds.example.com:8443" },
  };
  await waitFor(() => a.calls.length === 1 && b.calls.length === 1, { message: "start calls" });
  assert.deepEqual([a.calls[0], b.calls[0]], [expected, expected]);

  // Commits within the interval ask nothing more.
  const alice = await signUp(s.url, "alice.test");
  const post = () =>
    xrpcPost(s.url, "com.atproto.repo.createRecord", {
      repo: alice.did,
      collection: COLLECTION_POST,
      record: { $type: COLLECTION_POST, text: "hi", createdAt: new Date().toISOString() },
    }, { authorization: `Bearer ${alice.accessJwt}` });
  assert.equal((await post()).status, 200);
  clock.advance(CRAWL_NOTIFY_INTERVAL_MS - 1000);
  assert.equal((await post()).status, 200);
  // The first commit after the quiet period asks again (once, however many follow).
  clock.advance(2000);
  assert.equal((await post()).status, 200);
  assert.equal((await post()).status, 200);
  await waitFor(() => a.calls.length === 2 && b.calls.length === 2, { message: "second calls" });
  assert.deepEqual([a.calls[1], b.calls[1]], [expected, expected]);
  assert.ok(s.lines.some((l) => l.includes('"requestCrawl accepted"')));
});

Deno.test("a relay that refuses, is silent or is unreachable is logged without blocking, one request in flight per relay", async () => {
  await using refusing = startRelay(503);
  await using silent = startRelay(0);
  const closed = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const unreachable = `http://127.0.0.1:${closed.addr.port}`;
  closed.close();
  const { log, lines } = captureLogRecords("pds");
  let now = 0;
  const crawlers = new Crawlers({
    crawlers: [refusing.url, silent.url, unreachable],
    publicUrl: "http://localhost:2583",
    log,
    now: () => now,
    timeoutMs: 300,
  });
  crawlers.notifyOfUpdate(); // returns at once: the requests run in the background
  await waitFor(() =>
    lines.some((l) => l.crawler === refusing.url) && lines.some((l) => l.crawler === unreachable)
  );
  now += CRAWL_NOTIFY_INTERVAL_MS;
  crawlers.notifyOfUpdate(); // the silent relay still has its request in flight: not asked again
  await crawlers.settled();
  assert.equal(refusing.calls.length, 2);
  assert.equal(silent.calls.length, 1);
  assert.equal(crawlers.requests, 5);
  const warnings = lines.filter((l) => l.level === "warn");
  assert.deepEqual(
    warnings.filter((w) => w.crawler === refusing.url).map((w) => [w.msg, w.status]),
    [["requestCrawl refused", 503], ["requestCrawl refused", 503]],
  );
  assert.deepEqual(
    warnings.filter((w) => w.crawler === silent.url).map((w) => [w.msg, w.error]),
    [["requestCrawl failed", "no answer within 300 ms"]],
  );
  const down = warnings.filter((w) => w.crawler === unreachable);
  assert.equal(down.length, 2);
  assert.ok(down.every((w) => w.msg === "requestCrawl failed" && typeof w.error === "string"));
  await crawlers.close();
});

Deno.test("without PDS_CRAWLERS no relay is asked", async () => {
  await using relay = startRelay();
  const { log } = captureLogRecords("pds");
  const crawlers = new Crawlers({ crawlers: [], publicUrl: "http://localhost:2583", log });
  await using s = await startTestServer();
  crawlers.start(s.ctx.sequencer);
  await signUp(s.url, "quiet.test");
  await crawlers.close();
  assert.equal(crawlers.requests, 0);
  assert.equal(relay.calls.length, 0);
  assert.ok(!s.lines.some((l) => l.includes("requestCrawl")));
});
