/**
 * Worker of the fan-out benchmark: opens `count` subscribeRepos WebSocket clients (live, no
 * cursor) and records, per client, the first and last frames and the arrival time of every
 * frame. The clients speak the WebSocket protocol over plain TCP connections and parse frames
 * from whole reads (a `WebSocket` object costs an async op and an event per message, which at
 * 100,000 messages/s would measure the client, not the server). Frames of one connection
 * arrive in seq order without gaps, so only the first and last frames are decoded; the others
 * are checked for the `#commit` header bytes.
 *
 * Messages: in `{type: "open", url, count}` -> out `{type: "opened"}`; in `{type: "collect",
 * expected}` -> out `{type: "result", clients: [{firstSeq, lastSeq, times, bad}]}` once every
 * client has `expected` frames (or after 20 s), then the connections are closed.
 */

/// <reference lib="deno.worker" />

import { decodeFrame } from "../../shared/frame.ts";
import { COMMIT_FRAME_HEADER } from "../../pds/sequencer/event_log.ts";

interface Client {
  conn: Deno.TcpConn;
  first: Uint8Array | null;
  last: Uint8Array | null;
  times: number[];
  bad: number;
  done: Promise<void>;
}

const clients: Client[] = [];
const now = () => performance.timeOrigin + performance.now();

function isCommitFrame(bytes: Uint8Array, at: number): boolean {
  for (let i = 0; i < COMMIT_FRAME_HEADER.length; i++) {
    if (bytes[at + i] !== COMMIT_FRAME_HEADER[i]) return false;
  }
  return true;
}

async function open(url: URL): Promise<Client> {
  const conn = await Deno.connect({ hostname: url.hostname, port: Number(url.port) });
  await conn.write(new TextEncoder().encode(
    `GET ${url.pathname}${url.search} HTTP/1.1\r\nHost: ${url.host}\r\nUpgrade: websocket\r\n` +
      `Connection: Upgrade\r\nSec-WebSocket-Key: ZmFub3V0LWJlbmNoLWtleQ==\r\n` +
      `Sec-WebSocket-Version: 13\r\n\r\n`,
  ));
  let buf = new Uint8Array(1 << 16);
  let end = 0;
  let start = -1;
  while (start < 0) {
    const n = await conn.read(buf.subarray(end));
    if (n === null) throw new Error("closed during the handshake");
    end += n;
    const text = new TextDecoder().decode(buf.subarray(0, end));
    const at = text.indexOf("\r\n\r\n");
    if (at >= 0) {
      if (!text.startsWith("HTTP/1.1 101")) throw new Error(text.split("\r\n")[0]);
      start = at + 4;
    }
  }
  const client: Client = { conn, first: null, last: null, times: [], bad: 0, done: null! };
  client.done = (async () => {
    let pos = start;
    for (;;) {
      // Parse every complete frame in the buffer.
      const t = now();
      for (;;) {
        if (end - pos < 2) break;
        let len = buf[pos + 1] & 0x7f;
        let header = 2;
        if (len === 126) {
          if (end - pos < 4) break;
          len = (buf[pos + 2] << 8) | buf[pos + 3];
          header = 4;
        } else if (len === 127) {
          if (end - pos < 10) break;
          len = Number(new DataView(buf.buffer, pos + 2, 8).getBigUint64(0));
          header = 10;
        }
        if (end - pos < header + len) break;
        const opcode = buf[pos] & 0x0f;
        const payload = pos + header;
        if (opcode === 0x2) {
          if (isCommitFrame(buf, payload)) {
            client.times.push(t);
            const bytes = buf.slice(payload, payload + len);
            if (client.first === null) client.first = bytes;
            client.last = bytes;
          } else {
            client.bad++;
          }
        } else if (opcode === 0x8) {
          return;
        }
        pos += header + len;
      }
      // Compact and grow as needed, then read more.
      if (pos > 0) {
        buf.copyWithin(0, pos, end);
        end -= pos;
        pos = 0;
      }
      if (buf.length - end < 16384) {
        const next = new Uint8Array(buf.length * 2);
        next.set(buf.subarray(0, end));
        buf = next;
      }
      let n: number | null;
      try {
        n = await conn.read(buf.subarray(end));
      } catch {
        return;
      }
      if (n === null) return;
      end += n;
    }
  })();
  return client;
}

self.onmessage = async (e: MessageEvent) => {
  const msg = e.data;
  if (msg.type === "open") {
    const url = new URL(msg.url);
    for (let i = 0; i < msg.count; i += 50) {
      const batch = Math.min(50, msg.count - i);
      clients.push(...await Promise.all(Array.from({ length: batch }, () => open(url))));
    }
    self.postMessage({ type: "opened" });
  } else if (msg.type === "collect") {
    const deadline = Date.now() + 20_000;
    while (clients.some((c) => c.times.length < msg.expected) && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 20));
    }
    const out = clients.map((c) => ({
      firstSeq: c.first ? decodeFrame(c.first).body.seq as number : null,
      lastSeq: c.last ? decodeFrame(c.last).body.seq as number : null,
      times: Float64Array.from(c.times),
      bad: c.bad,
    }));
    for (const c of clients) {
      try {
        c.conn.close();
      } catch {
        // Already closed.
      }
    }
    await Promise.all(clients.map((c) => c.done));
    self.postMessage({ type: "result", clients: out }, out.map((c) => c.times.buffer));
  }
};
