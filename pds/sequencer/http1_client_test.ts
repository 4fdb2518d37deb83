// The push's HTTP/1.1 client (spec 6.4; docs/behaviour.md 10.7 "Push ingest"), against a real
// Deno.serve server and against scripted raw TCP servers for the framings Deno.serve never sends.

import assert from "node:assert/strict";
import { serveOnPort0 } from "../../runtime/_test_helpers.ts";
import { Http1Client, Http1Error, MAX_RESPONSE_HEAD_BYTES } from "./http1_client.ts";

const enc = new TextEncoder();
const dec = new TextDecoder();

interface Script {
  /** Response pieces, written one by one (a string or raw bytes). */
  pieces: (string | Uint8Array)[];
  /** Close the connection after the response. */
  close?: boolean;
}

/**
 * A raw TCP server: reads each request (head and Content-Length body) and answers with
 * `respond(request, n)` (`n` counts requests across connections). Records requests and the
 * number of connections accepted.
 */
function rawServer(respond: (request: string, n: number) => Script | null) {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const requests: string[] = [];
  const conns = new Set<Deno.Conn>();
  let accepted = 0;
  const serveConn = async (conn: Deno.Conn) => {
    let buf = new Uint8Array(0);
    const more = async () => {
      const chunk = new Uint8Array(64 * 1024);
      const n = await conn.read(chunk);
      if (n === null) return false;
      const next = new Uint8Array(buf.length + n);
      next.set(buf);
      next.set(chunk.subarray(0, n), buf.length);
      buf = next;
      return true;
    };
    try {
      for (;;) {
        let end: number;
        while ((end = dec.decode(buf).indexOf("\r\n\r\n")) < 0) if (!await more()) return;
        const head = dec.decode(buf.subarray(0, end));
        const length = Number(/content-length: (\d+)/i.exec(head)?.[1] ?? 0);
        while (buf.length < end + 4 + length) if (!await more()) return;
        const request = dec.decode(buf.subarray(0, end + 4 + length));
        buf = buf.slice(end + 4 + length);
        requests.push(request);
        const script = respond(request, requests.length);
        if (script === null) continue; // never answer
        for (const piece of script.pieces) {
          const bytes = typeof piece === "string" ? enc.encode(piece) : piece;
          for (let off = 0; off < bytes.length;) off += await conn.write(bytes.subarray(off));
        }
        if (script.close) return;
      }
    } catch {
      // the client went away
    } finally {
      conns.delete(conn);
      try {
        conn.close();
      } catch {
        // closed already
      }
    }
  };
  const loop = (async () => {
    for await (const conn of listener) {
      accepted++;
      conns.add(conn);
      void serveConn(conn);
    }
  })();
  return {
    url: `http://127.0.0.1:${(listener.addr as Deno.NetAddr).port}`,
    requests,
    get accepted() {
      return accepted;
    },
    /** Closes the open connections (as a keep-alive timeout would). */
    dropConnections() {
      for (const c of conns) c.close();
      conns.clear();
    },
    async [Symbol.asyncDispose]() {
      listener.close();
      for (const c of conns) c.close();
      await loop.catch(() => {});
    },
  };
}

const ok = (body = "{}") => `HTTP/1.1 200 OK\r\ncontent-length: ${body.length}\r\n\r\n${body}`;
const bytesOf = (s: string) => [...enc.encode(s)].map((b) => new Uint8Array([b]));

Deno.test("POSTs reach a Deno.serve server with their headers and body, over one kept connection", async () => {
  const seen: { path: string; auth: string | null; type: string | null; body: string }[] = [];
  await using server = serveOnPort0(async (req) => {
    seen.push({
      path: new URL(req.url).pathname,
      auth: req.headers.get("authorization"),
      type: req.headers.get("content-type"),
      body: await req.text(),
    });
    return Response.json({ n: seen.length }, { status: seen.length === 3 ? 404 : 200 });
  });
  const client = new Http1Client(server.url);
  try {
    const statuses = [];
    for (let i = 0; i < 5; i++) {
      statuses.push(
        await client.post(
          "/internal/ingest-commit",
          { "content-type": "application/json", authorization: "Bearer s3cret" },
          enc.encode(JSON.stringify({ i, text: "héllo" })),
        ),
      );
    }
    assert.deepEqual(statuses, [200, 200, 404, 200, 200]);
    assert.equal(client.openConnections, 1);
    assert.equal(seen.length, 5);
    assert.deepEqual(seen[4], {
      path: "/internal/ingest-commit",
      auth: "Bearer s3cret",
      type: "application/json",
      body: JSON.stringify({ i: 4, text: "héllo" }),
    });
  } finally {
    client.close();
  }
});

Deno.test("chunked bodies with extensions and trailers, split into single bytes, keep the connection", async () => {
  await using server = rawServer(() => ({
    pieces: bytesOf(
      "HTTP/1.1 202 Accepted\r\ntransfer-encoding: chunked\r\n\r\n" +
        "4;ext=1\r\nabcd\r\n1A\r\n" + "x".repeat(26) + "\r\n0\r\nx-trailer: t\r\n\r\n",
    ),
  }));
  const client = new Http1Client(server.url);
  try {
    assert.equal(await client.post("/a", {}, enc.encode("one")), 202);
    assert.equal(await client.post("/a", {}, enc.encode("two")), 202);
    assert.equal(server.accepted, 1);
    assert.equal(client.openConnections, 1);
    assert.match(server.requests[1], /^POST \/a HTTP\/1\.1\r\nhost: 127\.0\.0\.1:\d+\r\n/);
    assert.match(server.requests[1], /content-length: 3\r\n\r\ntwo$/);
  } finally {
    client.close();
  }
});

Deno.test("interim 100 responses are skipped; close, HTTP/1.0 and close-delimited bodies end the connection", async () => {
  await using server = rawServer((_, n) => {
    switch (n) {
      case 1:
        return {
          pieces: ["HTTP/1.1 100 Continue\r\n\r\n", "HTTP/1.1 201 Created\r\n", ok().slice(17)],
        };
      case 2:
        return { pieces: ["HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\n{}"] };
      case 3:
        return { pieces: ["HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\n{}"] };
      default:
        return { pieces: ["HTTP/1.1 500 Oops\r\n\r\nno length, ended by close"], close: true };
    }
  });
  const client = new Http1Client(server.url);
  try {
    assert.equal(await client.post("/", {}, new Uint8Array()), 201);
    assert.equal(client.openConnections, 1);
    assert.equal(await client.post("/", {}, new Uint8Array()), 200);
    assert.equal(client.openConnections, 0);
    assert.equal(await client.post("/", {}, new Uint8Array()), 200);
    assert.equal(client.openConnections, 0);
    assert.equal(await client.post("/", {}, new Uint8Array()), 500);
    assert.equal(client.openConnections, 0);
    assert.equal(server.accepted, 3);
  } finally {
    client.close();
  }
});

Deno.test("malformed and oversized responses fail with Http1Error and drop the connection", async () => {
  const bad: Record<number, string> = {
    1: "HTTP/2 200 OK\r\n\r\n",
    2: `HTTP/1.1 200 OK\r\nx-big: ${"a".repeat(MAX_RESPONSE_HEAD_BYTES + 10)}\r\n\r\n`,
    3: "HTTP/1.1 200 OK\r\ncontent-length: 5000\r\n\r\n" + "z".repeat(5000),
    4: "HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\n{}",
    5: "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
    6: "HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort",
  };
  const messages: Record<number, RegExp> = {
    1: /Malformed status line: "HTTP\/2 200 OK"/,
    2: /Response head is over 16384 bytes/,
    3: /Response body is over 1000 bytes/,
    4: /Invalid Content-Length: "3"/,
    5: /Invalid chunk size line: "zz"/,
    6: /Connection closed inside the body/,
  };
  await using server = rawServer((_, n) => ({ pieces: [bad[n]], close: n === 6 }));
  const client = new Http1Client(server.url, { maxResponseBytes: 1000 });
  try {
    for (let n = 1; n <= 6; n++) {
      await assert.rejects(
        client.post("/", {}, new Uint8Array()),
        (err: Error) => err instanceof Http1Error && messages[n].test(err.message),
        `response ${n}`,
      );
      assert.equal(client.openConnections, 0, `response ${n}`);
    }
  } finally {
    client.close();
  }
});

Deno.test("a kept connection the server closed is replaced once; an abort closes the connection", async () => {
  await using server = rawServer((request) => request.includes("hang") ? null : { pieces: [ok()] });
  const client = new Http1Client(server.url);
  try {
    assert.equal(await client.post("/", {}, enc.encode("first")), 200);
    server.dropConnections();
    await new Promise((r) => setTimeout(r, 20));
    assert.equal(await client.post("/", {}, enc.encode("second")), 200);
    assert.equal(server.accepted, 2);
    assert.deepEqual(server.requests.map((r) => r.slice(-6)), ["\nfirst", "second"]);

    const abort = new AbortController();
    const pending = client.post("/", {}, enc.encode("hang"), abort.signal);
    setTimeout(() => abort.abort(new DOMException("Push timed out", "TimeoutError")), 50);
    await assert.rejects(pending, (err: Error) => err.name === "TimeoutError");
    assert.equal(client.openConnections, 0);
  } finally {
    client.close();
  }
});

Deno.test("a refused connection rejects, and a closed client refuses requests", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  const client = new Http1Client(`http://127.0.0.1:${port}`);
  await assert.rejects(client.post("/", {}, new Uint8Array()), Deno.errors.ConnectionRefused);
  client.close();
  await assert.rejects(client.post("/", {}, new Uint8Array()), /Client is closed/);
  assert.throws(() => new Http1Client("https://example.test"), /Not an http: origin/);
});
