// A subscribeRepos consumer that stops reading is switched to stored replay with
// `#info OutdatedCursor`, never disconnected, and gets every seq once it reads again (spec 6.1
// rule 5). The client is a raw TCP WebSocket client, so not reading really fills the socket.

import assert from "node:assert/strict";
import { decodeFrame } from "../../shared/frame.ts";
import { waitFor } from "../../runtime/_test_helpers.ts";
import { RawWsClient, signUp, startTestServer, writePosts, type Writer } from "../_test_helpers.ts";
import { readHeadSeq } from "./event_log.ts";

Deno.test("a subscriber that stops reading while 5,000 commits are written gets OutdatedCursor, then every seq with no gap (spec 6.1 rule 5)", async () => {
  await using s = await startTestServer();
  const services = s.ctx.stream!;
  // Small bounds so that the lag shows up as soon as the kernel's socket buffers are full.
  services.hub.setLimits({ maxBufferedBytes: 16 * 1024, maxQueuedFrames: 20, replayBatch: 100 });
  const writers: Writer[] = [];
  for (let i = 0; i < 20; i++) writers.push(await signUp(s.url, `slow-writer${i}.test`));

  const client = await RawWsClient.connect(s.url);
  try {
    await waitFor(() => services.broadcaster.subscriberCount === 1);
    const start = await readHeadSeq(s.ctx.kv);
    await writePosts(s.url, writers, 5, { prefix: "warm-up" });
    const seen: { t?: string; seq?: number; name?: string }[] = [];
    const readOne = async () => {
      const bytes = await client.readMessage();
      assert.ok(bytes, `connection stays open (closed: ${client.closeCode} ${client.closeReason})`);
      const { header, body } = decodeFrame(bytes);
      seen.push({ t: header.t, seq: body.seq as number, name: body.name as string });
    };
    for (let i = 0; i < 5; i++) await readOne();

    // Stop reading while 5,000 commits are written.
    await writePosts(s.url, writers, 5000, { prefix: "while-stalled" });
    const head = await readHeadSeq(s.ctx.kv);
    assert.equal(head, start + 5005);
    assert.equal(services.hub.connectionCount, 1);

    // Read again until the head arrives.
    while (seen.at(-1)?.seq !== head || seen.at(-1)?.t !== "#commit") await readOne();

    const infos = seen.filter((f) => f.t === "#info");
    assert.ok(infos.length >= 1, "at least one #info frame");
    for (const info of infos) assert.equal(info.name, "OutdatedCursor");
    const seqs = seen.filter((f) => f.t === "#commit").map((f) => f.seq);
    assert.deepEqual(seqs, Array.from({ length: 5005 }, (_, i) => start + 1 + i));
    assert.equal(seen.length, 5005 + infos.length);
  } finally {
    client.close();
  }
  await waitFor(() => services.hub.connectionCount === 0, { message: "server saw the close" });
});
