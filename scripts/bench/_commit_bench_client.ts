/**
 * Load client of `commit_bench.ts`, run as a separate process so that the client's CPU does not
 * count against the account host (and does not share its event loop). Reads one job as JSON on
 * stdin, writes the result as JSON on stdout:
 *
 * - `{mode: "closed", url, accounts, perAccount}`: one closed loop of createRecord per account;
 *   answers `{seconds, latenciesMs, cpuMs}`;
 * - `{mode: "open", url, accounts, rate, seconds}`: an open-loop load at `rate` requests/s
 *   spread over the accounts, latency of each request from its scheduled start (so queueing
 *   counts); answers `{seconds, latenciesMs, cpuMs}`.
 *
 * `cpuMs` is the client's own CPU time over the job: on a 2-core machine the load generator
 * competes with the host it measures, and the bench reports how much. To keep that share small
 * the jobs send their requests with {@link RawHttpClient}, a minimal HTTP/1.1 keep-alive client
 * (one request at a time per connection, as `wrk` or `oha` do), not `fetch`: about 0.12 ms of
 * client CPU per request instead of 0.22 ms. The host still parses real HTTP/1.1 from real TCP
 * connections.
 *
 * With `--sink` it is instead the index's push endpoint (`/internal/ingest-commit`, DESIGN.md
 * section 4) for the whole bench: it prints `{url}` as one line, answers every push with 200,
 * answers `GET /cpu` with `{cpuMs}` (its CPU time so far), and when its stdin closes prints
 * `{pushes}` (the count received) and exits. The account host then pays for its pushes (body
 * building, the request) as in a deployment, without also serving them.
 */

import { COLLECTION_POST } from "../../shared/nsid.ts";
import process from "node:process";

/** A bench account: its DID, its `Bearer` header and a post counter. */
export interface Account {
  did: string;
  auth: string;
  n: number;
}

type Job =
  | { mode: "closed"; url: string; accounts: Account[]; perAccount: number }
  | { mode: "open"; url: string; accounts: Account[]; rate: number; seconds: number };

/** One createRecord call over HTTP (shared by the in-process phase of commit_bench.ts). */
export async function createPost(url: string, a: Account): Promise<void> {
  const res = await fetch(`${url}/xrpc/com.atproto.repo.createRecord`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: a.auth },
    body: postBody(a),
  });
  if (res.status !== 200) throw new Error(`createRecord: ${res.status} ${await res.text()}`);
  await res.body?.cancel();
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();
/** Longest response head the client accepts. */
const MAX_HEAD_BYTES = 16 * 1024;

/**
 * HTTP/1.1 POSTs of JSON to one plain-http origin over keep-alive connections: a request takes
 * an idle connection (or opens one), writes the request, reads the response head and its
 * `Content-Length` body, and gives the connection back. Responses without `Content-Length`
 * (chunked, or ended by close) are rejected: the account host always sends one for its JSON.
 */
export class RawHttpClient {
  readonly #hostname: string;
  readonly #port: number;
  readonly #host: string;
  readonly #idle: Deno.TcpConn[] = [];
  readonly #all = new Set<Deno.TcpConn>();

  constructor(origin: string) {
    const url = new URL(origin);
    if (url.protocol !== "http:") throw new Error(`RawHttpClient needs an http origin: ${origin}`);
    this.#hostname = url.hostname.replace(/^\[|\]$/g, "");
    this.#port = Number(url.port || 80);
    this.#host = url.host;
  }

  /** POSTs `body` as JSON to `path`; returns the status and the body text. */
  async postJson(
    path: string,
    headers: Record<string, string>,
    body: string,
  ): Promise<{ status: number; text: string }> {
    const payload = encoder.encode(body);
    let head = `POST ${path} HTTP/1.1\r\nhost: ${this.#host}\r\ncontent-type: application/json\r\n`;
    for (const [k, v] of Object.entries(headers)) head += `${k}: ${v}\r\n`;
    head += `content-length: ${payload.length}\r\n\r\n`;
    const request = concat(encoder.encode(head), payload);
    const conn = this.#idle.pop() ?? await this.#connect();
    try {
      for (let off = 0; off < request.length;) off += await conn.write(request.subarray(off));
      const res = await readResponse(conn);
      if (res.reusable) this.#idle.push(conn);
      else this.#drop(conn);
      return res;
    } catch (err) {
      this.#drop(conn);
      throw err;
    }
  }

  /** Closes every connection. */
  close(): void {
    for (const conn of this.#all) this.#drop(conn);
  }

  async #connect(): Promise<Deno.TcpConn> {
    const conn = await Deno.connect({ hostname: this.#hostname, port: this.#port });
    conn.setNoDelay(true);
    this.#all.add(conn);
    return conn;
  }

  #drop(conn: Deno.TcpConn): void {
    if (!this.#all.delete(conn)) return;
    try {
      conn.close();
    } catch {
      // already closed
    }
  }
}

/** Reads one response (head and `Content-Length` body) from `conn`. */
async function readResponse(
  conn: Deno.TcpConn,
): Promise<{ status: number; text: string; reusable: boolean }> {
  let buf = new Uint8Array(4096);
  let have = 0;
  let headEnd = -1;
  let bodyLength = -1;
  let status = 0;
  let reusable = true;
  for (;;) {
    if (headEnd < 0) {
      headEnd = indexOfHeadEnd(buf, have);
      if (headEnd >= 0) {
        const head = decoder.decode(buf.subarray(0, headEnd));
        const lines = head.split("\r\n");
        const m = /^HTTP\/1\.[01] (\d{3})/.exec(lines[0]);
        if (!m) throw new Error(`malformed status line: ${JSON.stringify(lines[0])}`);
        status = Number(m[1]);
        for (const line of lines.slice(1)) {
          const colon = line.indexOf(":");
          const name = line.slice(0, colon).trim().toLowerCase();
          const value = line.slice(colon + 1).trim();
          if (name === "content-length") bodyLength = Number(value);
          else if (name === "connection" && value.toLowerCase() === "close") reusable = false;
        }
        if (!Number.isSafeInteger(bodyLength) || bodyLength < 0) {
          throw new Error(`response ${status} has no Content-Length`);
        }
        headEnd += 4;
      } else if (have > MAX_HEAD_BYTES) {
        throw new Error("response head too large");
      }
    }
    if (headEnd >= 0 && have >= headEnd + bodyLength) {
      if (have > headEnd + bodyLength) throw new Error("unexpected bytes after the response");
      const text = decoder.decode(buf.subarray(headEnd, headEnd + bodyLength));
      return { status, text, reusable };
    }
    if (have === buf.length) {
      const bigger = new Uint8Array(buf.length * 2);
      bigger.set(buf);
      buf = bigger;
    }
    const n = await conn.read(buf.subarray(have));
    if (n === null) throw new Error("connection closed before the response ended");
    have += n;
  }
}

function indexOfHeadEnd(buf: Uint8Array, have: number): number {
  for (let i = 3; i < have; i++) {
    if (buf[i] === 10 && buf[i - 1] === 13 && buf[i - 2] === 10 && buf[i - 3] === 13) return i - 3;
  }
  return -1;
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

/** createRecord through a {@link RawHttpClient}; throws unless the status is 200. */
async function createPostRaw(client: RawHttpClient, a: Account): Promise<void> {
  const res = await client.postJson(
    "/xrpc/com.atproto.repo.createRecord",
    { authorization: a.auth },
    postBody(a),
  );
  if (res.status !== 200) throw new Error(`createRecord: ${res.status} ${res.text}`);
}

function postBody(a: Account): string {
  return JSON.stringify({
    repo: a.did,
    collection: COLLECTION_POST,
    record: { text: `bench post ${a.n++} from ${a.did}`, createdAt: new Date().toISOString() },
  });
}

/** What one job measured. */
export interface ClientResult {
  seconds: number;
  latenciesMs: number[];
  /** The client's CPU time over the job. */
  cpuMs: number;
}

/** This process's CPU time so far (user + system), in milliseconds. */
export function cpuMs(): number {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1000;
}

async function run(job: Job): Promise<ClientResult> {
  const cpuStart = cpuMs();
  const latenciesMs: number[] = [];
  const client = new RawHttpClient(job.url);
  const t0 = performance.now();
  if (job.mode === "closed") {
    await Promise.all(job.accounts.map(async (a) => {
      for (let i = 0; i < job.perAccount; i++) {
        const start = performance.now();
        await createPostRaw(client, a);
        latenciesMs.push(performance.now() - start);
      }
    }));
  } else {
    const total = job.rate * job.seconds;
    const pending: Promise<void>[] = [];
    for (let i = 0; i < total; i++) {
      const due = t0 + (i * 1000) / job.rate;
      const wait = due - performance.now();
      if (wait > 1) await new Promise((r) => setTimeout(r, wait));
      const a = job.accounts[i % job.accounts.length];
      pending.push(
        createPostRaw(client, a).then(() => void latenciesMs.push(performance.now() - due)),
      );
    }
    await Promise.all(pending);
  }
  client.close();
  return { seconds: (performance.now() - t0) / 1000, latenciesMs, cpuMs: cpuMs() - cpuStart };
}

/** The push sink (`--sink`): counts the pushes until stdin closes. */
async function sink(): Promise<void> {
  let pushes = 0;
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    await req.arrayBuffer();
    const path = new URL(req.url).pathname;
    if (req.method === "POST" && path === "/internal/ingest-commit") pushes++;
    const body = req.method === "GET" && path === "/cpu" ? { cpuMs: cpuMs() } : {};
    return Response.json(body);
  });
  console.log(JSON.stringify({ url: `http://127.0.0.1:${server.addr.port}` }));
  await Deno.stdin.readable.pipeTo(new WritableStream());
  await server.shutdown();
  console.log(JSON.stringify({ pushes }));
}

if (import.meta.main && Deno.args.includes("--sink")) {
  await sink();
} else if (import.meta.main) {
  const job = JSON.parse(await new Response(Deno.stdin.readable).text()) as Job;
  console.log(JSON.stringify(await run(job)));
}
