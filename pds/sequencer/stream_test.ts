// com.atproto.sync.subscribeRepos over real WebSockets against a real account host (spec 6.1
// rules 3-6; docs/protocol.md 6; docs/behaviour.md 10.6 "Event stream").

import assert from "node:assert/strict";
import { readCar } from "../../shared/car.ts";
import { decodeCbor } from "../../shared/cbor.ts";
import { type CID, formatCid } from "../../shared/cid.ts";
import { decodeFrame } from "../../shared/frame.ts";
import {
  signUp,
  startTestServer,
  StreamClient,
  subscribeUrl,
  type TestServer,
  writePosts,
  type Writer,
} from "../_test_helpers.ts";
import { readHeadSeq } from "./event_log.ts";
import { CLIENT_MESSAGE, MAX_CLIENT_MESSAGE_BYTES, MAX_CLIENT_MESSAGES } from "./stream.ts";
import { waitFor } from "../../runtime/_test_helpers.ts";

async function signUpWriters(s: TestServer, n: number, prefix: string): Promise<Writer[]> {
  const out: Writer[] = [];
  for (let i = 0; i < n; i++) out.push(await signUp(s.url, `${prefix}-writer${i}.test`));
  return out;
}

function range(from: number, to: number): number[] {
  return Array.from({ length: to - from + 1 }, (_, i) => from + i);
}

Deno.test("three subscribers (cursor 0, a middle cursor, live) each get every seq once, in order, while 20 writers make 2,000 commits (spec 6.1 rules 3-4)", async () => {
  await using s = await startTestServer();
  const writers = await signUpWriters(s, 20, "w");
  const before = await writePosts(s.url, writers, 100, { prefix: "before" });
  const mid = Math.floor((await readHeadSeq(s.ctx.kv)) / 2);
  const all = await StreamClient.connect(s.url, 0);
  const middle = await StreamClient.connect(s.url, mid);
  const live = await StreamClient.connect(s.url);
  const services = s.ctx.stream!;
  await waitFor(() => services.broadcaster.subscriberCount === 3, { message: "3 subscribers" });
  const liveStart = await readHeadSeq(s.ctx.kv);

  const during = await writePosts(s.url, writers, 2000, { prefix: "during" });
  const head = await readHeadSeq(s.ctx.kv);
  assert.equal(head, liveStart + 2000);
  await Promise.all([all, middle, live].map((c) => c.waitForSeq(head)));

  for (const c of [all, middle, live]) {
    assert.deepEqual(c.decodeErrors, []);
    assert.equal(c.closeCode, null);
    // The sign-ups' #identity, #account and #sync frames, then only commits.
    for (const f of c.frames) {
      assert.ok(["#commit", "#identity", "#account", "#sync"].includes(f.header.t as string));
    }
  }
  assert.deepEqual(all.seqs, range(1, head));
  assert.deepEqual(middle.seqs, range(mid + 1, head));
  assert.deepEqual(live.seqs, range(liveStart + 1, head));
  assert.deepEqual(live.commitSeqs, range(liveStart + 1, head));
  // The same bytes for the same seq, whichever way (replay or live) they were delivered.
  for (let i = 0; i < middle.raw.length; i++) {
    assert.deepEqual(middle.raw[i], all.raw[mid + i]);
  }
  for (let i = 0; i < live.raw.length; i++) {
    assert.deepEqual(live.raw[i], all.raw[liveStart + i]);
  }

  // Every blocks CAR holds its commit; its ops name exactly the records written, once each.
  const written = new Map([...before, ...during]);
  const seen = new Set<string>();
  const dids = new Set(writers.map((w) => w.did));
  for (const { header, body } of all.frames) {
    if (header.t !== "#commit") continue;
    const car = readCar(body.blocks as Uint8Array);
    const commitCid = formatCid(body.commit as CID);
    assert.equal(formatCid(car.roots[0]), commitCid);
    const commitBytes = car.blocks.get(commitCid);
    assert.ok(commitBytes, `commit block of seq ${body.seq}`);
    const commit = decodeCbor(commitBytes) as Record<string, unknown>;
    assert.equal(commit.did, body.repo);
    assert.equal(commit.rev, body.rev);
    assert.equal(commit.version, 3);
    assert.ok(dids.has(body.repo as string));
    for (const op of body.ops as { action: string; path: string; cid: CID | null }[]) {
      const uri = `at://${body.repo}/${op.path}`;
      const w = written.get(uri);
      assert.ok(w, `op ${uri} was written`);
      assert.equal(op.action, "create");
      assert.equal(formatCid(op.cid!), w.cid);
      const record = decodeCbor(car.blocks.get(w.cid)!) as Record<string, unknown>;
      assert.equal(record.text, w.text);
      assert.equal(commitCid, w.commitCid);
      assert.ok(!seen.has(uri), `${uri} appears once`);
      seen.add(uri);
    }
  }
  assert.equal(seen.size, written.size);
  await Promise.all([all, middle, live].map((c) => c.close()));
});

Deno.test("subscribeRepos with a cursor beyond the head sends FutureCursor and closes (reference 6.3)", async () => {
  await using s = await startTestServer();
  await signUp(s.url, "future.test");
  const head = await readHeadSeq(s.ctx.kv);
  const client = await StreamClient.connect(s.url, head + 5);
  await client.closed;
  assert.equal(client.frames.length, 1);
  assert.deepEqual(client.frames[0].header, { op: -1 });
  assert.deepEqual(client.frames[0].body, {
    error: "FutureCursor",
    message: `Cursor ${head + 5} is beyond the latest seq ${head}`,
  });
  assert.equal(client.closeCode, 1008);
  assert.equal(client.closeReason, "FutureCursor");
});

Deno.test("client messages are ignored within a small budget; past it the subscriber is closed with 1008 (reference 6.1)", async () => {
  await using s = await startTestServer();
  const w = await signUp(s.url, "chatty.test");
  const head = await readHeadSeq(s.ctx.kv);
  const open = async () => {
    const socket = new WebSocket(`${subscribeUrl(s.url)}?cursor=${head}`);
    socket.binaryType = "arraybuffer";
    const frames: unknown[] = [];
    socket.onmessage = (e) => frames.push(e.data);
    await new Promise((resolve, reject) => {
      socket.onopen = resolve;
      socket.onerror = reject;
    });
    const closed = new Promise<CloseEvent>((resolve) => socket.onclose = resolve);
    return { socket, frames, closed };
  };
  // A browser-style keep-alive: small text messages, well under the rate.
  const pinger = await open();
  for (let i = 1; i < MAX_CLIENT_MESSAGES; i++) pinger.socket.send("ping");
  pinger.socket.send(new Uint8Array(MAX_CLIENT_MESSAGE_BYTES)); // the budget's last message
  const big = await open();
  big.socket.send(new Uint8Array(MAX_CLIENT_MESSAGE_BYTES + 1));
  const chatty = await open();
  for (let i = 0; i <= MAX_CLIENT_MESSAGES; i++) chatty.socket.send("ping");
  for (const refused of [big, chatty]) {
    const event = await refused.closed;
    assert.equal(event.code, 1008);
    assert.equal(event.reason, CLIENT_MESSAGE);
  }
  await writePosts(s.url, [w], 2);
  await waitFor(() => pinger.frames.length === 2);
  assert.equal(pinger.socket.readyState, WebSocket.OPEN);
  pinger.socket.close();
  await pinger.closed;
  assert.equal(
    s.lines.filter((l) => l.includes("subscriber sent messages past its budget")).length,
    2,
  );
});

Deno.test("a 1 MiB client message closes the subscriber with 1008 and the others are served on (issue 36)", async () => {
  await using s = await startTestServer();
  const w = await signUp(s.url, "bigmessage.test");
  const hub = s.ctx.stream!.hub;
  const head = await readHeadSeq(s.ctx.kv);
  const sender = await StreamClient.connect(s.url, head);
  const bystander = await StreamClient.connect(s.url, head);
  await waitFor(() => hub.connectionCount === 2);
  sender.send(new Uint8Array(1024 * 1024));
  await sender.closed;
  assert.equal(sender.closeCode, 1008);
  assert.equal(sender.closeReason, CLIENT_MESSAGE);
  await waitFor(() => hub.connectionCount === 1);
  await writePosts(s.url, [w], 2);
  await bystander.waitForSeq(head + 2);
  assert.deepEqual(bystander.commitSeqs, [head + 1, head + 2]);
  await bystander.close();
});

Deno.test("subscribeRepos with the cursor at the head is live from the next commit", async () => {
  await using s = await startTestServer();
  const w = await signUp(s.url, "athead.test");
  const head = await readHeadSeq(s.ctx.kv);
  const client = await StreamClient.connect(s.url, head);
  await waitFor(() => s.ctx.stream!.broadcaster.subscriberCount === 1);
  await writePosts(s.url, [w], 3);
  await client.waitForSeq(head + 3);
  assert.deepEqual(client.commitSeqs, [head + 1, head + 2, head + 3]);
  await client.close();
});

Deno.test("subscribeRepos rejects an invalid cursor with 400 before the upgrade", async () => {
  await using s = await startTestServer();
  for (const cursor of ["abc", "-1", "1.5", "1e3", "99999999999999999"]) {
    const url = subscribeUrl(s.url).replace(/^ws/, "http") + `?cursor=${cursor}`;
    const res = await fetch(url, { headers: { upgrade: "websocket" } });
    assert.equal(res.status, 400, cursor);
    assert.deepEqual(await res.json(), {
      error: "InvalidRequest",
      message: `Invalid cursor: ${JSON.stringify(cursor)}`,
    });
  }
});

Deno.test("subscribeRepos without an Upgrade header answers 426", async () => {
  await using s = await startTestServer();
  const res = await fetch(subscribeUrl(s.url).replace(/^ws/, "http"));
  assert.equal(res.status, 426);
  assert.equal((await res.json()).error, "UpgradeRequired");
});

Deno.test("each live frame is encoded once and the same bytes reach every subscriber", async () => {
  await using s = await startTestServer();
  const w = await signUp(s.url, "once.test");
  const services = s.ctx.stream!;
  const clients = await Promise.all(Array.from({ length: 5 }, () => StreamClient.connect(s.url)));
  await waitFor(() => services.broadcaster.subscriberCount === 5);
  const head = await readHeadSeq(s.ctx.kv);
  // The sign-up's last frame (#sync) may still be on its way to the broadcaster.
  await waitFor(() => services.broadcaster.lastSeq === head);
  const encodedBefore = services.broadcaster.framesEncoded;
  await writePosts(s.url, [w], 10);
  await Promise.all(clients.map((c) => c.waitForSeq(head + 10)));
  assert.equal(services.broadcaster.framesEncoded - encodedBefore, 10);
  for (const c of clients) {
    assert.deepEqual(c.commitSeqs, range(head + 1, head + 10));
    assert.deepEqual(c.raw, clients[0].raw);
    assert.equal(decodeFrame(c.raw[0]).body.seq, head + 1);
  }
  await Promise.all(clients.map((c) => c.close()));
});
