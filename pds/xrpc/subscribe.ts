/**
 * `GET /xrpc/com.atproto.sync.subscribeRepos`: validates the cursor (400 `InvalidRequest`) and
 * the connection caps (503 `ConsumerLimitReached` in total, 429 per address) before the WebSocket
 * upgrade, then hands the socket to the stream hub (`pds/sequencer/stream.ts`). Uses
 * `Deno.upgradeWebSocket` directly: the connection logic needs the raw socket (`bufferedAmount`)
 * and sends pre-encoded frame bytes.
 *
 * @module
 */

import { createHash, timingSafeEqual } from "node:crypto";
import { Hono } from "hono";
import type { PdsContext, PdsEnv } from "../context.ts";
import { XrpcError } from "./errors.ts";
import { clientAddress, clientKey } from "./client_address.ts";

/**
 * Seconds without any data from the consumer before the server pings it and, without a pong in
 * the same time, closes the socket (Deno's default is 30). Consumers never send data, so this
 * is the liveness check; a consumer that reads slowly answers pings and is never disconnected,
 * one that stops reading for minutes is treated as gone.
 */
export const STREAM_IDLE_TIMEOUT_S = 120;

/** Route of the commit stream. */
export function subscribeRoutes(ctx: PdsContext): Hono<PdsEnv> {
  const app = new Hono<PdsEnv>();
  app.get("/xrpc/com.atproto.sync.subscribeRepos", (c) => {
    const cursor = parseCursor(c.req.query("cursor"));
    if (c.req.header("upgrade")?.toLowerCase() !== "websocket") {
      return c.json({
        error: "UpgradeRequired",
        message: "subscribeRepos is a WebSocket endpoint: send Upgrade: websocket",
      }, 426);
    }
    const services = ctx.stream;
    if (!services) throw new XrpcError(503, "NotEnoughResources", "Event stream is not running");
    // Connection caps, checked before the upgrade (nothing awaits between here and serve()).
    // Counted per client: an IPv6 client by its /64, which one subscriber line gets whole.
    const address = clientKey(clientAddress(c, ctx.config.trustProxy));
    const reserved = presentsIngestSecret(c.req.header("authorization"), ctx.config.ingestSecret);
    const refused = services.hub.admission(address, reserved);
    if (refused !== null) {
      const { maxConnections, maxConnectionsPerAddress } = services.hub.limits;
      throw refused === "total"
        ? new XrpcError(
          503,
          "ConsumerLimitReached",
          `Too many subscribeRepos connections: the limit is ${maxConnections}`,
        )
        : new XrpcError(
          429,
          "RateLimitExceeded",
          `Too many subscribeRepos connections from address ${address}: the limit is ${maxConnectionsPerAddress}`,
        );
    }
    const { socket, response } = Deno.upgradeWebSocket(c.req.raw, {
      idleTimeout: STREAM_IDLE_TIMEOUT_S,
    });
    services.hub.serve(socket, cursor, address, reserved);
    return response;
  });
  return app;
}

/**
 * Whether `authorization` is `Bearer <ingest secret>` (the index's consumer, which may take a
 * reserved connection slot). Compared in constant time: SHA-256 of both sides, then
 * `timingSafeEqual`, so neither the content nor the length of the secret leaks. False when no
 * secret is configured.
 */
export function presentsIngestSecret(authorization: string | undefined, secret: string | null) {
  if (secret === null || authorization === undefined) return false;
  const match = /^Bearer (.+)$/.exec(authorization);
  if (match === null) return false;
  return timingSafeEqual(sha256(match[1]), sha256(secret));
}

function sha256(text: string): Uint8Array {
  return createHash("sha256").update(text).digest();
}

/** Parses the optional `cursor` query parameter: a non-negative integer seq. */
export function parseCursor(raw: string | undefined): number | null {
  if (raw === undefined || raw === "") return null;
  const n = Number(raw);
  if (!/^\d{1,16}$/.test(raw) || !Number.isSafeInteger(n)) {
    throw new XrpcError(400, "InvalidRequest", `Invalid cursor: ${JSON.stringify(raw)}`);
  }
  return n;
}
