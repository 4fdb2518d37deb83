/**
 * The account host's listener: `node:http` for every request, with WebSocket upgrades completed by
 * `ws` (issue 36 item 9). `Deno.serve` reads a whole client message (up to 64 MiB) before any
 * handler sees it and has no setting to bound that; `ws` checks each frame header against
 * `maxPayload` and fails the connection before reading the payload.
 *
 * Ordinary requests go to the fetch handler through `@hono/node-server`; upgrade requests go to the
 * same handler, with {@link ServeInfo.upgradeWebSocket} set: a route that accepts calls it (the
 * handshake completes synchronously, so admission and counting stay in one turn), one that refuses
 * answers as usual and the answer is written to the raw socket. The handler's second argument has
 * the shape of Deno's `ServeHandlerInfo` (`remoteAddr`, `completed`), which the routes read.
 *
 * @module
 */

import http from "node:http";
import type { Socket } from "node:net";
import type { Duplex } from "node:stream";
import { getRequestListener } from "@hono/node-server";
import { WebSocketServer } from "ws";

/** What a handler gets besides the request (the parts of `Deno.ServeHandlerInfo` used). */
export interface ServeInfo {
  remoteAddr: Deno.NetAddr;
  /** Settles when the server is done with the response (sent, or the client gone). */
  completed: Promise<void>;
  /**
   * On a WebSocket upgrade request only: completes the handshake now and returns the open socket;
   * the handler's response is then ignored.
   */
  upgradeWebSocket?: () => ServerWebSocket;
}

/** The part of a `ws` server-side socket the account host uses (open when handed over). */
export interface ServerWebSocket {
  readonly readyState: number;
  readonly bufferedAmount: number;
  binaryType: string;
  send(data: Uint8Array): void;
  close(code?: number, reason?: string): void;
  terminate(): void;
  ping(): void;
  on(event: "message" | "ping" | "pong" | "close" | "error", listener: () => void): void;
  onopen: ((event: unknown) => void) | null;
  onclose: ((event: { code: number; reason: string }) => void) | null;
  onerror: ((event: unknown) => void) | null;
  onmessage: ((event: { data: unknown }) => void) | null;
}

/** Options of {@link listenNode}. */
export interface NodeListenerOptions {
  hostname: string;
  port: number;
  fetch: (req: Request, info: ServeInfo) => Response | Promise<Response>;
  /** Largest client message a WebSocket takes; a larger frame fails the connection (1009). */
  maxClientMessageBytes: number;
  /**
   * Milliseconds without any data from a WebSocket client before it is pinged and, without an
   * answer in as long again, dropped (what `Deno.upgradeWebSocket`'s `idleTimeout` did).
   */
  idleTimeoutMs: number;
}

/** A listening server. */
export interface NodeListener {
  /** The bound port (the real one when 0 was asked). */
  readonly port: number;
  /**
   * Stops accepting, lets requests in progress finish, closes idle connections and drops the
   * WebSockets still open (their owner closes them properly first).
   */
  close(): Promise<void>;
}

/** Milliseconds between a protocol error's close frame and dropping the connection. */
const ERROR_GRACE_MS = 100;

/** Error of {@link listenNode} when the address is taken. */
export class AddressInUseError extends Error {}

/** Starts listening; rejects when the address cannot be bound. */
export async function listenNode(opts: NodeListenerOptions): Promise<NodeListener> {
  const wss = new WebSocketServer({
    noServer: true,
    maxPayload: opts.maxClientMessageBytes,
    perMessageDeflate: false,
    clientTracking: true,
  });
  const sockets = new Map<ServerWebSocket, { lastData: number; pingedAt: number | null }>();
  const listener = getRequestListener(
    (req, env) => {
      const { incoming, outgoing } = env as {
        incoming: http.IncomingMessage;
        outgoing: http.ServerResponse;
      };
      return opts.fetch(req, serveInfo(incoming.socket, () => completion(outgoing)));
    },
    { overrideGlobalObjects: false },
  );
  const server = http.createServer(listener);
  server.keepAliveTimeout = 5000;
  server.on("upgrade", (incoming: http.IncomingMessage, raw: Duplex, head: Buffer) => {
    raw.on("error", () => raw.destroy());
    let upgraded = false;
    const info = serveInfo(raw as Socket, () => completion(raw));
    info.upgradeWebSocket = () => {
      if (upgraded) throw new Error("WebSocket upgrade requested twice");
      let socket: ServerWebSocket | null = null;
      wss.handleUpgrade(incoming, raw, head, (ws: ServerWebSocket) => socket = ws);
      if (socket === null) throw new Error("WebSocket handshake failed");
      upgraded = true;
      track(socket, raw);
      return socket;
    };
    handleUpgrade(opts.fetch, incoming, raw, info, () => upgraded);
  });

  /** Watches a socket's liveness; drops it on a protocol error. */
  function track(ws: ServerWebSocket, raw: Duplex): void {
    const state = { lastData: performance.now(), pingedAt: null as number | null };
    sockets.set(ws, state);
    const seen = () => {
      state.lastData = performance.now();
      state.pingedAt = null;
    };
    ws.on("message", seen);
    ws.on("ping", seen);
    ws.on("pong", seen);
    // A protocol error (a message over the maximum: ws has written the close frame, 1009, and
    // discards what follows): stop reading, give the close frame a moment to leave, then drop the
    // connection whatever the client does (it may go on sending the payload it announced).
    ws.on("error", () => {
      setImmediate(() => raw.pause()); // after ws's own resume (a nextTick)
      setTimeout(() => ws.terminate(), ERROR_GRACE_MS);
    });
    ws.on("close", () => sockets.delete(ws));
  }

  const idleTimer = setInterval(() => {
    const now = performance.now();
    for (const [ws, state] of sockets) {
      if (state.pingedAt !== null) {
        if (now - state.pingedAt >= opts.idleTimeoutMs) ws.terminate();
      } else if (now - state.lastData >= opts.idleTimeoutMs) {
        state.pingedAt = now;
        try {
          ws.ping();
        } catch {
          // Closing.
        }
      }
    }
  }, Math.max(10, Math.min(1000, opts.idleTimeoutMs / 4)));
  Deno.unrefTimer(idleTimer as unknown as number);

  await new Promise<void>((resolve, reject) => {
    const failed = (err: Error & { code?: string }) => {
      reject(err.code === "EADDRINUSE" ? new AddressInUseError(err.message, { cause: err }) : err);
    };
    server.once("error", failed);
    server.listen(opts.port, opts.hostname, () => {
      server.off("error", failed);
      resolve();
    });
  }).catch((err) => {
    clearInterval(idleTimer);
    throw err;
  });
  server.on("error", () => {}); // after listening: per-connection errors are the sockets'
  const port = (server.address() as { port: number }).port;

  let closing: Promise<void> | null = null;
  return {
    port,
    close() {
      closing ??= (async () => {
        clearInterval(idleTimer);
        const closed = new Promise<void>((resolve) => server.close(() => resolve()));
        for (const ws of sockets.keys()) ws.terminate();
        server.closeIdleConnections();
        // Requests in progress finish; their connections close once idle.
        const sweep = setInterval(() => server.closeIdleConnections(), 50);
        await closed;
        clearInterval(sweep);
      })();
      return closing;
    },
  };
}

/** The handler's info for a request on `socket`. */
function serveInfo(socket: Socket, completed: () => Promise<void>): ServeInfo {
  let done: Promise<void> | null = null;
  return {
    remoteAddr: {
      transport: "tcp",
      hostname: stripMapped(socket.remoteAddress ?? "unknown"),
      port: socket.remotePort ?? 0,
    },
    get completed() {
      return done ??= completed();
    },
  };
}

/** `::ffff:1.2.3.4` (an IPv4 client on a dual-stack socket) as `1.2.3.4`, as Deno reports it. */
function stripMapped(address: string): string {
  return address.startsWith("::ffff:") && address.includes(".") ? address.slice(7) : address;
}

function completion(
  stream: { once(event: "close", fn: () => void): unknown; destroyed?: boolean },
) {
  return new Promise<void>((resolve) => {
    if (stream.destroyed) resolve();
    else stream.once("close", () => resolve());
  });
}

/** An upgrade request through the handler; a refusal is written to the raw socket. */
async function handleUpgrade(
  fetch: NodeListenerOptions["fetch"],
  incoming: http.IncomingMessage,
  raw: Duplex,
  info: ServeInfo,
  upgraded: () => boolean,
): Promise<void> {
  let res: Response;
  try {
    const headers = new Headers();
    for (let i = 0; i < incoming.rawHeaders.length; i += 2) {
      headers.append(incoming.rawHeaders[i], incoming.rawHeaders[i + 1]);
    }
    const host = headers.get("host") ?? "localhost";
    res = await fetch(
      new Request(`http://${host}${incoming.url ?? "/"}`, { method: incoming.method, headers }),
      info,
    );
  } catch {
    res = new Response("Internal Server Error", { status: 500 });
  }
  if (upgraded()) return;
  const body = new Uint8Array(await res.arrayBuffer().catch(() => new ArrayBuffer(0)));
  const lines = [`HTTP/1.1 ${res.status} ${http.STATUS_CODES[res.status] ?? ""}`];
  res.headers.forEach((value, name) => {
    if (name !== "content-length" && name !== "transfer-encoding" && name !== "connection") {
      lines.push(`${name}: ${value}`);
    }
  });
  lines.push(`content-length: ${body.length}`, "connection: close", "", "");
  if (raw.destroyed) return;
  raw.write(new TextEncoder().encode(lines.join("\r\n")));
  raw.end(body);
}
