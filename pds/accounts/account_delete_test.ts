// The deletion marker (docs/behaviour.md 4.1 rule 13): written by the first step, noting each
// step done, gone with the last key; two runs finishing the same deletion at once do no harm.
// The killed-process cases are in tests/account_delete_resume_test.ts.

import assert from "node:assert/strict";
import { createTestApp, signUp, xrpcPost } from "../_test_helpers.ts";
import { COLLECTION_POST } from "../../shared/nsid.ts";
import { accountDeletionKey } from "../store/keys.ts";
import {
  type AccountDeletion,
  finishAccountDeletion,
  finishAccountDeletions,
  listAccountDeletions,
  purgeAccount,
} from "./account_delete.ts";

async function accountWithPosts(t: Awaited<ReturnType<typeof createTestApp>>, handle: string) {
  const session = await signUp(t.app, handle);
  for (let i = 0; i < 3; i++) {
    const res = await xrpcPost(t.app, "com.atproto.repo.createRecord", {
      repo: session.did,
      collection: COLLECTION_POST,
      record: { text: `post ${i}`, createdAt: "2024-05-01T12:00:00.000Z" },
    }, { authorization: `Bearer ${session.accessJwt}` });
    assert.equal(res.status, 200);
  }
  return session.did;
}

async function keysNaming(kv: Deno.Kv, did: string): Promise<number> {
  let n = 0;
  for await (const e of kv.list({ prefix: [] })) {
    if (e.key[0] === "seq_event" || e.key[0] === "invite_use") continue;
    const value = e.value as { did?: unknown } | null;
    if (e.key.includes(did) || value?.did === did) n++;
  }
  return n;
}

Deno.test("purgeAccount records each step in the marker and deletes it with the last key", async () => {
  await using t = await createTestApp();
  const did = await accountWithPosts(t, "bob.test");
  const seen: [string, string[] | null][] = [];
  const event = await purgeAccount(t.ctx.kv, did, Date.now(), {
    onStep: async (done) => {
      const marker = (await t.ctx.kv.get<AccountDeletion>(accountDeletionKey(did))).value;
      seen.push([done, marker?.remaining ?? null]);
    },
  });
  assert.equal(event?.status, "deleted");
  assert.deepEqual(seen, [
    ["account", ["credentials", "repository", "blobs", "sessions"]],
    ["credentials", ["repository", "blobs", "sessions"]],
    ["repository", ["blobs", "sessions"]],
    ["blobs", ["sessions"]],
    ["sessions", []],
  ]);
  assert.equal(await keysNaming(t.ctx.kv, did), 0);
  assert.deepEqual(await listAccountDeletions(t.ctx.kv), []);
  assert.equal(await finishAccountDeletion(t.ctx.kv, did), null);
  assert.equal(await purgeAccount(t.ctx.kv, did, Date.now()), null);
});

Deno.test("runs finishing the same deletion at once all end with every key gone", async () => {
  await using t = await createTestApp();
  const kv = t.ctx.kv;
  const did = await accountWithPosts(t, "bob.test");
  const other = await accountWithPosts(t, "alice.test");
  const otherKeys = await keysNaming(kv, other);
  // The purge's own run, two operators' commands and the account host's task, all at once.
  const runs: Promise<unknown>[] = [];
  await purgeAccount(kv, did, Date.now(), {
    onStep: (done) => {
      if (done !== "account") return;
      runs.push(
        finishAccountDeletion(kv, did),
        finishAccountDeletion(kv, did),
        finishAccountDeletions(kv),
      );
    },
  });
  await Promise.all(runs);
  assert.equal(await keysNaming(kv, did), 0);
  assert.equal(await keysNaming(kv, other), otherKeys);
  assert.deepEqual(await listAccountDeletions(kv), []);
});
