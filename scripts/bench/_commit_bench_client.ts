/**
 * Load client of `commit_bench.ts`, run as a separate process so that the client's CPU does not
 * count against the account host (and does not share its event loop). Reads one job as JSON on
 * stdin, writes the result as JSON on stdout:
 *
 * - `{mode: "closed", url, accounts, perAccount}`: one closed loop of createRecord per account;
 *   answers `{seconds, latenciesMs, cpuMs, processCpuMs}`;
 * - `{mode: "open", url, accounts, rate, seconds}`: an open-loop load at `rate` requests/s
 *   spread over the accounts, latency of each request from its scheduled start (so queueing
 *   counts); answers `{seconds, latenciesMs, cpuMs, processCpuMs}`.
 *
 * `cpuMs` is the client's own CPU time over the job: on a 2-core machine the load generator
 * competes with the host it measures, and the bench reports how much. To keep that share small
 * the jobs send their requests with the account host's own push client ({@link Http1Client}, a
 * minimal HTTP/1.1 keep-alive client, one request at a time per connection, as `wrk` or `oha`
 * do), not `fetch`: about 0.12 ms of client CPU per request instead of 0.22 ms. The host still
 * parses real HTTP/1.1 from real TCP connections.
 *
 * With `--sink` it is instead the index's push endpoint (`/internal/ingest-commit`, docs/behaviour.md
 * 10.7) for the whole bench: it prints `{url}` as one line, answers every push with 200,
 * answers `GET /cpu` with `{cpuMs}` (its CPU time so far), and when its stdin closes prints
 * `{pushes}` (the count received) and exits. The account host then pays for its pushes (body
 * building, the request) as in a deployment, without also serving them.
 */

import { COLLECTION_POST } from "../../shared/nsid.ts";
import process from "node:process";
import { Http1Client } from "../../pds/sequencer/http1_client.ts";

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

/** createRecord through an {@link Http1Client}; throws unless the status is 200. */
async function createPostRaw(client: Http1Client, a: Account): Promise<void> {
  const status = await client.post(
    "/xrpc/com.atproto.repo.createRecord",
    { "content-type": "application/json", authorization: a.auth },
    encoder.encode(postBody(a)),
  );
  if (status !== 200) throw new Error(`createRecord: HTTP ${status}`);
}

const encoder = new TextEncoder();

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
  /** The client process's CPU time in all, start-up included. */
  processCpuMs: number;
}

/** This process's CPU time so far (user + system), in milliseconds. */
export function cpuMs(): number {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1000;
}

async function run(job: Job): Promise<ClientResult> {
  const cpuStart = cpuMs();
  const latenciesMs: number[] = [];
  const client = new Http1Client(job.url);
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
  const cpuEnd = cpuMs();
  return {
    seconds: (performance.now() - t0) / 1000,
    latenciesMs,
    cpuMs: cpuEnd - cpuStart,
    processCpuMs: cpuEnd,
  };
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
