/**
 * `GET /xrpc/com.atproto.sync.subscribeRepos`: validates the cursor (400 `InvalidRequest`) and
 * the connection caps (503 `ConsumerLimitReached` in total, 429 per address) before the WebSocket
 * upgrade, then hands the socket to the stream hub (`pds/sequencer/stream.ts`). Uses
 * `Deno.upgradeWebSocket` directly: the connection logic needs the raw socket (`bufferedAmount`)
 * and sends pre-encoded frame bytes.
 *
 * @module
 */

import { Hono } from "hono";
import type { PdsContext, PdsEnv } from "../context.ts";
import { streamServicesFor } from "../sequencer/services.ts";
import { XrpcError } from "./errors.ts";
import { clientAddress } from "./server.ts";

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
    const services = streamServicesFor(ctx);
    if (!services) throw new XrpcError(503, "NotEnoughResources", "Event stream is not running");
    // Connection caps, checked before the upgrade (nothing awaits between here and serve()).
    const address = clientAddress(c, ctx.config.trustProxy);
    const refused = services.hub.admission(address);
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
    services.hub.serve(socket, cursor, address);
    return response;
  });
  return app;
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
