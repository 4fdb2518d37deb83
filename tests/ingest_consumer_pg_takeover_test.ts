/**
 * Several processes on one PostgreSQL index (issue 40; docs/behaviour.md 6.2 rule 12): two
 * `deno task consumer:local` processes (`appview/main.ts consumer:local` under the `consumer`
 * permission set, `APPVIEW_DATABASE_URL` set) on a real account host whose members keep writing.
 * The second waits for the consumer lock while the first consumes; the first is killed with
 * SIGKILL mid-stream; the second takes over from the stored cursor; the final tables equal those
 * of one uninterrupted process's run over the same stream: no op lost or applied twice. SIGTERM
 * then stops the second cleanly, releasing the lock.
 */

import assert from "node:assert/strict";
import { PG_LOCK_CONSUMERS } from "../appview/db/pg/lease.ts";
import { openPgIndex, type PgSql } from "../appview/db/pg/open.ts";
import {
  type Dump,
  dumpPgIndex,
  freshPgDatabase,
  pgTest,
  stopPgClusterAfterTests,
} from "../appview/db/pg/_test_helpers.ts";
import { signUp, startTestServer, xrpcPost } from "../pds/_test_helpers.ts";
import { readHeadSeq } from "../pds/sequencer/event_log.ts";
import {
  COLLECTION_FOLLOW,
  COLLECTION_LIKE,
  COLLECTION_POST,
  COLLECTION_PROFILE,
  COLLECTION_REPOST,
} from "../shared/nsid.ts";
import { baseEnv, makeTempDir, REPO_ROOT, waitFor } from "./_util.ts";

/** Writes per member (three members write at once). */
const WRITES_PER_MEMBER = 150;

type Member = { did: string; accessJwt: string };
type Ref = { uri: string; cid: string };

async function call(url: string, who: Member, method: string, body: Record<string, unknown>) {
  const res = await xrpcPost(url, `com.atproto.repo.${method}`, { repo: who.did, ...body }, {
    authorization: `Bearer ${who.accessJwt}`,
  });
  const json = await res.json();
  assert.equal(res.status, 200, JSON.stringify(json));
  return json as Ref;
}

function create(url: string, who: Member, collection: string, record: Record<string, unknown>) {
  return call(url, who, "createRecord", {
    collection,
    record: { $type: collection, createdAt: new Date().toISOString(), ...record },
  });
}

function remove(url: string, who: Member, uri: string) {
  const [, , , collection, rkey] = uri.split("/");
  return call(url, who, "deleteRecord", { collection, rkey });
}

/**
 * Each member writes {@link WRITES_PER_MEMBER} records: posts, likes and reposts of everyone's
 * posts, follows and unfollows, deletes of their own posts and likes, profile updates.
 */
async function writeMix(url: string, members: Member[]): Promise<void> {
  const posts: Ref[] = [];
  await Promise.all(members.map(async (me, m) => {
    const mine: Ref[] = [];
    const likes: string[] = [];
    const follows = new Map<string, string>();
    for (let k = 0; k < WRITES_PER_MEMBER; k++) {
      const target = posts[(k * 7 + m) % Math.max(1, posts.length)];
      const other = members[(m + 1 + (k % 2)) % members.length];
      switch (target === undefined ? 0 : k % 6) {
        case 0: {
          const ref = await create(url, me, COLLECTION_POST, { text: `post ${m}.${k}` });
          mine.push(ref);
          posts.push(ref);
          break;
        }
        case 1:
          likes.push((await create(url, me, COLLECTION_LIKE, { subject: target })).uri);
          break;
        case 2:
          await create(url, me, COLLECTION_REPOST, { subject: target });
          break;
        case 3: {
          const followed = follows.get(other.did);
          if (followed === undefined) {
            const ref = await create(url, me, COLLECTION_FOLLOW, { subject: other.did });
            follows.set(other.did, ref.uri);
          } else {
            await remove(url, me, followed);
            follows.delete(other.did);
          }
          break;
        }
        case 4:
          if (k % 4 === 0 && likes.length > 0) await remove(url, me, likes.shift()!);
          else if (mine.length > 2) await remove(url, me, mine.shift()!.uri);
          else await create(url, me, COLLECTION_POST, { text: `post ${m}.${k}`, langs: ["en"] });
          break;
        default:
          await call(url, me, "putRecord", {
            collection: COLLECTION_PROFILE,
            rkey: "self",
            record: { $type: COLLECTION_PROFILE, displayName: `Member ${m} (${k})` },
          });
      }
    }
  }));
}

/** A consumer process and the lines of its standard error. */
interface ConsumerProcess {
  readonly child: Deno.ChildProcess;
  readonly lines: string[];
  /** Resolves with the first line (already written or to come) matching `pattern`. */
  line(pattern: RegExp, timeoutMs?: number): Promise<string>;
  /** Resolves once standard error is closed. */
  readonly closed: Promise<void>;
}

/** Starts `appview/main.ts consumer:local` as `deno task consumer:local` does. */
function spawnConsumer(databaseUrl: string, pdsUrl: string, dataDir: string): ConsumerProcess {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "--quiet", "-P=consumer", "appview/main.ts", "consumer:local"],
    cwd: new URL(".", REPO_ROOT).pathname,
    env: {
      ...baseEnv(),
      DATA_DIR: dataDir,
      APPVIEW_DATABASE_URL: databaseUrl,
      PDS_INTERNAL_URL: pdsUrl,
      LOG_LEVEL: "info",
    },
    clearEnv: true,
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  const lines: string[] = [];
  const closed = (async () => {
    let rest = "";
    for await (const chunk of child.stderr.pipeThrough(new TextDecoderStream())) {
      const parts = (rest + chunk).split("\n");
      rest = parts.pop()!;
      lines.push(...parts);
    }
    if (rest !== "") lines.push(rest);
  })();
  return {
    child,
    lines,
    closed,
    line: (pattern, timeoutMs = 20_000) =>
      waitFor(() => lines.find((l) => pattern.test(l)) ?? null, {
        timeoutMs,
        message: `a line matching ${pattern} in:\n${lines.join("\n")}`,
      }),
  };
}

async function cursorOf(sql: PgSql): Promise<number | null> {
  const [row] = await sql`SELECT value FROM cursors WHERE name = 'local_seq'`;
  return row === undefined ? null : row.value as number;
}

/** Waits until the local cursor is at least `seq`; returns it. */
function cursorReaches(sql: PgSql, seq: number, message: string): Promise<number> {
  return waitFor(async () => {
    const c = await cursorOf(sql);
    return c !== null && c >= seq ? c : null;
  }, { timeoutMs: 30_000, message });
}

/** How many sessions hold a consumer lock on the database of `sql` (`db/pg/lease.ts`). */
async function consumerLocks(sql: PgSql): Promise<number> {
  const [{ held }] = await sql`SELECT count(*)::integer AS held FROM pg_locks
    WHERE locktype = 'advisory' AND granted AND classid::bigint = ${PG_LOCK_CONSUMERS}
      AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`;
  return held as number;
}

/** Stream bookkeeping, and when rows were indexed or attempted: not the index's content. */
const EXCLUDED = ["consumer_status", "schema_migrations", "backfill_queue", "backfill_status"];
const OMITTED = ["indexed_at", "updated_at", "handle_attempted_at"];

async function indexContent(sql: PgSql): Promise<Dump> {
  const dump = await dumpPgIndex(sql);
  const out: Dump = {};
  for (const [table, rows] of Object.entries(dump)) {
    if (EXCLUDED.includes(table)) continue;
    const kept = rows.map((row) =>
      Object.fromEntries(Object.entries(row).filter(([k]) => !OMITTED.includes(k)))
    );
    out[table] = kept.sort((a, b) => {
      const x = JSON.stringify(a);
      const y = JSON.stringify(b);
      return x < y ? -1 : x > y ? 1 : 0;
    });
  }
  return out;
}

pgTest(
  "PostgreSQL: a consumer process killed with SIGKILL while a second waits for its lock; the second takes over and the tables equal an uninterrupted run's",
  async () => {
    await using dir = await makeTempDir();
    await using pds = await startTestServer();
    const takeoverUrl = await freshPgDatabase();
    const referenceUrl = await freshPgDatabase();
    const takeover = await openPgIndex(takeoverUrl, { max: 2 });
    const reference = await openPgIndex(referenceUrl, { max: 2 });
    const children: ConsumerProcess[] = [];
    try {
      // The first consumer, and the uninterrupted one on the reference index, from the start.
      const first = spawnConsumer(takeoverUrl, pds.url, dir.path);
      const alone = spawnConsumer(referenceUrl, pds.url, dir.path);
      children.push(first, alone);
      for (const c of [first, alone]) await c.line(/Stream connected/);
      // Sign-ups while both are live: each new account's #sync frame names the commit the stream
      // just gave, done without a fetch. (Replayed later, it would prompt a backfill whose snapshot
      // depends on when it is fetched, docs/behaviour.md 6.2 rule 8: not comparable.)
      const members = await Promise.all(
        ["alice", "bob", "carol"].map((name) => signUp(pds.url, `${name}.test`)),
      );
      const joined = await readHeadSeq(pds.ctx.kv);
      for (const sql of [takeover, reference]) {
        await cursorReaches(sql, joined, "the sign-ups are applied");
        await waitFor(async () => (await sql`SELECT did FROM backfill_queue`).length === 0);
      }

      const second = spawnConsumer(takeoverUrl, pds.url, dir.path);
      children.push(second);
      const waiting = JSON.parse(await second.line(/Waiting for the consumer lock/));
      assert.equal(waiting.holder.applicationName, "social-index consumer:local");

      const writing = writeMix(pds.url, members);
      writing.catch(() => {});
      // Mid-stream: the members are still writing.
      const before = await cursorReaches(takeover, joined + 100, "the first consumer applies");
      assert.ok(!second.lines.some((l) => /Consumer lock taken/.test(l)), "the second waited");
      assert.equal(await consumerLocks(takeover), 1);
      // The server finishes a commit the dead process had sent, then ends its session, which
      // releases its lock (its writes all go out on that session, db/pg/lease.ts): only then is
      // the stored cursor final. The second is paused across the kill (SIGSTOP), so that the
      // cursor is read after the first's session ended and before the second can take the lock
      // and write.
      second.child.kill("SIGSTOP");
      first.child.kill("SIGKILL");
      assert.equal((await first.child.status).signal, "SIGKILL");
      await first.closed;
      await waitFor(async () => await consumerLocks(takeover) === 0, {
        message: "the killed process's session ended",
      });
      const killedAt = (await cursorOf(takeover))!;
      assert.ok(killedAt >= before, `cursor ${killedAt} after the kill`);
      second.child.kill("SIGCONT");

      const taken = JSON.parse(await second.line(/Consumer lock taken/));
      assert.equal(taken.consumer, "local");
      const resumed = JSON.parse(await second.line(/Stream connected/));
      assert.equal(resumed.cursor, killedAt);
      await writing;
      const head = await readHeadSeq(pds.ctx.kv);
      assert.ok(killedAt < head, `killed at ${killedAt} of ${head}`);
      await cursorReaches(takeover, head, "the second consumer catches up");
      await cursorReaches(reference, head, "the uninterrupted consumer catches up");
      alone.child.kill("SIGTERM");
      assert.equal((await alone.child.status).code, 0, alone.lines.join("\n"));

      const expected = await indexContent(reference);
      const actual = await indexContent(takeover);
      assert.ok(expected.posts.length > 30, `${expected.posts.length} posts`);
      assert.ok(expected.likes.length > 20, `${expected.likes.length} likes`);
      assert.ok(
        expected.notifications.length > 50,
        `${expected.notifications.length} notifications`,
      );
      for (const table of Object.keys(expected)) {
        assert.deepEqual(actual[table], expected[table], `table ${table}`);
      }
      assert.deepEqual(Object.keys(actual).sort(), Object.keys(expected).sort());
      for (const sql of [takeover, reference]) {
        assert.equal((await sql`SELECT did FROM backfill_queue`).length, 0, "no backfill pending");
      }

      // SIGTERM: the second stops cleanly and releases the lock; its row says so.
      second.child.kill("SIGTERM");
      const stopped = await second.child.status;
      await second.closed;
      assert.equal(stopped.code, 0, second.lines.join("\n"));
      const [status] =
        await takeover`SELECT state, cursor FROM consumer_status WHERE name = 'local'`;
      assert.deepEqual({ ...status }, { state: "disabled", cursor: head });
      const [{ held }] = await takeover`SELECT count(*) AS held FROM pg_locks
      WHERE locktype = 'advisory' AND classid::bigint = ${0x534f4343}`;
      assert.equal(held, 0);
    } finally {
      for (const c of children) {
        try {
          c.child.kill("SIGKILL");
        } catch { /* already ended */ }
        await c.child.status;
        await c.closed;
      }
      await takeover.end();
      await reference.end();
    }
  },
);

stopPgClusterAfterTests();
