import assert from "node:assert/strict";
import { COLLECTION_FOLLOW, COLLECTION_POST } from "../../../shared/nsid.ts";
import type { IndexOp } from "../../../shared/ops.ts";
import { startFakeJetstream } from "../../_test_helpers.ts";
import { waitFor } from "../../../runtime/_test_helpers.ts";
import { CONSUMER_PUBLIC, CURSOR_LOCAL_SEQ, CURSOR_PUBLIC_TIME_US } from "../../db/state.ts";
import { didOf, followOp, handleOp, likeOp, postOp, uriOf } from "../../_fixtures.ts";
import {
  type StandInEvent,
  startJetstreamStandIn,
  toJetstreamEvent,
} from "./_jetstream_stand_in.ts";
import {
  type BackendContext,
  captureLogRecords,
  endBackendTests,
  FAST_BACKOFF,
  forEachBackend,
  makeCommit,
  openBackendContext,
  openTestContext,
  revOf,
} from "../../_test_helpers.ts";
import { createJetstreamConsumer, JETSTREAM_REWIND_US, JetstreamProtocol } from "./jetstream.ts";
import type { IndexWriterApi } from "../../db/store.ts";
import type { StreamConsumer } from "./stream_consumer.ts";

const ALICE = didOf("alice");
const BOB = didOf("bob");
const T0 = 1_725_911_162_329_308;

function postEvent(i: number, did = ALICE): Record<string, unknown> {
  return makeCommit(i, [postOp(did, `3kaaaaaaaa${String(i).padStart(3, "a")}`, `post ${i}`)])
    .jetstream(T0 + i * 10)[0];
}

async function count(ctx: BackendContext, table: string): Promise<number> {
  return (await ctx.rows<{ n: number }>(`SELECT count(*) AS n FROM ${table}`))[0].n;
}

function started(consumer: StreamConsumer | null): StreamConsumer {
  assert.ok(consumer !== null);
  consumer.start();
  return consumer;
}

forEachBackend(
  "public consumer asks for app.social.* and applies commit events (spec 6.3)",
  async (backend) => {
    await using js = startFakeJetstream();
    await using ctx = await openBackendContext(backend);
    await using consumer = started(createJetstreamConsumer(ctx, { url: js.url, ...FAST_BACKOFF }));
    await js.waitForClients(1);
    assert.equal(js.requests[0].get("wantedCollections"), "app.social.*");
    assert.equal(js.requests[0].get("cursor"), null);
    js.send(postEvent(1));
    js.send(postEvent(2, BOB));
    await waitFor(() => consumer.status().cursor === T0 + 20);
    assert.equal(await count(ctx, "posts"), 2);
    assert.equal(await ctx.store.state.readCursor(CURSOR_PUBLIC_TIME_US), T0 + 20);
    assert.equal(await ctx.store.state.readCursor(CURSOR_LOCAL_SEQ), null);
    assert.equal((await ctx.store.state.readConsumerStatus(CONSUMER_PUBLIC))?.state, "live");
  },
);

forEachBackend(
  "public consumer rewinds the stored cursor a few seconds on reconnect",
  async (backend) => {
    await using js = startFakeJetstream();
    await using ctx = await openBackendContext(backend);
    await using consumer = started(createJetstreamConsumer(ctx, { url: js.url, ...FAST_BACKOFF }));
    await js.waitForClients(1);
    js.send(postEvent(1));
    await waitFor(() => consumer.status().cursor === T0 + 10);
    js.dropClients();
    await waitFor(() => js.requests.length === 2);
    assert.equal(js.requests[1].get("cursor"), String(T0 + 10 - JETSTREAM_REWIND_US));
    assert.equal(js.requests[1].get("wantedCollections"), "app.social.*");
    // Redelivery after the rewind is harmless and the cursor never moves backwards.
    await js.waitForClients(1);
    js.send(postEvent(1));
    js.send({
      did: ALICE,
      time_us: T0 + 5,
      kind: "account",
      account: { active: true, did: ALICE },
    });
    js.send(postEvent(3));
    await waitFor(async () => await count(ctx, "posts") === 2);
    assert.equal(consumer.status().cursor, T0 + 30);
  },
);

forEachBackend(
  "public consumer applies identity events as handle updates",
  async (backend) => {
    await using js = startFakeJetstream();
    await using ctx = await openBackendContext(backend);
    await using consumer = started(createJetstreamConsumer(ctx, { url: js.url, ...FAST_BACKOFF }));
    await js.waitForClients(1);
    js.send(postEvent(1));
    js.send({
      did: ALICE,
      time_us: T0 + 50,
      kind: "identity",
      identity: {
        did: ALICE,
        handle: "Alice.Example.com",
        seq: 1,
        time: "2024-09-05T06:11:04.870Z",
      },
    });
    await waitFor(() => consumer.status().cursor === T0 + 50);
    assert.deepEqual(await ctx.rows("SELECT handle FROM posts WHERE did = ?", ALICE), [
      { handle: "alice.example.com" },
    ]);
  },
);

forEachBackend(
  "public consumer resolves a follow delete by rkey (spec 6.3)",
  async (backend) => {
    await using js = startFakeJetstream();
    await using ctx = await openBackendContext(backend);
    await using consumer = started(createJetstreamConsumer(ctx, { url: js.url, ...FAST_BACKOFF }));
    await js.waitForClients(1);
    const follow = makeCommit(1, [followOp(BOB, "3kfollowfoll2", ALICE)]).jetstream(T0 + 1)[0];
    js.send(follow);
    js.send({
      did: BOB,
      time_us: T0 + 2,
      kind: "commit",
      commit: {
        rev: "3l3qo2vutsw2b",
        operation: "delete",
        collection: COLLECTION_FOLLOW,
        rkey: "3kfollowfoll2",
      },
    });
    await waitFor(() => consumer.status().cursor === T0 + 2);
    assert.equal(await count(ctx, "follows"), 0);
  },
);

forEachBackend(
  "public consumer skips malformed events with a log line and applies later ones",
  async (backend) => {
    await using js = startFakeJetstream();
    const { log, lines } = captureLogRecords();
    await using ctx = await openBackendContext(backend, { log });
    await using consumer = started(createJetstreamConsumer(ctx, { url: js.url, ...FAST_BACKOFF }));
    await js.waitForClients(1);
    const bad = [
      "{not json",
      "",
      "null",
      JSON.stringify({ did: ALICE, kind: "commit" }),
      JSON.stringify({ did: ALICE, time_us: "soon", kind: "commit" }),
      JSON.stringify({ did: ALICE, time_us: T0 + 1, kind: "mystery" }),
      JSON.stringify({ did: "nope", time_us: T0 + 2, kind: "commit", commit: {} }),
      JSON.stringify({
        did: ALICE,
        time_us: T0 + 3,
        kind: "commit",
        commit: {
          operation: "create",
          collection: COLLECTION_POST,
          rkey: "3kaaaaaaaaaa2",
          cid: "nope",
          record: {},
        },
      }),
      JSON.stringify({ did: ALICE, time_us: 1e300, kind: "commit" }),
    ];
    for (const text of bad) js.send(text);
    js.send(postEvent(5));
    await waitFor(() => consumer.status().cursor === T0 + 50);
    const skipped = lines.filter((l) => l.level === "warn" && /skipped/.test(String(l.msg)));
    assert.equal(skipped.length, bad.length, JSON.stringify(skipped.map((l) => l.msg)));
    assert.equal(await count(ctx, "posts"), 1);
    assert.equal(js.requests.length, 1);
    assert.equal(consumer.status().state, "live");
  },
);

forEachBackend(
  "public consumer logs and reports its URL without credentials or query secrets",
  async (backend) => {
    await using js = startFakeJetstream();
    const { log, lines } = captureLogRecords();
    await using ctx = await openBackendContext(backend, { log });
    const secretUrl = js.url.replace("ws://", "ws://operator:hunter2@") + "?apiKey=SECRET-KEY";
    await using consumer = started(
      createJetstreamConsumer(ctx, { url: secretUrl, ...FAST_BACKOFF }),
    );
    await js.waitForClients(1);
    assert.equal(js.requests[0].get("apiKey"), "SECRET-KEY"); // the server still gets it
    js.dropClients();
    await waitFor(() => js.requests.length === 2);
    await js.close(); // now every attempt fails: lastError names the URL
    await waitFor(() =>
      consumer.status().lastError !== null && consumer.status().state === "backoff"
    );
    const shown = js.url.replace("ws://", "ws://redacted:redacted@") +
      "?apiKey=redacted&wantedCollections=app.social.*";
    const connected = lines.find((l) => l.msg === "Stream connected");
    assert.equal(connected?.url, shown);
    const everything = JSON.stringify(lines) + JSON.stringify(consumer.status()) +
      JSON.stringify(await ctx.store.state.readConsumerStatus(CONSUMER_PUBLIC));
    assert.equal(everything.includes("hunter2"), false);
    assert.equal(everything.includes("SECRET-KEY"), false);
    assert.ok(lines.some((l) => l.msg === "Stream connection closed"));
  },
);

// Configuration and the protocol's URLs and decoding, before the index is reached: one backend.
Deno.test("public consumer is not built when no Jetstream URL is configured", () => {
  using ctx = openTestContext();
  assert.equal(ctx.config.jetstreamUrl, null);
  assert.equal(createJetstreamConsumer(ctx), null);
});

Deno.test("JetstreamProtocol keeps other query parameters of the configured URL", () => {
  const p = new JetstreamProtocol("wss://js.example/subscribe?compress=false");
  assert.equal(
    p.connectUrl(null, "start"),
    "wss://js.example/subscribe?compress=false&wantedCollections=app.social.*",
  );
  assert.equal(
    p.connectUrl(T0, "reconnect"),
    `wss://js.example/subscribe?compress=false&wantedCollections=app.social.*&cursor=${
      T0 - JETSTREAM_REWIND_US
    }`,
  );
});

Deno.test("JetstreamProtocol rewinds the cursor on start and after a lost connection, never on a resume after a pause (issue 36)", () => {
  const p = new JetstreamProtocol("ws://h:1/subscribe");
  const cursorOf = (reason: "start" | "resume" | "reconnect") =>
    new URL(p.connectUrl(T0, reason)).searchParams.get("cursor");
  assert.deepEqual(
    [cursorOf("start"), cursorOf("reconnect"), cursorOf("resume")],
    [String(T0 - JETSTREAM_REWIND_US), String(T0 - JETSTREAM_REWIND_US), String(T0)],
  );
  assert.equal(new URL(p.connectUrl(1_000, "reconnect")).searchParams.get("cursor"), "0");
});

Deno.test("JetstreamProtocol gates a commit event by its rev (newer or equal) and leaves identity events ungated", () => {
  const p = new JetstreamProtocol("ws://h:1/subscribe");
  const control = { log: captureLogRecords().log, fail: () => {}, disconnect: () => {} };
  const commit = makeCommit(1, [postOp(ALICE, "3kaaaaaaaaaa2", "hi")]);
  const [event] = commit.jetstream(T0);
  assert.deepEqual(p.decode(JSON.stringify(event), null, control)?.commit, {
    did: ALICE,
    rev: commit.rev,
    mode: "newer-or-equal",
  });
  // Without a valid rev the event cannot be placed: applied ungated, as before.
  const bare = { ...event, commit: { ...(event.commit as object), rev: "not-a-tid" } };
  const decoded = p.decode(JSON.stringify(bare), null, control);
  assert.equal(decoded?.ops.length, 1);
  assert.equal(decoded?.commit, undefined);
  const identity = { did: ALICE, time_us: T0 + 1, kind: "identity", identity: { handle: "a.b" } };
  assert.equal(p.decode(JSON.stringify(identity), null, control)?.commit, undefined);
});

/** What a dense backlog should leave in the index. */
interface Backlog {
  events: StandInEvent[];
  posts: number;
  likes: number;
  follows: number;
}

/**
 * `n` events `spacingUs` apart from T0: posts (a quarter of them replies), likes, follows and
 * identity events by 200 accounts, each event's rev above the last of its account.
 */
function denseBacklog(n: number, spacingUs: number): Backlog {
  const dids = Array.from({ length: 200 }, (_, k) => didOf(`dense${k}`));
  const followed = dids.map(() => 0);
  const posts: string[] = [];
  const backlog: Backlog = { events: [], posts: 0, likes: 0, follows: 0 };
  for (let i = 0; i < n; i++) {
    const k = i % dids.length;
    const did = dids[k];
    const rkey = `r${i.toString(36)}`;
    const roll = Math.floor(i / dids.length + i) % 10;
    let op: IndexOp;
    if (roll < 4 || posts.length === 0) {
      const parent = roll === 1 && posts.length > 0 ? posts[posts.length - 1] : undefined;
      op = postOp(did, rkey, `dense post ${i}`, { parent });
      posts.push(uriOf(did, COLLECTION_POST, rkey));
      backlog.posts++;
    } else if (roll < 7) {
      op = likeOp(did, rkey, posts[i % posts.length]);
      backlog.likes++;
    } else if (roll < 9) {
      op = followOp(did, rkey, dids[(k + 1 + followed[k]++) % dids.length]);
      backlog.follows++;
    } else {
      op = handleOp(did, `dense${k}-${i}.test`);
    }
    backlog.events.push(toJetstreamEvent(op, T0 + i * spacingUs, revOf(i + 1)));
  }
  return backlog;
}

/** Counts the ops each `applyOps` call of `writer` is given. */
function countOffered(writer: IndexWriterApi): { ops: number } {
  const seen = { ops: 0 };
  const apply = writer.applyOps.bind(writer);
  writer.applyOps = (ops, opts) => {
    seen.ops += ops.length;
    return apply(ops, opts);
  };
  return seen;
}

async function sum(ctx: BackendContext, sql: string): Promise<number> {
  return (await ctx.rows<{ n: number | null }>(sql))[0].n ?? 0;
}

forEachBackend(
  "public consumer catches up a dense backlog across flow-control pauses, applying each event once (issue 36)",
  async (backend) => {
    // 30,000 events 100 us apart (10,000 per second of stream time): 5 s of rewind would cover
    // the whole backlog, ten times the queue bound.
    const N = 30_000;
    const backlog = denseBacklog(N, 100);
    const last = backlog.events[N - 1].time_us;
    await using js = startJetstreamStandIn(backlog.events);
    const { log, lines } = captureLogRecords();
    await using ctx = await openBackendContext(backend, { log });
    const offered = countOffered(ctx.store.writer);
    await using consumer = started(createJetstreamConsumer(ctx, {
      url: js.url,
      ...FAST_BACKOFF,
      yieldBetweenBatches: true,
      maxBatchOps: 500,
      maxQueuedMessages: 1_000,
    }));
    await waitFor(() => consumer.status().cursor === last, {
      timeoutMs: 60_000,
      message: "the cursor to reach the last event",
    });
    assert.equal(await ctx.store.state.readCursor(CURSOR_PUBLIC_TIME_US), last);
    assert.deepEqual(
      [await count(ctx, "posts"), await count(ctx, "likes"), await count(ctx, "follows")],
      [backlog.posts, backlog.likes, backlog.follows],
    );
    // Counters count each record once.
    assert.deepEqual(
      [
        await sum(ctx, "SELECT sum(post_count) AS n FROM profiles"),
        await sum(ctx, "SELECT sum(like_count) AS n FROM posts"),
        await sum(ctx, "SELECT sum(follower_count) AS n FROM profiles"),
      ],
      [backlog.posts, backlog.likes, backlog.follows],
    );
    // It paused, and each resume asked for the cursor it had applied, not a rewound one: the
    // write path was given every event once, plus the one at each resume's cursor.
    const pauses = lines.filter((l) =>
      l.msg === "Pausing the stream until the index applies what it received"
    );
    const resumes = lines.filter((l) => l.msg === "Resuming the stream");
    assert.ok(pauses.length >= 2, `${pauses.length} pauses`);
    assert.equal(resumes.length, pauses.length);
    assert.deepEqual(
      js.requests.map((q) => q.get("cursor")),
      [null, ...resumes.map((l) => String(l.cursor))],
    );
    assert.equal(offered.ops, N + resumes.length);
    assert.equal(lines.filter((l) => l.msg === "Reconnecting after backoff").length, 0);

    // A connection lost in an unknown state (here closed by the server) is still rewound.
    const sentBefore = js.sent();
    const requestsBefore = js.requests.length;
    js.dropClients();
    await js.waitForRequests(requestsBefore + 1);
    assert.equal(js.requests[requestsBefore].get("cursor"), String(last - JETSTREAM_REWIND_US));
    // And the rewound replay does not hold it: it is sent through, or paused and resumed past it.
    await waitFor(
      () =>
        js.sent() >= sentBefore + N ||
        js.requests.slice(requestsBefore + 1).some((q) => q.get("cursor") === String(last)),
      { timeoutMs: 30_000, message: "the rewound replay passed" },
    );
    assert.equal(await count(ctx, "posts"), backlog.posts);
    assert.equal(consumer.status().cursor, last);
  },
);

forEachBackend(
  "public consumer rewinds after an idle timeout, as after any connection lost in an unknown state",
  async (backend) => {
    const backlog = denseBacklog(3, 100);
    const last = backlog.events[2].time_us;
    await using js = startJetstreamStandIn(backlog.events);
    await using ctx = await openBackendContext(backend);
    await using consumer = started(
      createJetstreamConsumer(ctx, { url: js.url, ...FAST_BACKOFF, idleTimeoutMs: 150 }),
    );
    await waitFor(() => consumer.status().cursor === last);
    await js.waitForRequests(2, { timeoutMs: 3_000 });
    assert.deepEqual(
      js.requests.slice(0, 2).map((q) => q.get("cursor")),
      [null, String(last - JETSTREAM_REWIND_US)],
    );
    await waitFor(() => js.sent() >= 6, { message: "the rewound replay" });
    assert.equal(await count(ctx, "posts"), backlog.posts);
    assert.equal(consumer.status().cursor, last);
  },
);

endBackendTests();
