/**
 * A Jetstream stand-in for tests and benchmarks: a real WebSocket server on port 0 holding a
 * fixed history of events. Each connection replays the events whose `time_us` is at or after its
 * `cursor` (all of them without one), as fast as the socket takes them (sending while the
 * socket's `bufferedAmount` is under a high-water mark), then stays open and silent, as
 * Jetstream does once a subscriber has caught up with a quiet network.
 *
 * Also {@link toJetstreamEvent}, which renders an index op as the Jetstream event carrying it.
 *
 * @module
 */

import type { IndexOp } from "../../../shared/ops.ts";
import { serveOnPort0, type TestServer, waitFor } from "../../../runtime/_test_helpers.ts";

/** Bytes queued on a socket above which the stand-in waits before sending more. */
const HIGH_WATER_BYTES = 1024 * 1024;

/** A Jetstream event: what the stand-in needs of it is its `time_us`. */
export interface StandInEvent {
  readonly time_us: number;
  readonly [field: string]: unknown;
}

/** A running stand-in (see the module comment). */
export interface JetstreamStandIn extends AsyncDisposable {
  /** WebSocket URL of the `/subscribe` endpoint. */
  readonly url: string;
  /** Query of every connection made so far, in order (`cursor`, `wantedCollections`). */
  readonly requests: URLSearchParams[];
  /** Events sent so far over every connection. */
  sent(): number;
  /** Connections currently open. */
  openCount(): number;
  /** Closes every open connection from the server side (the server keeps accepting). */
  dropClients(): void;
  /** Waits until `n` connections (in all, open or not) were made. */
  waitForRequests(n: number, opts?: { timeoutMs?: number }): Promise<void>;
  close(): Promise<void>;
}

/**
 * Starts a stand-in serving `events` (sorted by `time_us`; serialised once, here, so a
 * benchmark's clock does not count it).
 */
export function startJetstreamStandIn(events: readonly StandInEvent[]): JetstreamStandIn {
  const times = Float64Array.from(events, (e) => e.time_us);
  for (let i = 1; i < times.length; i++) {
    if (times[i] < times[i - 1]) throw new RangeError(`Events not sorted by time_us at ${i}`);
  }
  const texts = events.map((e) => JSON.stringify(e));
  const requests: URLSearchParams[] = [];
  const sockets = new Set<WebSocket>();
  const replays = new Set<Promise<void>>();
  let sent = 0;
  let closing = false;

  const replay = async (socket: WebSocket, from: number) => {
    for (let i = from; i < texts.length;) {
      if (closing || socket.readyState !== WebSocket.OPEN) return;
      if (socket.bufferedAmount > HIGH_WATER_BYTES) {
        await new Promise((r) => setTimeout(r, 1));
        continue;
      }
      socket.send(texts[i++]);
      sent++;
    }
  };

  const server: TestServer = serveOnPort0((req) => {
    const url = new URL(req.url);
    if (url.pathname !== "/subscribe" || req.headers.get("upgrade") !== "websocket") {
      return new Response("not found", { status: 404 });
    }
    requests.push(url.searchParams);
    const cursor = url.searchParams.get("cursor");
    const from = cursor === null ? 0 : firstAtOrAfter(times, Number(cursor));
    const { socket, response } = Deno.upgradeWebSocket(req);
    socket.onopen = () => {
      sockets.add(socket);
      const running = replay(socket, from).catch(() => {/* the client went away */});
      replays.add(running);
      running.finally(() => replays.delete(running));
    };
    socket.onclose = () => sockets.delete(socket);
    socket.onerror = () => sockets.delete(socket);
    return response;
  });

  const dropClients = () => {
    for (const s of sockets) {
      try {
        s.close(1000);
      } catch { /* already closing */ }
    }
  };
  const close = async () => {
    closing = true;
    await Promise.all(replays);
    dropClients();
    await waitFor(() => sockets.size === 0, { timeoutMs: 2000 }).catch(() => {});
    await server.close();
  };
  return {
    url: `ws://127.0.0.1:${server.port}/subscribe`,
    requests,
    sent: () => sent,
    openCount: () => sockets.size,
    dropClients,
    waitForRequests: (n, opts = {}) =>
      waitFor(() => requests.length >= n, { ...opts, message: `${n} stand-in connections` })
        .then(() => {}),
    close,
    [Symbol.asyncDispose]: close,
  };
}

/** Index of the first time at or after `cursor` (binary search over sorted `times`). */
function firstAtOrAfter(times: Float64Array, cursor: number): number {
  let lo = 0;
  let hi = times.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (times[mid] < cursor) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * The Jetstream event carrying `op` at `timeUs`: a `commit` event (with `rev`) for a record op,
 * an `identity` event for a handle op, an `account` event for an account or account status op.
 */
export function toJetstreamEvent(op: IndexOp, timeUs: number, rev: string): StandInEvent {
  switch (op.kind) {
    case "record": {
      const commit: Record<string, unknown> = {
        rev,
        operation: op.action,
        collection: op.collection,
        rkey: op.rkey,
      };
      if (op.record !== null) {
        commit.record = op.record;
        commit.cid = op.cid;
      }
      return { did: op.did, time_us: timeUs, kind: "commit", commit };
    }
    case "handle":
      return {
        did: op.did,
        time_us: timeUs,
        kind: "identity",
        identity: { did: op.did, handle: op.handle, seq: timeUs, time: new Date(0).toISOString() },
      };
    case "account":
      return {
        did: op.did,
        time_us: timeUs,
        kind: "account",
        account: { did: op.did, active: true, seq: timeUs, time: new Date(0).toISOString() },
      };
    case "account_status": {
      const account: Record<string, unknown> = {
        did: op.did,
        active: op.active,
        seq: timeUs,
        time: new Date(0).toISOString(),
      };
      if (op.status !== null) account.status = op.status;
      return { did: op.did, time_us: timeUs, kind: "account", account };
    }
  }
}
