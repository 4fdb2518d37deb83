/**
 * Test helpers for the account host: a context on a real KV file in a temp dir (for
 * `app.request()` tests) and a real server on port 0, everything closed on dispose; for the
 * commit stream, a WebSocket subscriber that decodes every frame, a raw TCP WebSocket client that
 * can stop reading (so the server's `bufferedAmount` grows), concurrent record writers over HTTP
 * and an account host in its own process.
 *
 * @module
 */

import { type CommitSigner, commitSigner } from "./repo/signer.ts";
import type { Hono } from "hono";
import { decodeFrame, type Frame } from "../shared/frame.ts";
import { COLLECTION_POST, EMBED_EXTERNAL } from "../shared/nsid.ts";
import { captureLogger, makeTempDir, waitFor } from "../runtime/_test_helpers.ts";
import { createPdsApp } from "./app.ts";
import { loadPdsConfig, type RawEnv } from "./config.ts";
import type { PdsContext, PdsEnv, PdsHooks } from "./context.ts";
import { createPdsContext, type RunningPds, startPds } from "./server.ts";
import { BlockStore } from "./repo/block_store.ts";
import { LIBCRYPTO_PATHS } from "./repo/native_sign.ts";
import { Sequencer } from "./sequencer/sequencer.ts";

export {
  captureLogger,
  kvRowsInMainFile,
  ManualClock,
  offsetClock,
} from "../runtime/_test_helpers.ts";

/** The JWT secret of test servers. */
export const TEST_JWT_SECRET = "test-secret-0123456789abcdef";
/** Base environment of test servers. */
export const TEST_ENV: RawEnv = {
  PDS_JWT_SECRET: TEST_JWT_SECRET,
  PDS_PUBLIC_URL: "http://localhost:2583",
  APPVIEW_PUBLIC_URL: "http://localhost:3000",
  PDS_HANDLE_DOMAINS: ".test",
  // No index runs in these tests: never push commits to one.
  APPVIEW_INTERNAL_URL: "off",
};

/** An in-process account host on a temporary KV file. */
export interface TestApp extends AsyncDisposable {
  ctx: PdsContext;
  app: Hono<PdsEnv>;
  lines: string[];
  kvPath: string;
}

/** Creates a context and app on a fresh KV file (env merged over {@link TEST_ENV}). */
export async function createTestApp(
  opts: { env?: RawEnv; now?: () => number; hooks?: PdsHooks } = {},
): Promise<TestApp> {
  const dir = await makeTempDir("pds-test-");
  const kvPath = `${dir.path}/pds.kv`;
  const config = loadPdsConfig({ ...TEST_ENV, DATA_DIR: dir.path, ...opts.env });
  const kv = await Deno.openKv(kvPath);
  const { log, lines } = captureLogger("pds");
  const ctx = await createPdsContext({ config, kv, log, now: opts.now, hooks: opts.hooks });
  return {
    ctx,
    app: createPdsApp(ctx),
    lines,
    kvPath,
    async [Symbol.asyncDispose]() {
      kv.close();
      await dir[Symbol.asyncDispose]();
    },
  };
}

/** A real account host on 127.0.0.1 port 0 with a temporary data directory. */
export interface TestServer extends AsyncDisposable {
  pds: RunningPds;
  url: string;
  ctx: PdsContext;
  lines: string[];
  kvPath: string;
}

/**
 * Starts a real server. `PDS_PUBLIC_URL` is left unset unless given, so the public URL (and the
 * service DID) is the bound address.
 */
export async function startTestServer(
  opts: { env?: RawEnv; now?: () => number; hooks?: PdsHooks } = {},
): Promise<TestServer> {
  const dir = await makeTempDir("pds-test-");
  const kvPath = `${dir.path}/pds.kv`;
  const { log, lines } = captureLogger("pds");
  const env: RawEnv = {
    ...TEST_ENV,
    PDS_PUBLIC_URL: undefined,
    DATA_DIR: dir.path,
    PDS_KV_PATH: kvPath,
    ...opts.env,
  };
  const pds = await startPds({
    env,
    hostname: "127.0.0.1",
    port: 0,
    log,
    now: opts.now,
    hooks: opts.hooks,
  });
  return {
    pds,
    url: pds.url,
    ctx: pds.ctx,
    lines,
    kvPath,
    async [Symbol.asyncDispose]() {
      await pds.close();
      await dir[Symbol.asyncDispose]();
    },
  };
}

/** POSTs JSON to an XRPC procedure of an app or a server URL. */
export function xrpcPost(
  target: Hono<PdsEnv> | string,
  nsid: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<Response> {
  const init: RequestInit = {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  };
  return typeof target === "string"
    ? fetch(`${target}/xrpc/${nsid}`, init)
    : Promise.resolve(target.request(`/xrpc/${nsid}`, init));
}

/** GETs an XRPC query of an app or a server URL. */
export function xrpcGet(
  target: Hono<PdsEnv> | string,
  nsidAndQuery: string,
  headers: Record<string, string> = {},
): Promise<Response> {
  return typeof target === "string"
    ? fetch(`${target}/xrpc/${nsidAndQuery}`, { headers })
    : Promise.resolve(target.request(`/xrpc/${nsidAndQuery}`, { headers }));
}

/** Creates an account through the API and returns the session body. */
export async function signUp(
  target: Hono<PdsEnv> | string,
  handle: string,
  extra: Record<string, unknown> = {},
): Promise<{ did: string; handle: string; accessJwt: string; refreshJwt: string }> {
  const res = await xrpcPost(target, "com.atproto.server.createAccount", {
    handle,
    password: "correct horse battery",
    ...extra,
  });
  const body = await res.json();
  if (res.status !== 200) throw new Error(`createAccount ${res.status}: ${JSON.stringify(body)}`);
  return body;
}

/**
 * The parts of a store a `RepoService` shares with its readers and stream, built as
 * `createPdsContext` builds them: for tests of the repository on a bare KV handle.
 */
export function storeParts(
  kv: Deno.Kv,
): { kv: Deno.Kv; blocks: BlockStore; sequencer: Sequencer; signer: CommitSigner } {
  return { kv, blocks: new BlockStore(kv), sequencer: new Sequencer(kv), signer: commitSigner() };
}

// The commit stream.

/** The subscribeRepos URL of an account host base URL. */
export function subscribeUrl(baseUrl: string, cursor?: number): string {
  const ws = baseUrl.replace(/^http/, "ws");
  const q = cursor === undefined ? "" : `?cursor=${cursor}`;
  return `${ws}/xrpc/com.atproto.sync.subscribeRepos${q}`;
}

/** A subscriber that decodes every frame as it arrives. */
export class StreamClient {
  readonly frames: Frame[] = [];
  /** Raw bytes of each frame, same index as {@link frames}. */
  readonly raw: Uint8Array[] = [];
  readonly decodeErrors: string[] = [];
  /** Seqs of the `#commit` frames. */
  readonly commitSeqs: number[] = [];
  /** Seqs of every frame that has one (`#commit`, `#identity`, `#account`, `#sync`). */
  readonly seqs: number[] = [];
  closeCode: number | null = null;
  closeReason = "";
  readonly #socket: WebSocket;
  readonly #closed: Promise<void>;

  private constructor(socket: WebSocket, opened: () => void) {
    this.#socket = socket;
    socket.binaryType = "arraybuffer";
    let onClosed!: () => void;
    this.#closed = new Promise((resolve) => onClosed = resolve);
    socket.onopen = opened;
    socket.onmessage = (e) => {
      const bytes = new Uint8Array(e.data as ArrayBuffer);
      this.raw.push(bytes);
      try {
        const frame = decodeFrame(bytes);
        this.frames.push(frame);
        if (frame.header.t === "#commit") this.commitSeqs.push(frame.body.seq as number);
        if (typeof frame.body.seq === "number") this.seqs.push(frame.body.seq);
      } catch (err) {
        this.decodeErrors.push((err as Error).message);
      }
    };
    socket.onerror = () => {};
    socket.onclose = (e) => {
      this.closeCode = e.code;
      this.closeReason = e.reason;
      onClosed();
    };
  }

  /** Connects (with the upgrade request's extra `headers`) and waits until the socket is open. */
  static async connect(
    baseUrl: string,
    cursor?: number,
    headers?: Record<string, string>,
  ): Promise<StreamClient> {
    let opened!: () => void;
    const open = new Promise<void>((resolve) => opened = resolve);
    const socket = new WebSocket(subscribeUrl(baseUrl, cursor), headers ? { headers } : undefined);
    const client = new StreamClient(socket, opened);
    await Promise.race([open, client.#closed]);
    return client;
  }

  /** Highest commit seq received (0 when none). */
  get lastSeq(): number {
    return this.commitSeqs.at(-1) ?? 0;
  }

  /** Resolves when the server has closed the socket. */
  get closed(): Promise<void> {
    return this.#closed;
  }

  /** Waits until a commit with `seq` or higher has arrived. */
  async waitForSeq(seq: number, timeoutMs = 15_000): Promise<void> {
    await waitFor(() => this.lastSeq >= seq, {
      timeoutMs,
      message: `seq ${seq} (have ${this.lastSeq})`,
    });
  }

  /** Sends a client message (subscribeRepos expects none). */
  send(data: Uint8Array | string): void {
    this.#socket.send(data);
  }

  /** Closes the socket and waits for the close to complete. */
  async close(): Promise<void> {
    if (this.closeCode === null) this.#socket.close();
    await this.#closed;
  }
}

/** A WebSocket client over a raw TCP connection that only reads when asked to. */
export class RawWsClient {
  /** Close code and reason of the server's close frame, once received. */
  closeCode: number | null = null;
  closeReason = "";
  readonly #conn: Deno.TcpConn;
  #buf = new Uint8Array(1 << 16);
  #start = 0;
  #end = 0;

  private constructor(conn: Deno.TcpConn) {
    this.#conn = conn;
  }

  /** Connects and completes the opening handshake. */
  static async connect(baseUrl: string, cursor?: number): Promise<RawWsClient> {
    const url = new URL(subscribeUrl(baseUrl, cursor));
    const conn = await Deno.connect({ hostname: url.hostname, port: Number(url.port) });
    const client = new RawWsClient(conn);
    const key = btoa(String.fromCharCode(...crypto.getRandomValues(new Uint8Array(16))));
    await client.#write(new TextEncoder().encode(
      `GET ${url.pathname}${url.search} HTTP/1.1\r\nHost: ${url.host}\r\n` +
        `Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: ${key}\r\n` +
        `Sec-WebSocket-Version: 13\r\n\r\n`,
    ));
    for (;;) {
      const text = new TextDecoder().decode(client.#buf.subarray(client.#start, client.#end));
      const at = text.indexOf("\r\n\r\n");
      if (at >= 0) {
        if (!text.startsWith("HTTP/1.1 101")) {
          conn.close();
          throw new Error(`Upgrade refused: ${text.split("\r\n")[0]}`);
        }
        client.#start += new TextEncoder().encode(text.slice(0, at + 4)).length;
        return client;
      }
      if (!await client.#fill()) throw new Error("Connection closed during the handshake");
    }
  }

  /** Reads the next data message (answers pings); null when the connection closed. */
  async readMessage(): Promise<Uint8Array | null> {
    for (;;) {
      const frame = await this.#readFrame();
      if (frame === null) return null;
      const { opcode, payload } = frame;
      if (opcode === 0x8) {
        this.closeCode = payload.length >= 2 ? (payload[0] << 8) | payload[1] : 1005;
        this.closeReason = new TextDecoder().decode(payload.subarray(2));
        return null;
      }
      if (opcode === 0x9) {
        await this.#sendControl(0xa, payload);
        continue;
      }
      if (opcode === 0x1 || opcode === 0x2) return payload;
    }
  }

  close(): void {
    try {
      this.#conn.close();
    } catch {
      // Already closed.
    }
  }

  async #readFrame(): Promise<{ opcode: number; payload: Uint8Array } | null> {
    if (!await this.#need(2)) return null;
    const b0 = this.#buf[this.#start];
    const b1 = this.#buf[this.#start + 1];
    if ((b0 & 0x80) === 0) throw new Error("Fragmented frames are not supported");
    let len = b1 & 0x7f;
    let header = 2;
    if (len === 126) {
      if (!await this.#need(4)) return null;
      len = (this.#buf[this.#start + 2] << 8) | this.#buf[this.#start + 3];
      header = 4;
    } else if (len === 127) {
      if (!await this.#need(10)) return null;
      const view = new DataView(this.#buf.buffer, this.#start + 2, 8);
      len = Number(view.getBigUint64(0));
      header = 10;
    }
    if (!await this.#need(header + len)) return null;
    const payload = this.#buf.slice(this.#start + header, this.#start + header + len);
    this.#start += header + len;
    return { opcode: b0 & 0x0f, payload };
  }

  async #need(n: number): Promise<boolean> {
    while (this.#end - this.#start < n) {
      if (!await this.#fill(n)) return false;
    }
    return true;
  }

  async #fill(want = 0): Promise<boolean> {
    if (this.#start > 0 && this.#start === this.#end) this.#start = this.#end = 0;
    if (this.#buf.length - this.#end < Math.max(16384, want)) {
      const size = Math.max(this.#buf.length, (this.#end - this.#start + want) * 2, 1 << 16);
      const next = new Uint8Array(size);
      next.set(this.#buf.subarray(this.#start, this.#end));
      this.#end -= this.#start;
      this.#start = 0;
      this.#buf = next;
    }
    const n = await this.#conn.read(this.#buf.subarray(this.#end));
    if (n === null) return false;
    this.#end += n;
    return true;
  }

  async #sendControl(opcode: number, payload: Uint8Array): Promise<void> {
    const mask = crypto.getRandomValues(new Uint8Array(4));
    const out = new Uint8Array(6 + payload.length);
    out[0] = 0x80 | opcode;
    out[1] = 0x80 | payload.length;
    out.set(mask, 2);
    for (let i = 0; i < payload.length; i++) out[6 + i] = payload[i] ^ mask[i % 4];
    await this.#write(out);
  }

  async #write(bytes: Uint8Array): Promise<void> {
    let off = 0;
    while (off < bytes.length) off += await this.#conn.write(bytes.subarray(off));
  }
}

/** An account that writes records. */
export interface Writer {
  did: string;
  accessJwt: string;
}

/**
 * Writes `count` posts with an embed of `embedChars` characters each (about that many bytes of
 * frame), four at a time; each must be answered 200. For the stream's memory tests and benchmark.
 */
export async function writeLargePosts(
  baseUrl: string,
  w: Writer,
  count: number,
  embedChars = 19_000,
): Promise<void> {
  const description = "x".repeat(embedChars);
  for (let i = 0; i < count; i += 4) {
    await Promise.all(
      Array.from({ length: Math.min(4, count - i) }, async (_, j) => {
        const res = await xrpcPost(baseUrl, "com.atproto.repo.createRecord", {
          repo: w.did,
          collection: COLLECTION_POST,
          record: {
            $type: COLLECTION_POST,
            text: `large ${i + j}`,
            createdAt: new Date().toISOString(),
            embed: {
              $type: EMBED_EXTERNAL,
              external: { uri: `https://example.com/${i + j}`, title: "t", description },
            },
          },
        }, { authorization: `Bearer ${w.accessJwt}` });
        if (res.status !== 200) {
          throw new Error(`createRecord answered ${res.status}: ${await res.text()}`);
        }
      }),
    );
  }
}

/** A record written and acknowledged with 200. */
export interface WrittenRecord {
  uri: string;
  cid: string;
  text: string;
  commitCid: string;
  rev: string;
}

/**
 * Makes `total` createRecord calls spread over the writers, one call in flight per writer, all
 * writers at once. Returns the acknowledged records by URI.
 */
export async function writePosts(
  baseUrl: string,
  writers: Writer[],
  total: number,
  opts: { prefix?: string; stop?: () => boolean } = {},
): Promise<Map<string, WrittenRecord>> {
  const written = new Map<string, WrittenRecord>();
  let next = 0;
  await Promise.all(writers.map(async (w) => {
    while (next < total && !opts.stop?.()) {
      const i = next++;
      const text = `${opts.prefix ?? "post"} ${i}`;
      const res = await xrpcPost(baseUrl, "com.atproto.repo.createRecord", {
        repo: w.did,
        collection: COLLECTION_POST,
        record: { $type: COLLECTION_POST, text, createdAt: new Date().toISOString() },
      }, { authorization: `Bearer ${w.accessJwt}` });
      const body = await res.json();
      if (res.status !== 200) {
        throw new Error(`createRecord ${res.status}: ${JSON.stringify(body)}`);
      }
      written.set(body.uri, {
        uri: body.uri,
        cid: body.cid,
        text,
        commitCid: body.commit.cid,
        rev: body.commit.rev,
      });
    }
  }));
  return written;
}

/** An account host running as a child process (`deno run pds/main.ts`). */
export interface PdsProcess extends AsyncDisposable {
  readonly url: string;
  readonly child: Deno.ChildProcess;
  /** Log lines written so far (standard error). */
  readonly lines: string[];
  /** Sends `signal` and waits for the process to end. */
  kill(signal?: Deno.Signal): Promise<Deno.CommandStatus>;
}

/**
 * Starts `pds/main.ts` in a child process on a free port with `env` (DATA_DIR etc.) and waits
 * until it listens. Push is off unless `env` sets `APPVIEW_INTERNAL_URL`, DIDs unpublished unless
 * it sets `PDS_PLC_URL`. `v8Flags` (one
 * `--v8-flags=...` argument) runs it as the server tasks do.
 */
export async function spawnPds(
  env: Record<string, string>,
  opts: { v8Flags?: string } = {},
): Promise<PdsProcess> {
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      ...(opts.v8Flags === undefined ? [] : [opts.v8Flags]),
      `--allow-ffi=${LIBCRYPTO_PATHS.join(",")}`, // as `deno task pds` (OpenSSL signing)
      "--allow-net",
      "--allow-read",
      "--allow-write",
      "--allow-env",
      "pds/main.ts",
    ],
    cwd: new URL("../", import.meta.url).pathname,
    env: {
      PDS_PORT: "0",
      PDS_HOSTNAME: "127.0.0.1",
      PDS_PUBLIC_URL: "",
      APPVIEW_INTERNAL_URL: "off",
      // `deno task pds` requires the setting; these hosts publish no DID.
      PDS_PLC_URL: "off",
      LOG_LEVEL: "info",
      ...env,
    },
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  const lines: string[] = [];
  let found!: (url: string) => void;
  const listening = new Promise<string>((resolve) => found = resolve);
  const reading = (async () => {
    let rest = "";
    for await (const chunk of child.stderr.pipeThrough(new TextDecoderStream())) {
      rest += chunk;
      const parts = rest.split("\n");
      rest = parts.pop()!;
      for (const line of parts) {
        lines.push(line);
        if (line.includes('"account host listening"')) found(JSON.parse(line).url);
      }
    }
    if (rest) lines.push(rest);
  })();
  let status: Promise<Deno.CommandStatus> | null = null;
  const kill = (signal: Deno.Signal = "SIGTERM") => {
    status ??= (async () => {
      try {
        child.kill(signal);
      } catch {
        // Already exited.
      }
      const s = await child.status;
      await reading;
      return s;
    })();
    return status;
  };
  const url = await Promise.race([
    listening,
    child.status.then((s) => {
      throw new Error(`pds exited with ${s.code} before listening:\n${lines.join("\n")}`);
    }),
  ]).catch(async (err) => {
    await kill("SIGKILL");
    throw err;
  });
  return { url, child, lines, kill, [Symbol.asyncDispose]: () => kill().then(() => {}) };
}
