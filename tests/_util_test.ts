import assert from "node:assert/strict";
import { makeTempDir, serveOnPort0, startFakeJetstream, waitFor } from "./_util.ts";

Deno.test("serveOnPort0 serves a real socket and closes it", async () => {
  await using server = serveOnPort0(() => new Response("hi"));
  const res = await fetch(`${server.url}/x`);
  assert.equal(res.status, 200);
  assert.equal(await res.text(), "hi");
});

Deno.test("makeTempDir removes the directory on dispose", async () => {
  let path: string;
  {
    await using dir = await makeTempDir();
    path = dir.path;
    await Deno.writeTextFile(`${path}/f`, "x");
  }
  await assert.rejects(() => Deno.stat(path), Deno.errors.NotFound);
});

Deno.test("fake Jetstream delivers sent events to a real WebSocket client", async () => {
  await using js = startFakeJetstream();
  const ws = new WebSocket(`${js.url}?wantedCollections=app.social.*&cursor=5`);
  const received: string[] = [];
  ws.onmessage = (e) => received.push(e.data);
  await js.waitForClients(1);
  js.send({ did: "did:plc:x", time_us: 1, kind: "account" });
  await waitFor(() => received.length === 1);
  assert.deepEqual(JSON.parse(received[0]), { did: "did:plc:x", time_us: 1, kind: "account" });
  assert.equal(js.requests[0].get("wantedCollections"), "app.social.*");
  assert.equal(js.requests[0].get("cursor"), "5");
  const closed = new Promise((r) => (ws.onclose = r));
  ws.close();
  await closed;
});
