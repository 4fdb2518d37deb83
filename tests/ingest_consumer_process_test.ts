/**
 * The local-stream consumer as a real process (`deno task consumer:local`, docs/architecture.md 5):
 * killed with SIGKILL mid-stream and restarted, it ends with the same tables as an uninterrupted
 * run (spec 6.2 rule 2: the cursor is stored with the ops it covers); its state shows in the
 * `/healthz` of another process through the status rows; SIGTERM stops it cleanly. The index on
 * SQLite and on PostgreSQL (issue 40; the take-over by a second process waiting for the consumer
 * lock, PostgreSQL's alone, is ingest_consumer_pg_takeover_test.ts).
 */

import assert from "node:assert/strict";
import { healthRoutes } from "../appview/api/health.ts";
import {
  endBackendTests,
  forEachBackend,
  makeCommit,
  startFakeRepoStream,
  type TestCommit,
} from "../appview/_test_helpers.ts";
import { PG_LOCK_CONSUMERS } from "../appview/db/pg/lease.ts";
import { CONSUMER_LOCAL, CURSOR_LOCAL_SEQ } from "../appview/db/state.ts";
import { didOf, followOp, likeOp, postOp, repostOp, uriOf } from "../appview/_fixtures.ts";
import { createLocalStreamConsumer } from "../appview/ingest/sources/local_stream.ts";
import { APPVIEW_ENV_VARS } from "../appview/config.ts";
import { COLLECTION_POST } from "../shared/nsid.ts";
import { encodeTid } from "../shared/tid.ts";
import { freshIndexEnv, openIndexContext } from "./_system.ts";
import { makeTempDir, REPO_ROOT, waitFor } from "./_util.ts";

const TOTAL = 1200;
const DIDS = Array.from({ length: 8 }, (_, i) => didOf(`user${"abcdefgh"[i]}`));

/** A realistic mix: posts, likes and reposts of earlier posts, follows. */
function history(): TestCommit[] {
  const posts: string[] = [];
  const commits: TestCommit[] = [];
  for (let seq = 1; seq <= TOTAL; seq++) {
    const did = DIDS[seq % DIDS.length];
    const rkey = encodeTid(1_700_000_000_000_000 + seq, 0);
    const target = posts[(seq * 7) % Math.max(1, posts.length)];
    let op;
    if (seq % 4 === 0 || target === undefined) {
      op = postOp(did, rkey, `post ${seq}`);
      posts.push(uriOf(did, COLLECTION_POST, rkey));
    } else if (seq % 4 === 1) op = likeOp(did, rkey, target);
    else if (seq % 4 === 2) op = followOp(did, rkey, DIDS[(seq * 3) % DIDS.length]);
    else op = repostOp(did, rkey, target);
    commits.push(makeCommit(seq, [op]));
  }
  return commits;
}

/**
 * Starts `appview/main.ts` with only what it needs; `database` names the index
 * (`APPVIEW_DB_PATH` or `APPVIEW_DATABASE_URL`; default the SQLite file in `dataDir`).
 */
function spawnConsumer(
  dataDir: string,
  pdsUrl: string,
  args = ["consumer:local"],
  database: Record<string, string> = {},
) {
  // The PostgreSQL driver reads libpq's PG* variables (the task permission sets grant them).
  const env = "APPVIEW_DATABASE_URL" in database ? [...APPVIEW_ENV_VARS, "PG*"] : APPVIEW_ENV_VARS;
  return new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--quiet",
      "--allow-net=127.0.0.1",
      `--allow-read=${dataDir}`,
      `--allow-write=${dataDir}`,
      `--allow-env=${env.join(",")}`,
      "appview/main.ts",
      ...args,
    ],
    cwd: REPO_ROOT,
    env: { DATA_DIR: dataDir, PDS_INTERNAL_URL: pdsUrl, LOG_LEVEL: "warn", ...database },
    clearEnv: true,
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
}

const DUMP_OPTS = {
  // The fixture's commits name no real previous commit, so each shows a gap: the backfill queue's
  // rows carry the times they were queued, and the process's backfill worker fails to fetch the
  // fixture's repositories (docs/behaviour.md 6.2 rules 8-9).
  exclude: [
    "consumer_status",
    "ingest_skips",
    "schema_migrations",
    "backfill_queue",
    "backfill_status",
  ],
  omitColumns: ["indexed_at", "updated_at"],
};

forEachBackend(
  "a consumer process killed with SIGKILL mid-stream and restarted ends with the same tables as an uninterrupted run",
  async (backend) => {
    await using dir = await makeTempDir();
    const commits = history();
    await using stream = startFakeRepoStream({ replayChunk: 25, replayPauseMs: 5 });
    for (const c of commits) stream.append(c.seq, c.frame());
    const pdsUrl = stream.url.replace(/^ws/, "http").replace(/\/xrpc\/.*$/, "");

    // Reference: an uninterrupted in-process run.
    let reference;
    {
      await using ctx = await openIndexContext(await freshIndexEnv(backend, ":memory:"));
      await using consumer = createLocalStreamConsumer(ctx, { url: stream.url });
      consumer.start();
      await waitFor(() => consumer.status().cursor === TOTAL, { timeoutMs: 10_000 });
      reference = await ctx.dump(DUMP_OPTS);
    }

    const database = await freshIndexEnv(backend, `${dir.path}/appview.sqlite`);
    const index = await openIndexContext(database);
    const cursor = () => index.store.state.readCursor(CURSOR_LOCAL_SEQ);
    try {
      const first = spawnConsumer(dir.path, pdsUrl, undefined, database);
      const firstLog = new Response(first.stderr).text();
      // On PostgreSQL, the consumer locks held (`db/pg/lease.ts`).
      const locks = async () =>
        (await index.rows<{ n: number }>(
          "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND classid::bigint = ?",
          PG_LOCK_CONSUMERS,
        ))[0].n;
      const killedAt = await waitFor(async () => {
        const c = await cursor();
        return c !== null && c >= 100 ? c : null;
      }, { timeoutMs: 15_000, message: "first consumer progress" });
      if (backend === "postgres") assert.equal(await locks(), 1);
      first.kill("SIGKILL");
      const status = await first.status;
      assert.equal(status.signal, "SIGKILL");
      await firstLog;
      if (backend === "postgres") {
        // The server finishes a commit the dead process had sent, then ends its session, which
        // releases its consumer lock: only then is the stored cursor final.
        await waitFor(async () => await locks() === 0, {
          message: "the killed process's session ended",
        });
      }
      const afterKill = (await cursor())!;
      assert.ok(afterKill >= killedAt && afterKill < TOTAL, `killed at ${afterKill} of ${TOTAL}`);

      const second = spawnConsumer(dir.path, pdsUrl, undefined, database);
      const secondLog = new Response(second.stderr).text();
      try {
        await waitFor(async () => await cursor() === TOTAL, {
          timeoutMs: 15_000,
          message: "second consumer catches up",
        });
        assert.equal(stream.cursors.length, 3);
        assert.equal(stream.cursors[2], String(afterKill));
        assert.deepEqual(await index.dump(DUMP_OPTS), reference);

        // The consumer's state is visible to /healthz of another process (status rows).
        await using ctx = await openIndexContext(database);
        await waitFor(async () =>
          (await index.store.state.readConsumerStatus(CONSUMER_LOCAL))?.cursor === TOTAL
        );
        const res = await healthRoutes(ctx).request("/healthz");
        assert.equal(res.status, 200);
        const body = await res.json();
        assert.equal(body.consumers.local.state, "live");
        assert.equal(body.consumers.local.cursor, TOTAL);
        assert.equal(body.consumers.local.stale, false);
        assert.equal(body.consumers.public.state, "disabled");
        assert.equal(body.status, "ok");
      } finally {
        second.kill("SIGTERM");
        const stopped = await second.status;
        const log = await secondLog;
        assert.equal(stopped.code, 0, log);
      }
      assert.equal((await index.store.state.readConsumerStatus(CONSUMER_LOCAL))?.state, "disabled");
    } finally {
      await index[Symbol.asyncDispose]();
    }
  },
);

// The command line alone: no index is opened.
Deno.test("appview/main.ts rejects an unknown command", async () => {
  await using dir = await makeTempDir();
  const child = spawnConsumer(dir.path, "http://127.0.0.1:9", ["nope"]);
  const [status, err] = await Promise.all([child.status, new Response(child.stderr).text()]);
  assert.equal(status.code, 2);
  assert.match(err, /^Usage: appview\/main\.ts/);
});

endBackendTests();
