// subscribeRepos takes no client messages (issue 36 item 9): a client message larger than the
// small maximum is refused as its frame header arrives, before its payload is read (the host must
// not buffer megabytes per connection), and a small one keeps the old treatment (ignored within the
// budget of stream.ts). Raw TCP clients, so that a frame header can be sent without its payload.
//
// The first two are ignored: they pass only with the account host on node:http + ws (0c4e4a2,
// reverted: on the 2-core machine that listener raised createRecord p99 at 1,000/s from 8.6-15.9
// ms to 30-48 ms against the 25 ms budget; docs/performance.md). Deno.serve reads a client message
// whole, up to 64 MiB, before the host sees it, and has no setting to bound that.
const NEEDS_BOUNDED_LISTENER = true;

import assert from "node:assert/strict";
import { signUp, startTestServer, subscribeUrl, writePosts } from "../_test_helpers.ts";
import { readHeadSeq } from "./event_log.ts";
import { MAX_CLIENT_MESSAGE_BYTES } from "./stream.ts";

/** What the server did after the client's last write. */
interface Outcome {
  /** Close code of the server's close frame, or null when the connection just ended. */
  closeCode: number | null;
  /** Binary or text messages received before the close. */
  messages: number;
  /** True when the connection ended (EOF or reset) within the wait. */
  ended: boolean;
  ms: number;
}

/** A raw WebSocket client: writes whatever bytes it is given, reads the server's frames. */
class RawClient {
  readonly #conn: Deno.TcpConn;
  #buf = new Uint8Array(0);

  private constructor(conn: Deno.TcpConn) {
    this.#conn = conn;
  }

  static async connect(baseUrl: string, cursor: number): Promise<RawClient> {
    const url = new URL(subscribeUrl(baseUrl, cursor));
    const conn = await Deno.connect({ hostname: url.hostname, port: Number(url.port) });
    const client = new RawClient(conn);
    await client.write(new TextEncoder().encode(
      `GET ${url.pathname}${url.search} HTTP/1.1\r\nHost: ${url.host}\r\n` +
        "Upgrade: websocket\r\nConnection: Upgrade\r\n" +
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    ));
    for (;;) {
      const text = new TextDecoder().decode(client.#buf);
      const at = text.indexOf("\r\n\r\n");
      if (at >= 0) {
        assert.match(text, /^HTTP\/1\.1 101/);
        client.#buf = client.#buf.slice(at + 4);
        return client;
      }
      const chunk = await client.#read(5000);
      if (chunk === null) throw new Error("Connection closed during the handshake");
    }
  }

  async write(bytes: Uint8Array): Promise<void> {
    let off = 0;
    while (off < bytes.length) off += await this.#conn.write(bytes.subarray(off));
  }

  /** Sends one masked binary frame of `payload` (its header only when `headerOnly`). */
  async sendBinary(length: number, opts: { headerOnly?: boolean } = {}): Promise<void> {
    const header = length < 126 ? 2 : length < 65536 ? 4 : 10;
    const out = new Uint8Array(header + 4 + (opts.headerOnly ? 0 : length));
    out[0] = 0x82;
    if (header === 2) out[1] = 0x80 | length;
    else if (header === 4) {
      out[1] = 0x80 | 126;
      new DataView(out.buffer).setUint16(2, length);
    } else {
      out[1] = 0x80 | 127;
      new DataView(out.buffer).setBigUint64(2, BigInt(length));
    }
    out.set([1, 2, 3, 4], header); // mask; the payload is zeros before masking
    for (let i = header + 4; i < out.length; i++) out[i] = [1, 2, 3, 4][(i - header - 4) % 4];
    await this.write(out);
  }

  /** Reads frames for up to `waitMs`: until a close frame or the end of the connection. */
  async outcome(waitMs: number): Promise<Outcome> {
    const start = performance.now();
    let messages = 0;
    for (;;) {
      const frame = this.#takeFrame();
      if (frame !== null) {
        if (frame.opcode === 0x8) {
          const code = frame.payload.length >= 2
            ? (frame.payload[0] << 8) | frame.payload[1]
            : 1005;
          return { closeCode: code, messages, ended: true, ms: performance.now() - start };
        }
        if (frame.opcode === 0x1 || frame.opcode === 0x2) messages++;
        continue;
      }
      const left = waitMs - (performance.now() - start);
      const chunk = left > 0 ? await this.#read(left) : "timeout";
      if (chunk === "timeout") {
        return { closeCode: null, messages, ended: false, ms: performance.now() - start };
      }
      if (chunk === null) {
        return { closeCode: null, messages, ended: true, ms: performance.now() - start };
      }
    }
  }

  close(): void {
    try {
      this.#conn.close();
    } catch {
      // Already closed.
    }
  }

  #takeFrame(): { opcode: number; payload: Uint8Array } | null {
    const b = this.#buf;
    if (b.length < 2) return null;
    let len = b[1] & 0x7f;
    let at = 2;
    if (len === 126) {
      if (b.length < 4) return null;
      len = (b[2] << 8) | b[3];
      at = 4;
    } else if (len === 127) {
      if (b.length < 10) return null;
      len = Number(new DataView(b.buffer, b.byteOffset + 2, 8).getBigUint64(0));
      at = 10;
    }
    if (b.length < at + len) return null;
    const frame = { opcode: b[0] & 0x0f, payload: b.slice(at, at + len) };
    this.#buf = b.slice(at + len);
    return frame;
  }

  /** One read: the bytes are appended; null at the end, "timeout" after `ms`. */
  async #read(ms: number): Promise<Uint8Array | null | "timeout"> {
    // A read that timed out stays pending: the next call waits for the same one.
    this.#inflight ??= (() => {
      const chunk = new Uint8Array(65536);
      return { chunk, read: this.#conn.read(chunk).catch(() => null) };
    })();
    const { chunk, read } = this.#inflight;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const result = await Promise.race([
      read,
      new Promise<"timeout">((resolve) => timer = setTimeout(() => resolve("timeout"), ms)),
    ]);
    clearTimeout(timer);
    if (result === "timeout") return "timeout";
    this.#inflight = null;
    if (result === null) return null;
    const next = new Uint8Array(this.#buf.length + result);
    next.set(this.#buf);
    next.set(chunk.subarray(0, result), this.#buf.length);
    this.#buf = next;
    return next;
  }

  #inflight: { chunk: Uint8Array; read: Promise<number | null> } | null = null;
}

Deno.test({
  name:
    "a client frame header announcing 60 MiB closes the subscribeRepos connection within a second, before any payload (issue 36 item 9)",
  ignore: NEEDS_BOUNDED_LISTENER,
}, async () => {
  await using s = await startTestServer();
  await signUp(s.url, "header.test");
  const head = await readHeadSeq(s.ctx.kv);
  const client = await RawClient.connect(s.url, head);
  try {
    await client.sendBinary(60 * 1024 * 1024, { headerOnly: true });
    const outcome = await client.outcome(3000);
    assert.ok(outcome.ended, "the host kept the connection open waiting for 60 MiB");
    assert.ok(outcome.ms < 1000, `closed after ${Math.round(outcome.ms)} ms`);
    assert.ok(outcome.closeCode === null || outcome.closeCode === 1009, `${outcome.closeCode}`);
  } finally {
    client.close();
  }
  const hub = s.ctx.stream!.hub;
  const deadline = Date.now() + 2000;
  while (hub.connectionCount > 0 && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 10));
  }
  assert.equal(hub.connectionCount, 0);
});

Deno.test({
  name:
    "a client message one byte over the maximum is refused with 1009 (or the connection dropped) (issue 36 item 9)",
  ignore: NEEDS_BOUNDED_LISTENER,
}, async () => {
  await using s = await startTestServer();
  await signUp(s.url, "over.test");
  const head = await readHeadSeq(s.ctx.kv);
  const client = await RawClient.connect(s.url, head);
  try {
    await client.sendBinary(MAX_CLIENT_MESSAGE_BYTES + 1);
    const outcome = await client.outcome(3000);
    assert.ok(outcome.ended, "the connection stayed open");
    assert.ok(outcome.closeCode === null || outcome.closeCode === 1009, `${outcome.closeCode}`);
  } finally {
    client.close();
  }
});

Deno.test("a 10-byte client message is ignored: the subscriber stays open and gets the next commits (issue 36 item 9)", async () => {
  await using s = await startTestServer();
  const w = await signUp(s.url, "small.test");
  const head = await readHeadSeq(s.ctx.kv);
  const client = await RawClient.connect(s.url, head);
  try {
    await client.sendBinary(10);
    await client.sendBinary(MAX_CLIENT_MESSAGE_BYTES); // the largest one ignored
    await writePosts(s.url, [w], 2);
    let received = 0;
    const deadline = performance.now() + 10_000;
    while (received < 2 && performance.now() < deadline) {
      const outcome = await client.outcome(200);
      assert.equal(outcome.ended, false, `closed with ${outcome.closeCode}`);
      received += outcome.messages;
    }
    assert.equal(received, 2);
  } finally {
    client.close();
  }
});
