// Push of every commit to the index's `/internal/ingest-commit` (spec 5.3 APPVIEW_INGEST_SECRET,
// 6.2 rule 5, 6.4; docs/behaviour.md 10.7 "Push ingest"), against a real HTTP server as the index.

import assert from "node:assert/strict";
import { formatCid } from "../../shared/cid.ts";
import { COLLECTION_POST, COLLECTION_PROFILE } from "../../shared/nsid.ts";
import { opsFromPush } from "../../shared/ops.ts";
import { serveOnPort0, waitFor } from "../../runtime/_test_helpers.ts";
import { signUp, startTestServer, writePosts, xrpcPost } from "../_test_helpers.ts";
import { readHeadSeq } from "./event_log.ts";
import { pushBodyOf } from "./push.ts";
import type { SequencedCommit } from "./sequencer.ts";

const SECRET = "ingest-secret-for-tests";

interface Received {
  method: string;
  path: string;
  auth: string | null;
  contentType: string | null;
  body: Record<string, unknown>;
}

function fakeIndex(status: () => number = () => 200) {
  const received: Received[] = [];
  const server = serveOnPort0(async (req) => {
    received.push({
      method: req.method,
      path: new URL(req.url).pathname,
      auth: req.headers.get("authorization"),
      contentType: req.headers.get("content-type"),
      body: await req.json(),
    });
    return Response.json({}, { status: status() });
  });
  return { server, received };
}

function warnings(lines: string[], msg: string): Record<string, unknown>[] {
  return lines.map((l) => JSON.parse(l)).filter((l) => l.msg === msg);
}

const FAILED = "push to the index failed; the local stream still delivers commits";
const RECOVERED = "push to the index recovered";

Deno.test("every commit is pushed to the index with the secret, the docs/behaviour.md 10.7 body and the previous rev as since", async () => {
  const index = fakeIndex();
  await using _index = index.server;
  await using s = await startTestServer({
    env: { APPVIEW_INTERNAL_URL: index.server.url, APPVIEW_INGEST_SECRET: SECRET },
  });
  const w = await signUp(s.url, "pushed.test");
  const written = await writePosts(s.url, [w], 20, { prefix: "pushed" });
  const [first] = written.values();
  const rkey = first.uri.split("/").at(-1)!;
  const del = await xrpcPost(s.url, "com.atproto.repo.deleteRecord", {
    repo: w.did,
    collection: COLLECTION_POST,
    rkey,
  }, { authorization: `Bearer ${w.accessJwt}` });
  assert.equal(del.status, 200);
  const deleted = (await del.json()).commit;
  const head = await readHeadSeq(s.ctx.kv);
  // #identity, #account, the initial commit, #sync, 20 creates, 1 delete; only commits are pushed.
  assert.equal(head, 25);
  await waitFor(() => index.received.length === 22, { message: "every commit pushed" });

  for (const r of index.received) {
    assert.equal(r.method, "POST");
    assert.equal(r.path, "/internal/ingest-commit");
    assert.equal(r.auth, `Bearer ${SECRET}`);
    assert.equal(r.contentType, "application/json");
    assert.equal(r.body.did, w.did);
    assert.equal(r.body.handle, "pushed.test");
    assert.ok(opsFromPush(r.body).length >= 1); // the index's own strict decoder accepts it
  }
  // One repository's commits arrive in commit order.
  const revs = index.received.map((r) => r.body.rev as string);
  assert.deepEqual(revs, [...revs].sort());
  assert.deepEqual(index.received[0].body.ops, []);
  // Each body names the previous commit's rev (`since`), null for the first: the index applies a
  // push only when it is exactly the next commit.
  assert.deepEqual(
    index.received.map((r) => r.body.since),
    [null, ...revs.slice(0, -1)],
  );

  const byCommit = new Map(index.received.map((r) => [r.body.commit as string, r.body]));
  for (const rec of written.values()) {
    const body = byCommit.get(rec.commitCid);
    assert.ok(body, `push of ${rec.uri}`);
    assert.equal(body.rev, rec.rev);
    const [op] = body.ops as Record<string, unknown>[];
    const record = op.record as Record<string, unknown>;
    assert.deepEqual(op, {
      action: "create",
      collection: COLLECTION_POST,
      rkey: rec.uri.split("/").at(-1),
      cid: rec.cid,
      record: { $type: COLLECTION_POST, text: rec.text, createdAt: record.createdAt },
    });
  }
  assert.deepEqual(byCommit.get(deleted.cid)?.ops, [
    { action: "delete", collection: COLLECTION_POST, rkey, cid: null, record: null },
  ]);
});

Deno.test("with the index answering errors, writes succeed, the failure is logged once and the recovery once", async () => {
  let status = 503;
  const index = fakeIndex(() => status);
  await using _index = index.server;
  await using s = await startTestServer({
    env: { APPVIEW_INTERNAL_URL: index.server.url, APPVIEW_INGEST_SECRET: SECRET },
  });
  const w = await signUp(s.url, "outage.test");
  const written = await writePosts(s.url, [w], 10, { prefix: "during outage" });
  assert.equal(written.size, 10);
  const push = s.ctx.stream!.push!;
  await waitFor(() => index.received.length === 11, { message: "11 attempts" });
  await push.flush();
  const failed = warnings(s.lines, FAILED);
  assert.equal(failed.length, 1);
  assert.equal(failed[0].level, "warn");
  assert.equal(failed[0].error, "HTTP 503");
  assert.equal(failed[0].url, `${index.server.url}/internal/ingest-commit`);
  assert.ok(!s.lines.some((l) => l.includes(SECRET)), "the secret is never logged");

  status = 200;
  await writePosts(s.url, [w], 2, { prefix: "after outage" });
  await waitFor(() => index.received.length === 13, { message: "13 attempts" });
  await push.flush();
  assert.equal(warnings(s.lines, FAILED).length, 1);
  const recovered = warnings(s.lines, RECOVERED);
  assert.equal(recovered.length, 1);
  assert.equal(recovered[0].failedCommits, 11);
  assert.equal(push.pushed, 2);
});

Deno.test("with the index down (connection refused), writes succeed and the failure is logged once", async () => {
  const gone = serveOnPort0(() => new Response());
  const url = gone.url;
  await gone.close();
  await using s = await startTestServer({
    env: { APPVIEW_INTERNAL_URL: url, APPVIEW_INGEST_SECRET: SECRET },
  });
  const w = await signUp(s.url, "refused.test");
  const written = await writePosts(s.url, [w], 10, { prefix: "refused" });
  assert.equal(written.size, 10);
  await s.ctx.stream!.push!.flush();
  assert.equal(warnings(s.lines, FAILED).length, 1);
  assert.equal(warnings(s.lines, RECOVERED).length, 0);
});

Deno.test("APPVIEW_INTERNAL_URL=off disables the push", async () => {
  await using s = await startTestServer({ env: { APPVIEW_INTERNAL_URL: "off" } });
  assert.equal(s.ctx.stream!.push, null);
});

Deno.test("the push body built from the writer's records equals the one read back from the commit's CAR (links, blobs, replies)", async () => {
  await using s = await startTestServer();
  const w = await signUp(s.url, "records.test");
  const auth = { authorization: `Bearer ${w.accessJwt}` };
  const captured: SequencedCommit[] = [];
  let blobLink = "";
  const stop = s.ctx.sequencer.onCommit((c) => captured.push(c));
  try {
    const upload = await fetch(`${s.url}/xrpc/com.atproto.repo.uploadBlob`, {
      method: "POST",
      headers: { ...auth, "content-type": "image/png" },
      body: new Uint8Array([137, 80, 78, 71, 1, 2, 3]),
    });
    assert.equal(upload.status, 200);
    const { blob } = await upload.json();
    blobLink = blob.ref.$link;
    const profile = await xrpcPost(s.url, "com.atproto.repo.putRecord", {
      repo: w.did,
      collection: COLLECTION_PROFILE,
      rkey: "self",
      record: { displayName: "Records", avatar: blob },
    }, auth);
    assert.equal(profile.status, 200);
    await profile.body?.cancel();
    const parent = await xrpcPost(s.url, "com.atproto.repo.createRecord", {
      repo: w.did,
      collection: COLLECTION_POST,
      record: { text: "parent", createdAt: "2026-11-21T10:00:00.000Z" },
    }, auth);
    const ref = await parent.json();
    const reply = await xrpcPost(s.url, "com.atproto.repo.createRecord", {
      repo: w.did,
      collection: COLLECTION_POST,
      record: {
        text: "reply",
        createdAt: "2026-11-21T10:00:01.000Z",
        reply: { root: { uri: ref.uri, cid: ref.cid }, parent: { uri: ref.uri, cid: ref.cid } },
      },
    }, auth);
    assert.equal(reply.status, 200);
    await reply.body?.cancel();
  } finally {
    stop();
  }
  assert.equal(captured.length, 3);
  for (const c of captured) {
    assert.ok(c.records !== undefined && c.records.size === 1, `records of seq ${c.seq}`);
    // Keyed by the op's CID string, so pushBodyOf takes the record from here, not the CAR.
    assert.ok(c.records.has(formatCid(c.event.ops[0].cid!)));
    const fromRecords = pushBodyOf(c.event, "records.test", c.records);
    // Without the records: parsed from the CAR of the event as stored in KV.
    const [stored] = await s.ctx.sequencer.readEvents(c.seq - 1, 1);
    assert.deepEqual(fromRecords, pushBodyOf(stored.event, "records.test"));
  }
  const profile = pushBodyOf(captured[0].event, null, captured[0].records).ops[0].record;
  assert.deepEqual(profile, {
    $type: COLLECTION_PROFILE,
    displayName: "Records",
    avatar: { $type: "blob", ref: { $link: blobLink }, mimeType: "image/png", size: 7 },
  });
});
