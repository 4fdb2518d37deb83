/**
 * A small HTTP/1.1 client for the push to the index (`push.ts`): POSTs to one plain-http origin
 * over keep-alive connections, one request at a time per connection. `fetch` spends about 100 µs
 * of the event loop's CPU per request on the 2-core bench machine (Request, Headers and stream
 * objects, the client pool); this client writes the request bytes and reads the response itself,
 * about half of that, and the push runs for every commit.
 *
 * Responses: a status line `HTTP/1.x NNN`, headers, then a body framed by `Content-Length`, by
 * `Transfer-Encoding: chunked`, or (otherwise) by the end of the connection; interim 1xx responses
 * are skipped. Only the status is returned; the body is read and dropped, at most
 * `maxResponseBytes`. A connection is kept for the next request unless the response says
 * `Connection: close`, is HTTP/1.0, or ended with the connection. A request on a kept connection
 * that the server had meanwhile closed (no response byte received) is sent once more on a new one.
 *
 * @module
 */

/** Longest response head (status line and headers) accepted. */
export const MAX_RESPONSE_HEAD_BYTES = 16 * 1024;
const DEFAULT_MAX_RESPONSE_BYTES = 1024 * 1024;

const encoder = new TextEncoder();
const latin1 = new TextDecoder("latin1");

/** The response was not valid HTTP/1.1 or broke a limit. */
export class Http1Error extends Error {
  override readonly name = "Http1Error";
}

/** POSTs to one `http:` origin over keep-alive connections. */
export class Http1Client {
  readonly #hostname: string;
  readonly #port: number;
  readonly #host: string;
  readonly #maxBody: number;
  readonly #idle: Deno.TcpConn[] = [];
  readonly #open = new Set<Deno.Conn>();
  #closed = false;

  constructor(origin: string, opts: { maxResponseBytes?: number } = {}) {
    const url = new URL(origin);
    if (url.protocol !== "http:") throw new TypeError(`Not an http: origin: ${origin}`);
    this.#hostname = url.hostname.replace(/^\[(.*)\]$/, "$1");
    this.#port = url.port === "" ? 80 : Number(url.port);
    this.#host = url.host;
    this.#maxBody = opts.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES;
  }

  /** Connections open now (idle or in use); for tests. */
  get openConnections(): number {
    return this.#open.size;
  }

  /**
   * POSTs `body` to `path` with `headers` (lower-case names; `host` and `content-length` are
   * added) and resolves with the response status once the whole response is read. Aborting
   * `signal` closes the connection and rejects with the signal's reason.
   *
   * @throws {Http1Error} for a malformed or oversized response; a network error as thrown.
   */
  async post(
    path: string,
    headers: Record<string, string>,
    body: Uint8Array,
    signal?: AbortSignal,
  ): Promise<number> {
    let head = `POST ${path} HTTP/1.1\r\nhost: ${this.#host}\r\n`;
    for (const name in headers) head += `${name}: ${headers[name]}\r\n`;
    head += `content-length: ${body.length}\r\n\r\n`;
    const headBytes = encoder.encode(head);
    const request = new Uint8Array(headBytes.length + body.length);
    request.set(headBytes);
    request.set(body, headBytes.length);
    for (let attempt = 0;; attempt++) {
      if (this.#closed) throw new Http1Error("Client is closed");
      signal?.throwIfAborted();
      const reused = this.#idle.pop();
      const conn = reused ?? await this.#connect(signal);
      const onAbort = () => this.#drop(conn);
      signal?.addEventListener("abort", onAbort, { once: true });
      const reader = new ResponseReader(conn, this.#maxBody);
      try {
        for (let off = 0; off < request.length;) off += await conn.write(request.subarray(off));
        const { status, reusable } = await reader.read();
        if (reusable && !this.#closed) this.#idle.push(conn);
        else this.#drop(conn);
        return status;
      } catch (err) {
        this.#drop(conn);
        if (signal?.aborted) throw signal.reason;
        // A kept connection the server closed while idle: nothing of ours was answered.
        if (reused !== undefined && reader.received === 0 && attempt === 0) continue;
        throw err;
      } finally {
        signal?.removeEventListener("abort", onAbort);
      }
    }
  }

  /** Closes every connection; later requests fail. */
  close(): void {
    this.#closed = true;
    for (const conn of [...this.#open]) this.#drop(conn);
    this.#idle.length = 0;
  }

  async #connect(signal?: AbortSignal): Promise<Deno.TcpConn> {
    const connecting = Deno.connect({ hostname: this.#hostname, port: this.#port });
    let conn: Deno.TcpConn;
    if (signal === undefined) {
      conn = await connecting;
    } else {
      let onAbort: () => void = () => {};
      const aborted = new Promise<never>((_, reject) => {
        onAbort = () => reject(signal.reason);
        signal.addEventListener("abort", onAbort, { once: true });
      });
      try {
        conn = await Promise.race([connecting, aborted]);
      } catch (err) {
        connecting.then((c) => c.close(), () => {});
        throw err;
      } finally {
        signal.removeEventListener("abort", onAbort);
      }
    }
    if (this.#closed) {
      conn.close();
      throw new Http1Error("Client is closed");
    }
    conn.setNoDelay(true);
    this.#open.add(conn);
    return conn;
  }

  #drop(conn: Deno.Conn): void {
    if (!this.#open.delete(conn)) return;
    const idle = this.#idle.indexOf(conn as Deno.TcpConn);
    if (idle >= 0) this.#idle.splice(idle, 1);
    try {
      conn.close();
    } catch {
      // already closed
    }
  }
}

/** Reads one response from a connection (see the module comment for the framing rules). */
class ResponseReader {
  readonly #conn: Deno.Conn;
  readonly #maxBody: number;
  #buf = new Uint8Array(4096);
  /** Bytes in `#buf` from `#pos` to `#end` are read and not yet parsed. */
  #pos = 0;
  #end = 0;
  #eof = false;
  /** Response bytes received so far. */
  received = 0;

  constructor(conn: Deno.Conn, maxBody: number) {
    this.#conn = conn;
    this.#maxBody = maxBody;
  }

  async read(): Promise<{ status: number; reusable: boolean }> {
    for (;;) {
      const head = await this.#readHead();
      const { status, version } = parseStatusLine(head[0]);
      if (status >= 100 && status < 200) {
        if (status === 101) throw new Http1Error("Unexpected 101 Switching Protocols");
        continue; // interim response: the final one follows
      }
      let length = -1;
      let chunked = false;
      let otherCoding = false;
      let close = version === "1.0";
      for (let i = 1; i < head.length; i++) {
        const colon = head[i].indexOf(":");
        if (colon <= 0) throw new Http1Error(`Malformed header line: ${clip(head[i])}`);
        const name = head[i].slice(0, colon).trim().toLowerCase();
        const value = head[i].slice(colon + 1).trim().toLowerCase();
        if (name === "content-length") {
          if (!/^\d{1,15}$/.test(value) || (length >= 0 && Number(value) !== length)) {
            throw new Http1Error(`Invalid Content-Length: ${clip(value)}`);
          }
          length = Number(value);
        } else if (name === "transfer-encoding") {
          const codings = value.split(",").map((c) => c.trim());
          chunked = codings.at(-1) === "chunked";
          otherCoding = !chunked;
        } else if (name === "connection") {
          const tokens = value.split(",").map((t) => t.trim());
          if (tokens.includes("close")) close = true;
          else if (version === "1.0" && tokens.includes("keep-alive")) close = false;
        }
      }
      if (status === 204 || status === 304) return { status, reusable: !close };
      if (chunked) await this.#skipChunked();
      else if (length >= 0 && !otherCoding) await this.#skip(length);
      else {
        await this.#skipToEnd();
        return { status, reusable: false };
      }
      // Bytes past the response were not asked for: do not reuse the connection.
      return { status, reusable: !close && this.#pos === this.#end };
    }
  }

  /** The head's lines (status line first), consumed with its blank line. */
  async #readHead(): Promise<string[]> {
    // Bytes after `#pos` already searched (offsets from `#pos` survive `#fill` moving them).
    for (let scanned = 0;;) {
      for (let i = this.#pos + Math.max(scanned, 3); i < this.#end; i++) {
        const b = this.#buf;
        if (b[i] === 10 && b[i - 1] === 13 && b[i - 2] === 10 && b[i - 3] === 13) {
          if (i - 3 - this.#pos > MAX_RESPONSE_HEAD_BYTES) break;
          const text = latin1.decode(b.subarray(this.#pos, i - 3));
          this.#pos = i + 1;
          return text.split("\r\n");
        }
      }
      if (this.#end - this.#pos > MAX_RESPONSE_HEAD_BYTES) {
        throw new Http1Error(`Response head is over ${MAX_RESPONSE_HEAD_BYTES} bytes`);
      }
      scanned = this.#end - this.#pos;
      if (!await this.#fill()) throw new Http1Error("Connection closed before the response");
    }
  }

  /** One CRLF-terminated line (chunk sizes and trailers), without the CRLF. */
  async #readLine(): Promise<string> {
    for (let scanned = 0;;) {
      for (let i = this.#pos + Math.max(scanned, 1); i < this.#end; i++) {
        if (this.#buf[i] === 10 && this.#buf[i - 1] === 13) {
          const line = latin1.decode(this.#buf.subarray(this.#pos, i - 1));
          this.#pos = i + 1;
          return line;
        }
      }
      if (this.#end - this.#pos > MAX_RESPONSE_HEAD_BYTES) {
        throw new Http1Error("Chunk line is too long");
      }
      scanned = this.#end - this.#pos;
      if (!await this.#fill()) throw new Http1Error("Connection closed inside a chunked body");
    }
  }

  async #skipChunked(): Promise<void> {
    let total = 0;
    for (;;) {
      const line = await this.#readLine();
      const m = /^([0-9a-fA-F]{1,8})(?:\s*;.*)?$/.exec(line);
      if (!m) throw new Http1Error(`Invalid chunk size line: ${clip(line)}`);
      const size = parseInt(m[1], 16);
      if (size === 0) break;
      total += size;
      if (total > this.#maxBody) {
        throw new Http1Error(`Response body is over ${this.#maxBody} bytes`);
      }
      await this.#skip(size);
      if (await this.#readLine() !== "") throw new Http1Error("Chunk is not followed by CRLF");
    }
    while (await this.#readLine() !== ""); // trailers
  }

  async #skip(n: number): Promise<void> {
    if (n > this.#maxBody) throw new Http1Error(`Response body is over ${this.#maxBody} bytes`);
    while (this.#end - this.#pos < n) {
      n -= this.#end - this.#pos;
      this.#pos = this.#end;
      if (!await this.#fill()) throw new Http1Error("Connection closed inside the body");
    }
    this.#pos += n;
  }

  async #skipToEnd(): Promise<void> {
    let total = this.#end - this.#pos;
    this.#pos = this.#end;
    while (await this.#fill()) {
      total += this.#end - this.#pos;
      this.#pos = this.#end;
      if (total > this.#maxBody) {
        throw new Http1Error(`Response body is over ${this.#maxBody} bytes`);
      }
    }
  }

  /** Reads more bytes; false at the end of the connection. */
  async #fill(): Promise<boolean> {
    if (this.#eof) return false;
    if (this.#pos === this.#end) {
      this.#pos = this.#end = 0;
    } else if (this.#end === this.#buf.length) {
      // Full: move the unread bytes to the front, into a buffer twice as large when they fill
      // more than half of it (a head is bounded, so the buffer is too).
      const unread = this.#end - this.#pos;
      if (unread * 2 <= this.#buf.length) {
        this.#buf.copyWithin(0, this.#pos, this.#end);
      } else {
        const next = new Uint8Array(this.#buf.length * 2);
        next.set(this.#buf.subarray(this.#pos, this.#end));
        this.#buf = next;
      }
      this.#pos = 0;
      this.#end = unread;
    }
    const n = await this.#conn.read(this.#buf.subarray(this.#end));
    if (n === null) {
      this.#eof = true;
      return false;
    }
    this.#end += n;
    this.received += n;
    return true;
  }
}

function parseStatusLine(line: string): { status: number; version: "1.0" | "1.1" } {
  const m = /^HTTP\/1\.([01]) (\d{3})(?: |$)/.exec(line);
  if (!m) throw new Http1Error(`Malformed status line: ${clip(line)}`);
  return { status: Number(m[2]), version: m[1] === "0" ? "1.0" : "1.1" };
}

function clip(s: string): string {
  return JSON.stringify(s.length > 80 ? s.slice(0, 80) + "..." : s);
}
