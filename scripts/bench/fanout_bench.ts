/**
 * subscribeRepos fan-out (docs/behaviour.md 12: 1,000 subscribers x 100 commits/s, delivery p99
 * <= 250 ms, each frame encoded once).
 *
 * A real account host (`startPds`, temp KV file, port 0) takes `createRecord` calls over HTTP at
 * 100 commits/s for 10 s from 20 accounts. 1,000 live WebSocket subscribers run in a Worker of
 * this process (a second thread; the machine has 2 cores). Latency per delivered frame = its
 * arrival at a subscriber minus the moment the writer got the 200 answer for that commit
 * (`performance.timeOrigin + performance.now()` on both threads). The broadcaster's frame counter
 * shows one encode per commit, whatever the subscriber count.
 *
 * Run alone: `deno task bench fanout` (with the server tasks' V8 flags).
 */

import { silentLogger } from "../../shared/log.ts";
import { COLLECTION_POST } from "../../shared/nsid.ts";
import { startPds } from "../../pds/server.ts";
import { formatCid } from "../../shared/cid.ts";
import { type BenchResult, percentile, printTable } from "./_types.ts";

const SUBSCRIBERS = 1000;
const COMMITS_PER_SECOND = 100;
const SECONDS = 10;
const ACCOUNTS = 20;
const P99_BUDGET_MS = 250;

interface ClientResult {
  firstSeq: number | null;
  lastSeq: number | null;
  times: Float64Array;
  bad: number;
}

/** Runs the budgeted configuration, then a lighter one for scale (informational). */
export async function benchFanout(): Promise<BenchResult[]> {
  const budgeted = await runFanout(SUBSCRIBERS, COMMITS_PER_SECOND, true);
  const light = await runFanout(SUBSCRIBERS, COMMITS_PER_SECOND / 5, false);
  return [...budgeted, ...light];
}

async function runFanout(
  subscribers: number,
  commitsPerSecond: number,
  budgeted: boolean,
): Promise<BenchResult[]> {
  const dir = await Deno.makeTempDir({ prefix: "fanout-bench-" });
  const pds = await startPds({
    env: {
      DATA_DIR: dir,
      PDS_JWT_SECRET: "fanout-bench-secret-0123456789",
      APPVIEW_INTERNAL_URL: "off",
    },
    hostname: "127.0.0.1",
    port: 0,
    log: silentLogger,
    // Every subscriber connects from 127.0.0.1: lift the per-address cap (default 100).
    stream: { limits: { maxConnectionsPerAddress: subscribers } },
  });
  const worker = new Worker(new URL("./_fanout_worker.ts", import.meta.url), { type: "module" });
  try {
    const post = (path: string, body: unknown, token?: string) =>
      fetch(`${pds.url}/xrpc/${path}`, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          ...(token ? { authorization: `Bearer ${token}` } : {}),
        },
        body: JSON.stringify(body),
      }).then(async (r) => {
        const json = await r.json();
        if (r.status !== 200) throw new Error(`${path} ${r.status}: ${JSON.stringify(json)}`);
        return json;
      });
    const accounts: { did: string; accessJwt: string }[] = [];
    for (let i = 0; i < ACCOUNTS; i++) {
      accounts.push(
        await post("com.atproto.server.createAccount", {
          handle: `fanout-user${i}.test`,
          password: "correct horse battery",
        }),
      );
    }

    const reply = (type: string) =>
      new Promise<MessageEvent>((resolve) => {
        worker.onmessage = (e) => e.data.type === type && resolve(e);
      });
    const opened = reply("opened");
    const wsUrl = `${pds.url.replace(/^http/, "ws")}/xrpc/com.atproto.sync.subscribeRepos`;
    worker.postMessage({ type: "open", url: wsUrl, count: subscribers });
    await opened;
    console.error(`fanout: ${subscribers} subscribers connected`);
    const services = pds.ctx.stream!;
    while (services.broadcaster.subscriberCount < subscribers) {
      await new Promise((r) => setTimeout(r, 10));
    }

    // The moment each commit is durable (the sequencer's in-process notification, right
    // before the broadcast and the HTTP answer): latencies are measured from there, which is
    // never later than the writer receiving its 200.
    const committedAt = new Map<number, number>();
    const seqOf = new Map<string, number>();
    const unsubscribe = pds.ctx.sequencer.onCommit((c) => {
      committedAt.set(c.seq, performance.timeOrigin + performance.now());
      seqOf.set(formatCid(c.event.commit), c.seq);
    });
    const encodedBefore = services.broadcaster.framesEncoded;
    const answerMs: number[] = [];
    const total = commitsPerSecond * SECONDS;
    const writes: Promise<void>[] = [];
    const start = performance.now();
    for (let i = 0; i < total; i++) {
      const due = start + (i * 1000) / commitsPerSecond;
      const wait = due - performance.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      const account = accounts[i % ACCOUNTS];
      const sentAt = performance.now();
      writes.push(
        post("com.atproto.repo.createRecord", {
          repo: account.did,
          collection: COLLECTION_POST,
          record: { text: `fan-out ${i}`, createdAt: new Date().toISOString() },
        }, account.accessJwt).then((res) => {
          answerMs.push(performance.now() - sentAt);
          if (!seqOf.has(res.commit.cid)) throw new Error(`No seq for ${res.commit.cid}`);
        }),
      );
    }
    await Promise.all(writes);
    const elapsedS = (performance.now() - start) / 1000;
    unsubscribe();

    const result = reply("result");
    worker.postMessage({ type: "collect", expected: total });
    const clients: ClientResult[] = (await result).data.clients;
    const encoded = services.broadcaster.framesEncoded - encodedBefore;

    const latencies: number[] = [];
    let delivered = 0;
    let complete = 0;
    let bad = 0;
    for (const c of clients) {
      bad += c.bad;
      if (c.firstSeq === null) continue;
      if (c.lastSeq === c.firstSeq + c.times.length - 1 && c.times.length === total) complete++;
      for (let i = 0; i < c.times.length; i++) {
        const sent = committedAt.get(c.firstSeq + i);
        if (sent !== undefined) latencies.push(c.times[i] - sent);
        delivered++;
      }
    }
    const p50 = percentile(latencies, 50);
    const p99 = percentile(latencies, 99);
    console.error(
      `fanout: ${total} commits (target ${commitsPerSecond}/s) in ${
        elapsedS.toFixed(1)
      } s to ${clients.length} subscribers ` +
        `(in-process Worker clients); ${delivered} frames delivered, ${complete} subscribers ` +
        `complete, ${bad} non-commit frames; frames encoded: ${encoded}; ` +
        `latency p50 ${p50.toFixed(1)} ms, p99 ${p99.toFixed(1)} ms, max ${
          percentile(latencies, 100).toFixed(1)
        } ms; createRecord p99 ${
          percentile(answerMs, 99).toFixed(1)
        } ms; load average ${await loadAverage()}`,
    );
    const allDelivered = complete === subscribers && bad === 0;
    const label = `${subscribers} subs x ${commitsPerSecond}/s`;
    if (!budgeted) {
      return [{
        name: `subscribeRepos fan-out delivery p99 (${label}, informational)`,
        figure: p99,
        unit: "ms",
        budget: "-",
        pass: true,
      }];
    }
    return [
      {
        name: `subscribeRepos fan-out delivery p50 (${label})`,
        figure: p50,
        unit: "ms",
        budget: "-",
        pass: true,
      },
      {
        name: `subscribeRepos fan-out delivery p99 (${label})`,
        figure: p99,
        unit: "ms",
        budget: `<= ${P99_BUDGET_MS} ms, every frame delivered`,
        pass: p99 <= P99_BUDGET_MS && allDelivered,
      },
      {
        name: "subscribeRepos frames encoded per commit",
        figure: encoded / total,
        unit: "encodes/commit",
        budget: "1 (encoded once)",
        pass: encoded === total,
      },
    ];
  } finally {
    worker.terminate();
    await pds.close();
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}

if (import.meta.main) printTable(await benchFanout());

/** The machine's load average (other work on it skews the figures), or "n/a". */
async function loadAverage(): Promise<string> {
  try {
    return (await Deno.readTextFile("/proc/loadavg")).split(" ").slice(0, 3).join(" ");
  } catch {
    return "n/a";
  }
}
