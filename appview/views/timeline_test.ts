/**
 * Home timeline correctness (spec 4.2 rule 1) on random data: 500 users, random follows, 20,000
 * posts with many ties on `indexed_at`. For many viewers and page positions, every strategy
 * (the per-followee threshold merge, the global time-index walk, unbounded or bounded so tightly
 * that the merge completes most pages below the walk, and the automatic choice) answers exactly
 * the brute-force global sort of the followees' posts by (`indexed_at` desc, `uri` desc).
 *
 * On both backends, each driving its own timeline view (SQLite's `TimelineView`, PostgreSQL's
 * `PgTimelineView`) with every strategy; `views/pg/parity_test.ts` also compares the two.
 */

import assert from "node:assert/strict";
import type { IndexOp } from "../../shared/ops.ts";
import type { PgIndexStore } from "../db/pg/store.ts";
import { didOf, followOp, postOp } from "../_fixtures.ts";
import { endBackendTests, forEachBackend, openBackendIndex } from "../_test_helpers.ts";
import type { TextKey } from "./cursor.ts";
import { PgTimelineView } from "./pg/timeline.ts";
import { PostHydrator } from "./posts.ts";
import {
  PER_FOLLOWEE_MAX_FOLLOWS,
  type TimelinePage,
  type TimelineStrategy,
  TimelineView,
} from "./timeline.ts";

/** Deterministic PRNG (mulberry32). */
function rng(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const USERS = 500;
const POSTS = 20_000;

/** A timeline view of either backend (SQLite's answers at once, PostgreSQL's in a Promise). */
interface HomeView {
  home(
    viewer: string,
    opts: { limit: number; cursor: TextKey | null; strategy: TimelineStrategy },
  ): TimelinePage | Promise<TimelinePage>;
}

forEachBackend(
  "timeline strategies equal a brute-force global sort on random data",
  async (backend) => {
    const random = rng(7);
    // The clock has its own sequence, so both backends see the same world whatever the number of
    // clock readings of their writers.
    const clockRandom = rng(11);
    let ms = Date.parse("2024-06-01T00:00:00.000Z");
    // The clock moves 1 ms on about one reading in ten: many posts share an indexed_at.
    await using ix = await openBackendIndex(backend, {
      now: () => new Date(clockRandom() < 0.1 ? ++ms : ms),
      batchSize: 10_000,
    });
    {
      const users = Array.from({ length: USERS }, (_, i) => didOf(`u${i}`));
      const follows = new Map<string, Set<string>>();
      const ops: IndexOp[] = [];
      users.forEach((u, i) => {
        // Mostly small follow sets, some large ones (above the per-followee threshold).
        const n = i % 10 === 0 ? 150 + Math.floor(random() * 300) : Math.floor(random() * 40);
        const set = new Set<string>();
        while (set.size < n) set.add(users[Math.floor(random() * USERS)]);
        set.delete(u);
        follows.set(u, set);
        [...set].forEach((s, j) => ops.push(followOp(u, `3kf${String(j).padStart(10, "0")}`, s)));
      });
      // Skewed activity: a few authors write most posts.
      for (let i = 0; i < POSTS; i++) {
        const author = users[Math.floor(USERS * random() ** 2)];
        ops.push(postOp(author, `3kp${String(i).padStart(10, "0")}`, `post ${i}`));
      }
      const result = await ix.apply(...ops);
      assert.equal(result.skipped, 0);

      const all = await ix.rows("SELECT id, did, indexed_at, uri FROM posts") as unknown as {
        id: number;
        did: string;
        indexed_at: string;
        uri: string;
      }[];
      assert.equal(all.length, POSTS);
      all.sort((a, b) =>
        a.indexed_at < b.indexed_at
          ? 1
          : a.indexed_at > b.indexed_at
          ? -1
          : a.uri < b.uri
          ? 1
          : a.uri > b.uri
          ? -1
          : 0
      );
      const ties = all.length - new Set(all.map((p) => p.indexed_at)).size;
      assert.ok(ties > POSTS / 2, "the data has many indexed_at ties");

      const view: (opts?: { scanRowsPerResult: number }) => HomeView = backend === "sqlite"
        ? (opts) => new TimelineView(ix.db, new PostHydrator(ix.db), opts)
        : (opts) => new PgTimelineView((ix.store as PgIndexStore).sql, opts);
      const views: [string, HomeView, TimelineStrategy][] = [
        ["per_followee", view(), "per_followee"],
        ["global_scan (unbounded)", view({ scanRowsPerResult: 1e9 }), "global_scan"],
        ["global_scan (bounded, tiny)", view({ scanRowsPerResult: 2 }), "global_scan"],
        ["auto", view(), "auto"],
      ];
      let checkedPages = 0;
      let largeViewers = 0;
      for (let v = 0; v < USERS; v += 7) {
        const viewer = users[v];
        const set = follows.get(viewer)!;
        if (set.size === 0) continue;
        if (set.size > PER_FOLLOWEE_MAX_FOLLOWS) largeViewers++;
        const expected = all.filter((p) => set.has(p.did)).map((p) => p.uri);
        const keyOf = (uri: string): TextKey => {
          const p = all.find((x) => x.uri === uri)!;
          return [p.indexed_at, p.uri];
        };
        // Page positions: the top, random positions, and the very end.
        const starts = [0, expected.length];
        for (let k = 0; k < 3; k++) starts.push(Math.floor(random() * expected.length));
        for (const start of starts) {
          const limit = 1 + Math.floor(random() * 60);
          const cursor = start === 0 ? null : keyOf(expected[start - 1]);
          const want = expected.slice(start, start + limit);
          const wantNext = start + limit < expected.length ? keyOf(want[want.length - 1]) : null;
          for (const [name, view, strategy] of views) {
            const page = await view.home(viewer, { limit, cursor, strategy });
            assert.deepEqual(page.rows.map((r) => r.uri), want, `${name} ${viewer} @${start}`);
            assert.deepEqual(page.next, wantNext, `${name} next ${viewer} @${start}`);
            checkedPages++;
          }
        }
      }
      assert.ok(largeViewers >= 5, "viewers above the per-followee threshold are covered");
      assert.ok(checkedPages > 1000);
    }
  },
);

endBackendTests();
