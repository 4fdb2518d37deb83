/**
 * Backfill benchmark (issue 38; docs/behaviour.md 6.2 rules 9 and 11): a real account host holds
 * `BACKFILL_BENCH_REPOS` repositories (default 100) of `BACKFILL_BENCH_RECORDS` records each
 * (default 2,000: posts, likes and reposts of other accounts' posts, follows), written before the
 * clock starts through `applyWrites` (100 records a commit). Timed: an empty index rebuilt from
 * them as `deno task backfill --all` does (`compareWithHost`, then the backfill worker at its
 * default concurrency: listRepos, getRepo over HTTP, CAR, signature and tree checks, record
 * validation and the diff, applied through the write path). Reported in records/s, with the CPU
 * time of this process (the account host's exports run in it too). No budget (informational).
 *
 * Run alone: `deno task bench backfill`.
 */

import { cpuUsage } from "node:process";
import { loadAppviewConfig } from "../../appview/config.ts";
import { createAppviewContext } from "../../appview/context.ts";
import { openIndexStore } from "../../appview/db/open.ts";
import { Backfiller, createRepoSource } from "../../appview/ingest/backfill/backfiller.ts";
import { compareWithHost } from "../../appview/ingest/backfill/host_reconcile.ts";
import { startPds } from "../../pds/server.ts";
import {
  COLLECTION_FOLLOW,
  COLLECTION_LIKE,
  COLLECTION_POST,
  COLLECTION_REPOST,
} from "../../shared/nsid.ts";
import { silentLogger } from "../../shared/log.ts";
import { type BenchResult, informationalRow } from "./_types.ts";

const REPOS = Number(Deno.env.get("BACKFILL_BENCH_REPOS") ?? 100);
const RECORDS = Number(Deno.env.get("BACKFILL_BENCH_RECORDS") ?? 2_000);
/** Records per `applyWrites` call (the account host's limit per commit). */
const PER_COMMIT = 100;

type Account = { did: string; accessJwt: string };

async function xrpc(base: string, nsid: string, body: unknown, token?: string): Promise<unknown> {
  const res = await fetch(`${base}/xrpc/${nsid}`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      ...(token === undefined ? {} : { authorization: `Bearer ${token}` }),
    },
    body: JSON.stringify(body),
  });
  const json = await res.json();
  if (res.status !== 200) throw new Error(`${nsid} ${res.status}: ${JSON.stringify(json)}`);
  return json;
}

/** The accounts and their records (untimed). */
async function writeRepositories(base: string): Promise<number> {
  const accounts: Account[] = [];
  for (let i = 0; i < REPOS; i++) {
    accounts.push(
      await xrpc(base, "com.atproto.server.createAccount", {
        handle: `bench${i}.test`,
        password: "bench-password-1",
      }) as Account,
    );
  }
  const firstPosts: { uri: string; cid: string }[] = [];
  const createdAt = new Date().toISOString();
  let written = 0;
  for (const [i, account] of accounts.entries()) {
    for (let done = 0; done < RECORDS; done += PER_COMMIT) {
      const writes = [];
      for (let k = done; k < Math.min(RECORDS, done + PER_COMMIT); k++) {
        const other = accounts[(i + 1 + (k % (accounts.length - 1 || 1))) % accounts.length];
        const subject = firstPosts[(i + k) % Math.max(1, firstPosts.length)];
        const kind = k % 10;
        let collection = COLLECTION_POST;
        let value: Record<string, unknown> = { text: `post ${k} of bench${i}`, langs: ["en"] };
        if (subject !== undefined && kind < 2) {
          collection = COLLECTION_LIKE;
          value = { subject };
        } else if (subject !== undefined && kind === 2) {
          collection = COLLECTION_REPOST;
          value = { subject };
        } else if (kind === 3 && k < accounts.length * 10) {
          collection = COLLECTION_FOLLOW;
          value = { subject: other.did };
        }
        writes.push({
          $type: "com.atproto.repo.applyWrites#create",
          collection,
          value: { $type: collection, createdAt, ...value },
        });
      }
      const res = await xrpc(base, "com.atproto.repo.applyWrites", {
        repo: account.did,
        writes,
      }, account.accessJwt) as { results: { uri?: string; cid?: string }[] };
      written += writes.length;
      if (done === 0) firstPosts.push(res.results[0] as { uri: string; cid: string });
    }
  }
  return written;
}

/** Runs the benchmark and returns its figures. */
export async function benchBackfill(): Promise<BenchResult[]> {
  const dir = await Deno.makeTempDir({ prefix: "backfill-bench-" });
  const pds = await startPds({
    env: {
      DATA_DIR: dir,
      PDS_KV_PATH: `${dir}/pds.kv`,
      PDS_JWT_SECRET: "backfill-bench-secret-0123456789",
      PDS_HANDLE_DOMAINS: ".test",
      APPVIEW_INTERNAL_URL: "off",
      PDS_SIGNUPS_PER_HOUR: "100000",
    },
    hostname: "127.0.0.1",
    port: 0,
    log: silentLogger,
  });
  try {
    const written = await writeRepositories(pds.url);
    console.error(`backfill bench: ${REPOS} repositories, ${written} records written`);
    const config = loadAppviewConfig({
      DATA_DIR: dir,
      APPVIEW_DB_PATH: `${dir}/appview.sqlite`,
      PDS_PUBLIC_URL: pds.url,
    });
    const store = await openIndexStore(config, { log: silentLogger });
    try {
      const ctx = createAppviewContext({ config, store, log: silentLogger });
      const source = createRepoSource(config);
      let records = 0;
      let failed = 0;
      const worker = new Backfiller(ctx, {
        source,
        concurrency: config.backfill.concurrency,
        onOutcome: (_did, outcome) => {
          if (outcome instanceof Error) failed++;
          else if (outcome.kind === "applied") records += outcome.records;
        },
      });
      const queue = store.state.backfillQueue;
      const cpuStart = cpuUsage();
      const start = performance.now();
      await compareWithHost(ctx, source, { all: true, reason: "requested" });
      for (;;) {
        await worker.wake();
        if (worker.running === 0 && (await queue.due(new Date().toISOString(), 1)).length === 0) {
          break;
        }
        await new Promise((r) => setTimeout(r, 5));
      }
      const seconds = (performance.now() - start) / 1000;
      const cpu = cpuUsage(cpuStart);
      await worker.close();
      if (failed > 0 || records !== written) {
        throw new Error(`Backfill bench: ${failed} repositories failed, ${records} of ${written}`);
      }
      const cpuSeconds = (cpu.user + cpu.system) / 1e6;
      console.error(
        `backfill bench: ${records} records in ${seconds.toFixed(2)} s wall, ` +
          `${cpuSeconds.toFixed(2)} s CPU (host exports included)`,
      );
      return [
        informationalRow(
          `backfill of ${REPOS} repositories x ${RECORDS} records (getRepo, verify, applySnapshot)`,
          records / seconds,
          "records/s",
        ),
      ];
    } finally {
      await store.close();
    }
  } finally {
    await pds.close();
    await Deno.remove(dir, { recursive: true });
  }
}
