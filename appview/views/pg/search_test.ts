/**
 * PostgreSQL search's ways to the newest matches (search.ts) on ids past 2^31, as a long-lived
 * index reaches: every way gives the same pages, newest first, and the window's and walk's id and
 * row-count parameters take bigints. Answers are checked against the expected posts, not only
 * against each other.
 *
 * @module
 */

import assert from "node:assert/strict";
import { didOf, postOp } from "../../_fixtures.ts";
import { openFreshPgIndex, pgTest, stopPgClusterAfterTests } from "../../db/pg/_test_helpers.ts";
import { PgIndexWriter } from "../../ingest/pg/pg_writer.ts";
import { silentLogger } from "../../../shared/log.ts";
import { PgSearchView, type SearchWay } from "./search.ts";

const PAST_INT32 = 3_000_000_000;

pgTest("every way pages the same matches, newest first, on ids past 2^31", async () => {
  const sql = await openFreshPgIndex({ max: 2 });
  try {
    await sql`SELECT setval(pg_get_serial_sequence('posts', 'id'), ${PAST_INT32})`;
    const writer = new PgIndexWriter(sql, { log: silentLogger });
    const alice = didOf("alice");
    // 90 posts: every third has "kiwi", every tenth "fig" too.
    const ops = Array.from({ length: 90 }, (_, i) => {
      const words = ["post", String(i)];
      if (i % 3 === 0) words.push("kiwi");
      if (i % 10 === 0) words.push("fig");
      return postOp(alice, `3kpost${String(i).padStart(7, "0")}`, words.join(" "));
    });
    await writer.applyOps(ops);
    const [{ low }] = await sql`SELECT min(id) AS low FROM posts`;
    assert.equal(Number(low), PAST_INT32 + 1);
    const expect = (every: number) =>
      Array.from({ length: 90 }, (_, i) => i).filter((i) => i % every === 0).reverse().map((i) =>
        `at://${alice}/app.social.feed.post/3kpost${String(i).padStart(7, "0")}`
      );
    const ways: SearchWay[] = ["auto", "walk", "window", "index"];
    for (const way of ways) {
      for (const firstWalk of [1, 2, 2048]) {
        const view = new PgSearchView(sql, { firstWalk, way });
        for (const [q, every] of [["kiwi", 3], ["fig kiwi", 30], ["fig", 10]] as const) {
          const uris: string[] = [];
          let before: number | null = null;
          for (let page = 0; page < 10; page++) {
            const got = await view.search(q, { limit: 4, before });
            uris.push(...got.rows.map((r) => r.uri));
            if (got.next === null) break;
            assert.ok(got.next > PAST_INT32, `cursor ${got.next}`);
            before = got.next;
          }
          assert.deepEqual(uris, expect(every), `${q} by ${way}, first walk ${firstWalk}`);
        }
      }
    }
  } finally {
    await sql.end();
  }
});

stopPgClusterAfterTests();
