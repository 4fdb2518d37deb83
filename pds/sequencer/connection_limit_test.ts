// subscribeRepos connection caps (spec 8: bounded resources): a total cap (503
// ConsumerLimitReached) and a per-address cap (429), both answered before the WebSocket upgrade.

import assert from "node:assert/strict";
import { waitFor } from "../../runtime/_test_helpers.ts";
import { startTestServer, StreamClient } from "../_test_helpers.ts";
import { DEFAULT_STREAM_LIMITS } from "./stream.ts";

/** Sends a WebSocket upgrade request over raw TCP; returns the status and the JSON body. */
async function upgradeAttempt(
  baseUrl: string,
  extraHeaders: string[] = [],
): Promise<{ status: number; body: unknown }> {
  const { hostname, port } = new URL(baseUrl);
  using conn = await Deno.connect({ hostname, port: Number(port) });
  const request = [
    "GET /xrpc/com.atproto.sync.subscribeRepos HTTP/1.1",
    `Host: ${hostname}:${port}`,
    "Upgrade: websocket",
    "Connection: Upgrade",
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
    "Sec-WebSocket-Version: 13",
    ...extraHeaders,
    "",
    "",
  ].join("\r\n");
  await conn.write(new TextEncoder().encode(request));
  let text = "";
  const buf = new Uint8Array(4096);
  for (;;) {
    const end = text.indexOf("\r\n\r\n");
    if (end >= 0) {
      const length = Number(/content-length: (\d+)/i.exec(text.slice(0, end))?.[1] ?? 0);
      if (text.length >= end + 4 + length) {
        return {
          status: Number(text.split(" ")[1]),
          body: JSON.parse(text.slice(end + 4, end + 4 + length)),
        };
      }
    }
    const n = await conn.read(buf);
    if (n === null) throw new Error(`Connection closed after: ${text}`);
    text += new TextDecoder().decode(buf.subarray(0, n));
  }
}

Deno.test("subscribeRepos connection caps default to 2,000 in total and 100 per address", () => {
  assert.equal(DEFAULT_STREAM_LIMITS.maxConnections, 2000);
  assert.equal(DEFAULT_STREAM_LIMITS.maxConnectionsPerAddress, 100);
});

Deno.test("subscribeRepos refuses connections past the total cap with 503 ConsumerLimitReached", async () => {
  await using s = await startTestServer();
  const hub = s.ctx.stream!.hub;
  hub.setLimits({ maxConnections: 2, maxConnectionsPerAddress: 10 });
  const a = await StreamClient.connect(s.url);
  const b = await StreamClient.connect(s.url);
  assert.equal(hub.connectionCount, 2);
  assert.deepEqual(await upgradeAttempt(s.url), {
    status: 503,
    body: {
      error: "ConsumerLimitReached",
      message: "Too many subscribeRepos connections: the limit is 2",
    },
  });
  assert.equal(hub.connectionCount, 2);
  await a.close();
  await waitFor(() => hub.connectionCount === 1);
  const c = await StreamClient.connect(s.url);
  assert.equal(c.closeCode, null);
  await Promise.all([b.close(), c.close()]);
});

Deno.test("subscribeRepos refuses one address past its cap with 429 while others' connections count apart", async () => {
  await using s = await startTestServer();
  const hub = s.ctx.stream!.hub;
  hub.setLimits({ maxConnections: 10, maxConnectionsPerAddress: 2 });
  const a = await StreamClient.connect(s.url);
  const b = await StreamClient.connect(s.url);
  assert.deepEqual(await upgradeAttempt(s.url), {
    status: 429,
    body: {
      error: "RateLimitExceeded",
      message: "Too many subscribeRepos connections from address 127.0.0.1: the limit is 2",
    },
  });
  assert.equal(hub.admission("10.0.0.1"), null);
  assert.equal(hub.admission("127.0.0.1"), "address");
  await b.close();
  await waitFor(() => hub.admission("127.0.0.1") === null);
  const c = await StreamClient.connect(s.url);
  assert.equal(c.closeCode, null);
  await Promise.all([a.close(), c.close()]);
  await waitFor(() => hub.connectionCount === 0);
});

const SECRET = "stream-ingest-secret-0123456789";
const FULL = {
  status: 503,
  body: {
    error: "ConsumerLimitReached",
    message: "Too many subscribeRepos connections: the limit is 2",
  },
};

Deno.test("a subscriber presenting the ingest secret gets a reserved slot when the public ones are full; without it or with a wrong one, 503", async () => {
  await using s = await startTestServer({ env: { APPVIEW_INGEST_SECRET: SECRET } });
  const hub = s.ctx.stream!.hub;
  hub.setLimits({ maxConnections: 2, reservedConnections: 1, maxConnectionsPerAddress: 10 });
  const publicOnes = [await StreamClient.connect(s.url), await StreamClient.connect(s.url)];
  assert.equal(hub.connectionCount, 2);
  assert.deepEqual(await upgradeAttempt(s.url), FULL);
  assert.deepEqual(await upgradeAttempt(s.url, [`Authorization: Bearer ${SECRET}x`]), FULL);
  assert.deepEqual(await upgradeAttempt(s.url, [`Authorization: Bearer ${SECRET.slice(1)}`]), FULL);
  assert.equal(hub.connectionCount, 2);

  const index = await StreamClient.connect(s.url, undefined, {
    authorization: `Bearer ${SECRET}`,
  });
  assert.equal(index.closeCode, null);
  assert.equal(hub.connectionCount, 3);
  // The reserved slot is taken: a second one with the secret is refused as well.
  assert.deepEqual(await upgradeAttempt(s.url, [`Authorization: Bearer ${SECRET}`]), {
    status: 503,
    body: {
      error: "ConsumerLimitReached",
      message: "Too many subscribeRepos connections: the limit is 2",
    },
  });
  await Promise.all([...publicOnes, index].map((c) => c.close()));
  await waitFor(() => hub.connectionCount === 0);
});

Deno.test("subscribeRepos reserves no slot when no ingest secret is configured", async () => {
  await using s = await startTestServer();
  const hub = s.ctx.stream!.hub;
  hub.setLimits({ maxConnections: 1, reservedConnections: 1, maxConnectionsPerAddress: 10 });
  const a = await StreamClient.connect(s.url);
  assert.deepEqual(await upgradeAttempt(s.url, ["Authorization: Bearer anything"]), {
    status: 503,
    body: {
      error: "ConsumerLimitReached",
      message: "Too many subscribeRepos connections: the limit is 1",
    },
  });
  await a.close();
});

Deno.test("subscribeRepos refuses a /64 past the per-address cap whichever of its addresses asks", async () => {
  await using s = await startTestServer({ env: { PDS_TRUST_PROXY: "true" } });
  const hub = s.ctx.stream!.hub;
  hub.setLimits({ maxConnections: 10, maxConnectionsPerAddress: 1 });
  const a = await StreamClient.connect(s.url, undefined, { "x-forwarded-for": "2001:db8:1:2::1" });
  assert.equal(a.closeCode, null);
  assert.deepEqual(await upgradeAttempt(s.url, ["X-Forwarded-For: 2001:db8:1:2:ffff::9"]), {
    status: 429,
    body: {
      error: "RateLimitExceeded",
      message: "Too many subscribeRepos connections from address 2001:db8:1:2::/64: the limit is 1",
    },
  });
  assert.equal(hub.admission("2001:db8:1:3::1"), null);
  await a.close();
});
