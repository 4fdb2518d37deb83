import assert from "node:assert/strict";
import { COLLECTION_POST } from "../../shared/nsid.ts";
import { didOf, postOp, uriOf } from "../_fixtures.ts";
import { createViews } from "../views/views.ts";
import { openIndexDb } from "./open.ts";
import { asyncMethods, openSqliteIndexStore } from "./sqlite_store.ts";

const ALICE = didOf("alice");

Deno.test("the SQLite store runs each call at once: a write is committed before its Promise is awaited", async () => {
  const store = openSqliteIndexStore(openIndexDb(":memory:"));
  try {
    const applying = store.writer.applyOps([postOp(ALICE, "3kalicepost12", "hello")]);
    // No await yet: the transaction ran inside the call.
    assert.equal(store.db.prepare("SELECT count(*) AS n FROM posts").get()?.n, 1);
    assert.deepEqual(await applying, { applied: 1, skipped: 0 });
    const row = await store.views.posts.byUri(uriOf(ALICE, COLLECTION_POST, "3kalicepost12"));
    assert.equal(row?.text, "hello");
  } finally {
    await store.close();
  }
});

Deno.test("a call that fails rejects its Promise rather than throwing", async () => {
  const store = openSqliteIndexStore(openIndexDb(":memory:"));
  try {
    const commit = { did: ALICE, rev: "3kaaaaaaaaaa2", mode: "newer" as const };
    let result: Promise<unknown> | undefined;
    assert.doesNotThrow(() => {
      result = store.writer.applyOps([], { commit, commits: [] });
    });
    await assert.rejects(result!, {
      name: "RangeError",
      message: "Options commit and commits cannot be given together",
    });
    await assert.rejects(asyncMethods(new Thrower()).fail("x"), { message: "failed: x" });
  } finally {
    await store.close();
  }
});

Deno.test("store.views offers every method of every view, and nothing else", async () => {
  const store = openSqliteIndexStore(openIndexDb(":memory:"));
  try {
    const views = createViews(store.db);
    assert.deepEqual(Object.keys(store.views).sort(), Object.keys(views).sort());
    for (const [name, view] of Object.entries(views)) {
      const methods = Object.getOwnPropertyNames(Object.getPrototypeOf(view))
        .filter((m) => m !== "constructor").sort();
      const offered = store.views[name as keyof typeof views];
      assert.deepEqual(Object.keys(offered).sort(), methods, name);
    }
  } finally {
    await store.close();
  }
});

Deno.test("closing the store closes its database, and a second close does nothing", async () => {
  const store = openSqliteIndexStore(openIndexDb(":memory:"));
  await store.close();
  assert.equal(store.db.isOpen, false);
  await store.close();
});

class Thrower {
  fail(what: string): never {
    throw new Error(`failed: ${what}`);
  }
}
