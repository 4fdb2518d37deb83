/**
 * subscribeRepos memory under subscribers that never read (issue 36, item 1): 100 non-reading
 * subscribers over 200 large events add at most 100 MB to the account host's resident memory,
 * and it returns to within 50 MB of its start after they close.
 *
 * A real account host runs in a child process (`spawnPds` of `pds/_test_helpers.ts`:
 * `pds/main.ts` with the server tasks' V8 flags, temp KV file, port 0). One account writes 200
 * posts, each with a ~19 KB external embed. Then 100 raw TCP clients do the WebSocket upgrade
 * with cursor 0 and never read a byte (Deno's WebSocket client reads eagerly, so it cannot stand
 * in for them): the kernel's socket buffers fill and whatever the host still wants to send stays
 * in the host. The host's RSS (Linux
 * `/proc/<pid>/status` `VmRSS`) is sampled every 100 ms: before the connections, while they are
 * held for {@link HOLD_MS}, and for {@link SETTLE_MS} after the clients have closed them.
 *
 * Run alone: `deno run -A --v8-flags=--no-concurrent-marking,--initial-old-space-size=256
 * scripts/bench/subscriber_memory_bench.ts`, or `deno task bench subscriber-memory` once listed.
 */

import { spawnPds, writeLargePosts } from "../../pds/_test_helpers.ts";
import { type BenchResult, printTable } from "./_types.ts";

const SUBSCRIBERS = 100;
const EVENTS = 200;
const EMBED_CHARS = 19_000;
const HOLD_MS = 8_000;
const SETTLE_MS = 6_000;
const SAMPLE_MS = 100;
const GROWTH_BUDGET_MB = 100;
const RETURN_BUDGET_MB = 50;
const MB = 1024 * 1024;
/** The server tasks' V8 flags (`scripts/bench/main.ts` `SERVER_V8_FLAGS`, deno.json). */
const SERVER_V8_FLAGS = "--v8-flags=--no-concurrent-marking,--initial-old-space-size=256";

/** Runs the benchmark once. */
export async function benchSubscriberMemory(): Promise<BenchResult[]> {
  const dir = await Deno.makeTempDir({ prefix: "subscriber-memory-bench-" });
  const host = await spawnPds({
    DATA_DIR: dir,
    PDS_JWT_SECRET: "subscriber-memory-bench-secret-0123",
    LOG_LEVEL: "info",
  }, { v8Flags: SERVER_V8_FLAGS });
  const clients: Deno.TcpConn[] = [];
  try {
    const account = await post(host.url, "com.atproto.server.createAccount", {
      handle: "memory-bench.test",
      password: "correct horse battery",
    });
    await writeLargePosts(host.url, account, EVENTS, EMBED_CHARS);
    await sleep(1000);
    const startMb = await rssMb(host.child.pid);

    for (let i = 0; i < SUBSCRIBERS; i++) clients.push(await openNonReader(host.url));
    const held = await sampleRss(host.child.pid, HOLD_MS);
    const peakMb = Math.max(...held);
    for (const c of clients.splice(0)) c.close();
    const after = await sampleRss(host.child.pid, SETTLE_MS);
    const endMb = after.at(-1)!;
    const growth = peakMb - startMb;
    const left = endMb - startMb;
    console.error(
      `subscriber memory: host RSS ${startMb.toFixed(0)} MB before, peak ${
        peakMb.toFixed(0)
      } MB with ${SUBSCRIBERS} non-reading subscribers over ${EVENTS} events of ~${
        (EMBED_CHARS / 1000).toFixed(0)
      } KB, ${endMb.toFixed(0)} MB ${
        SETTLE_MS / 1000
      } s after they closed; load average ${await loadAverage()}`,
    );
    const note = `host RSS ${startMb.toFixed(0)} MB before, peak ${peakMb.toFixed(0)} MB over ${
      HOLD_MS / 1000
    } s held, ${endMb.toFixed(0)} MB ${
      SETTLE_MS / 1000
    } s after close (pds/main.ts in a child process)`;
    return [
      {
        name:
          `subscribeRepos RSS growth, ${SUBSCRIBERS} non-reading subscribers x ${EVENTS} large events`,
        figure: growth,
        unit: "MB",
        budget: `<= ${GROWTH_BUDGET_MB} MB`,
        pass: growth <= GROWTH_BUDGET_MB,
        note,
      },
      {
        name: "subscribeRepos RSS above start after they closed",
        figure: left,
        unit: "MB",
        budget: `<= ${RETURN_BUDGET_MB} MB`,
        pass: left <= RETURN_BUDGET_MB,
      },
    ];
  } finally {
    for (const c of clients) c.close();
    await host.kill();
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}

/** A TCP connection that completes the subscribeRepos upgrade at cursor 0, then never reads. */
async function openNonReader(baseUrl: string): Promise<Deno.TcpConn> {
  const { hostname, port, host } = new URL(baseUrl);
  const conn = await Deno.connect({ hostname, port: Number(port) });
  const key = btoa(String.fromCharCode(...crypto.getRandomValues(new Uint8Array(16))));
  const request = `GET /xrpc/com.atproto.sync.subscribeRepos?cursor=0 HTTP/1.1\r\n` +
    `Host: ${host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
    `Sec-WebSocket-Key: ${key}\r\nSec-WebSocket-Version: 13\r\n\r\n`;
  await conn.write(new TextEncoder().encode(request));
  // Read the answer's head a byte at a time, so that not one byte of a frame is read.
  const one = new Uint8Array(1);
  let head = "";
  while (!head.endsWith("\r\n\r\n")) {
    if (await conn.read(one) === null) throw new Error(`Upgrade failed: ${head}`);
    head += String.fromCharCode(one[0]);
  }
  if (!head.startsWith("HTTP/1.1 101")) {
    conn.close();
    throw new Error(`Upgrade refused: ${head.split("\r\n")[0]}`);
  }
  return conn;
}

async function post(
  url: string,
  method: string,
  body: unknown,
  token?: string,
): Promise<{ did: string; accessJwt: string }> {
  const res = await fetch(`${url}/xrpc/${method}`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      ...(token ? { authorization: `Bearer ${token}` } : {}),
    },
    body: JSON.stringify(body),
  });
  const json = await res.json();
  if (res.status !== 200) throw new Error(`${method} ${res.status}: ${JSON.stringify(json)}`);
  return json;
}

/** Samples the RSS of `pid` every {@link SAMPLE_MS} for `ms`; in MB. */
async function sampleRss(pid: number, ms: number): Promise<number[]> {
  const out: number[] = [];
  const end = performance.now() + ms;
  while (performance.now() < end) {
    out.push(await rssMb(pid));
    await sleep(SAMPLE_MS);
  }
  out.push(await rssMb(pid));
  return out;
}

/**
 * Resident memory of `pid` in MB, from Linux `/proc/<pid>/status`, read by `cat`: Deno lets a
 * program read `/proc` entries only with --allow-all.
 */
async function rssMb(pid: number): Promise<number> {
  const res = await new Deno.Command("cat", {
    args: [`/proc/${pid}/status`],
    stdout: "piped",
    stderr: "null",
  }).output();
  const kb = /VmRSS:\s+(\d+) kB/.exec(new TextDecoder().decode(res.stdout))?.[1];
  if (kb === undefined) throw new Error(`No VmRSS for process ${pid}`);
  return (Number(kb) * 1024) / MB;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** The machine's load average (other work on it skews the figures), or "n/a". */
async function loadAverage(): Promise<string> {
  try {
    return (await Deno.readTextFile("/proc/loadavg")).split(" ").slice(0, 3).join(" ");
  } catch {
    return "n/a";
  }
}

if (import.meta.main) printTable(await benchSubscriberMemory());
