// The account host's listener (pds/node_listener.ts): ordinary requests with Deno's serve-info
// shape, WebSocket upgrades through the handler, the idle ping, and shutdown.

import assert from "node:assert/strict";
import { listenNode, type ServeInfo, type ServerWebSocket } from "./node_listener.ts";

function listen(
  fetch: (req: Request, info: ServeInfo) => Response | Promise<Response>,
  idleTimeoutMs = 60_000,
) {
  return listenNode({
    hostname: "127.0.0.1",
    port: 0,
    fetch,
    maxClientMessageBytes: 1024,
    idleTimeoutMs,
  });
}

Deno.test("an ordinary request gets the peer address and a completed promise that settles after the response", async () => {
  let completed: Promise<void> | null = null;
  const server = await listen((req, info) => {
    completed = info.completed;
    return Response.json({ addr: info.remoteAddr.hostname, path: new URL(req.url).pathname });
  });
  assert.ok(server.port > 0);
  const res = await fetch(`http://127.0.0.1:${server.port}/x?y=1`);
  assert.deepEqual(await res.json(), { addr: "127.0.0.1", path: "/x" });
  await completed;
  await server.close();
});

Deno.test("an upgrade the handler refuses gets its answer; one it accepts is a WebSocket", async () => {
  const accepted: ServerWebSocket[] = [];
  const server = await listen((req, info) => {
    if (new URL(req.url).pathname === "/no" || !info.upgradeWebSocket) {
      return Response.json({ error: "No" }, { status: 429 });
    }
    const ws = info.upgradeWebSocket();
    accepted.push(ws);
    ws.send(new TextEncoder().encode("hello"));
    return new Response(null);
  });
  const refused = new WebSocket(`ws://127.0.0.1:${server.port}/no`);
  await new Promise((resolve) => refused.onerror = resolve);
  const ok = new WebSocket(`ws://127.0.0.1:${server.port}/yes`);
  ok.binaryType = "arraybuffer";
  const first = await new Promise<ArrayBuffer>((resolve) => ok.onmessage = (e) => resolve(e.data));
  assert.equal(new TextDecoder().decode(first), "hello");
  assert.equal(accepted.length, 1);
  const closed = new Promise<CloseEvent>((resolve) => ok.onclose = resolve);
  await server.close(); // drops the WebSocket still open
  await closed;
});

Deno.test("a WebSocket client that sends nothing is pinged, and dropped when it does not answer", async () => {
  const server = await listen((_req, info) => {
    info.upgradeWebSocket!();
    return new Response(null);
  }, 100);
  // A WHATWG client answers pings: it stays open past several idle periods.
  const live = new WebSocket(`ws://127.0.0.1:${server.port}/`);
  const liveClosed = new Promise<void>((resolve) => live.onclose = () => resolve());
  await new Promise((resolve) => live.onopen = resolve);
  // A raw client that completes the handshake and then reads nothing and answers nothing.
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: server.port });
  await conn.write(new TextEncoder().encode(
    "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
  ));
  const start = performance.now();
  const buf = new Uint8Array(4096);
  let ended = false;
  while (performance.now() - start < 3000) {
    const n = await conn.read(buf).catch(() => null);
    if (n === null) {
      ended = true;
      break;
    }
  }
  conn.close();
  assert.ok(ended, "the silent client was not dropped");
  assert.equal(live.readyState, WebSocket.OPEN);
  live.close();
  await liveClosed;
  await server.close();
});

Deno.test("a taken port is reported as AddressInUseError", async () => {
  using taken = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { AddressInUseError } = await import("./node_listener.ts");
  await assert.rejects(
    listenNode({
      hostname: "127.0.0.1",
      port: (taken.addr as Deno.NetAddr).port,
      fetch: () => new Response(null),
      maxClientMessageBytes: 1024,
      idleTimeoutMs: 1000,
    }),
    AddressInUseError,
  );
});
