/**
 * Test harness of the query API: a real SQLite index (`:memory:`), the real write path with a
 * controllable clock, and the real app answering `app.request()`.
 *
 * @module
 */

import type { DatabaseSync } from "node:sqlite";
import type { Hono } from "hono";
import assert from "node:assert/strict";
import type { IndexOp } from "../../shared/ops.ts";
import { silentLogger } from "../../shared/log.ts";
import { createAppviewApp } from "../app.ts";
import type { TokenVerifier } from "../auth/verifier.ts";
import { loadAppviewConfig } from "../config.ts";
import type { AppviewContext } from "../context.ts";
import { openIndexDb } from "../db/open.ts";
import { IndexWriter } from "../ingest/apply_ops.ts";

/** The clock of the harness: `ms` moves by `stepMs` at every reading, and by `tick`. */
export class TestClock {
  constructor(public ms: number, public stepMs = 0) {}
  readonly now = (): Date => {
    const d = new Date(this.ms);
    this.ms += this.stepMs;
    return d;
  };
  tick(ms = 1): void {
    this.ms += ms;
  }
}

/** An index with its app. */
export interface QueryHarness extends Disposable {
  readonly db: DatabaseSync;
  readonly writer: IndexWriter;
  readonly clock: TestClock;
  readonly app: Hono;
  /** Applies ops through the write path; fails the test when any op is skipped. */
  apply(...ops: IndexOp[]): void;
  /** Sends a request to the app; returns the status, headers and parsed JSON body. */
  request(
    path: string,
    init?: RequestInit,
    // deno-lint-ignore no-explicit-any
  ): Promise<{ status: number; headers: Headers; body: any }>;
}

/** Opens a harness; by default authentication is off (`APPVIEW_AUTH_REQUIRED=false`). */
export function openQueryHarness(
  opts: {
    env?: Record<string, string>;
    verifier?: TokenVerifier | null;
    stepMs?: number;
    batchSize?: number;
  } = {},
): QueryHarness {
  const config = loadAppviewConfig({
    APPVIEW_AUTH_REQUIRED: "false",
    APPVIEW_PUBLIC_URL: "http://localhost:3000",
    ...opts.env,
  });
  const db = openIndexDb(":memory:");
  const clock = new TestClock(Date.parse("2024-06-01T00:00:00.000Z"), opts.stepMs ?? 0);
  const writer = new IndexWriter(db, { now: clock.now, batchSize: opts.batchSize ?? 5_000 });
  const ctx: AppviewContext = { config, db, writer, log: silentLogger, now: clock.now };
  const app = createAppviewApp(ctx, { verifier: opts.verifier ?? null });
  return {
    db,
    writer,
    clock,
    app,
    apply(...ops) {
      const result = writer.applyOps(ops);
      assert.equal(result.skipped, 0, "an op was skipped");
    },
    async request(path, init) {
      const res = await app.request(path, init);
      const text = await res.text();
      return {
        status: res.status,
        headers: res.headers,
        body: text === "" ? null : JSON.parse(text),
      };
    },
    [Symbol.dispose]: () => db.close(),
  };
}

/** Member names of a Post, in the order of spec 2.1. */
export const POST_KEYS = [
  "uri",
  "did",
  "handle",
  "rkey",
  "collection",
  "text",
  "cid",
  "parent_uri",
  "root_uri",
  "embed",
  "langs",
  "created_at",
  "like_count",
  "repost_count",
  "avatar_cid",
];

/** Asserts the spec 2.1 shape of a Post: every member, in order, with its type. */
export function assertPostShape(post: Record<string, unknown>): void {
  assert.deepEqual(Object.keys(post), POST_KEYS);
  for (const key of ["uri", "did", "handle", "rkey", "collection", "text", "cid", "created_at"]) {
    assert.equal(typeof post[key], "string", key);
  }
  assert.ok(!(post.handle as string).startsWith("@"), "handle has no leading @");
  for (const key of ["parent_uri", "root_uri", "avatar_cid"]) {
    assert.ok(post[key] === null || typeof post[key] === "string", key);
  }
  assert.ok(
    post.embed === null ||
      (typeof post.embed === "object" && typeof (post.embed as { $type: unknown }).$type ===
          "string"),
    "embed",
  );
  assert.ok(Array.isArray(post.langs) && post.langs.every((l) => typeof l === "string"), "langs");
  assert.ok(Number.isInteger(post.like_count), "like_count");
  assert.ok(Number.isInteger(post.repost_count), "repost_count");
}
