// Request inputs of com.atproto.repo.* and friends: deleteRecord by record URI (spec 4.1) and
// oversized strings that would otherwise reach Deno KV keys (400, never 500).

import assert from "node:assert/strict";
import { COLLECTION_POST, EMBED_EXTERNAL, EMBED_RECORD_WITH_MEDIA } from "../../shared/nsid.ts";
import { createTestApp, signUp, xrpcGet, xrpcPost } from "../_test_helpers.ts";

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
const RKEY = "3kaaaaaaaaaa2";

async function putPost(
  app: Parameters<typeof xrpcPost>[0],
  session: { did: string; accessJwt: string },
): Promise<string> {
  const res = await xrpcPost(app, "com.atproto.repo.putRecord", {
    repo: session.did,
    collection: COLLECTION_POST,
    rkey: RKEY,
    record: { text: "hello", createdAt: "2024-05-01T12:00:00.000Z" },
  }, bearer(session.accessJwt));
  assert.equal(res.status, 200);
  return (await res.json()).uri;
}

async function exists(app: Parameters<typeof xrpcGet>[0], did: string): Promise<boolean> {
  const res = await xrpcGet(
    app,
    `com.atproto.repo.getRecord?repo=${did}&collection=${COLLECTION_POST}&rkey=${RKEY}`,
  );
  await res.body?.cancel();
  return res.status === 200;
}

Deno.test("deleteRecord accepts a record URI alone and deletes exactly that record", async () => {
  await using t = await createTestApp();
  const alice = await signUp(t.app, "alice.test");
  const uri = await putPost(t.app, alice);
  const res = await xrpcPost(
    t.app,
    "com.atproto.repo.deleteRecord",
    { uri },
    bearer(alice.accessJwt),
  );
  assert.equal(res.status, 200);
  assert.equal(typeof (await res.json()).commit.rev, "string");
  assert.equal(await exists(t.app, alice.did), false);
});

Deno.test("deleteRecord refuses a URI of another repo than repo and deletes nothing", async () => {
  await using t = await createTestApp();
  const alice = await signUp(t.app, "alice.test");
  const bob = await signUp(t.app, "bob.test");
  await putPost(t.app, alice);
  const bobUri = await putPost(t.app, bob);

  const mixed = await xrpcPost(
    t.app,
    "com.atproto.repo.deleteRecord",
    { repo: alice.did, uri: bobUri },
    bearer(alice.accessJwt),
  );
  assert.equal(mixed.status, 400);
  assert.deepEqual(await mixed.json(), {
    error: "InvalidRequest",
    message: `Member repo ${JSON.stringify(alice.did)} does not match member uri ${
      JSON.stringify(bobUri)
    }`,
  });

  const foreign = await xrpcPost(
    t.app,
    "com.atproto.repo.deleteRecord",
    { uri: bobUri },
    bearer(alice.accessJwt),
  );
  assert.equal(foreign.status, 403);
  assert.equal((await foreign.json()).error, "Forbidden");

  const otherKey = await xrpcPost(t.app, "com.atproto.repo.deleteRecord", {
    repo: alice.did,
    uri: `at://${alice.did}/${COLLECTION_POST}/${RKEY}`,
    rkey: "3kbbbbbbbbbb2",
  }, bearer(alice.accessJwt));
  assert.equal(otherKey.status, 400);
  assert.equal((await otherKey.json()).error, "InvalidRequest");

  assert.equal(await exists(t.app, alice.did), true);
  assert.equal(await exists(t.app, bob.did), true);

  // The handle and the DID of the same account agree.
  const byHandle = await xrpcPost(t.app, "com.atproto.repo.deleteRecord", {
    repo: "alice.test",
    uri: `at://${alice.did}/${COLLECTION_POST}/${RKEY}`,
  }, bearer(alice.accessJwt));
  assert.equal(byHandle.status, 200);
  await byHandle.body?.cancel();
  assert.equal(await exists(t.app, alice.did), false);
});

Deno.test("createAccount with a 3,000-character invite code answers exactly like an unknown code (spec 4.1 rule 5)", async () => {
  await using t = await createTestApp({ env: { PDS_INVITE_REQUIRED: "true" } });
  const bodies = [];
  for (const inviteCode of ["x".repeat(3000), "aaaaa-bbbbb-ccccc"]) {
    const res = await xrpcPost(t.app, "com.atproto.server.createAccount", {
      handle: "kate.test",
      password: "correct horse battery",
      inviteCode,
    });
    assert.equal(res.status, 400);
    bodies.push(await res.text());
  }
  assert.equal(bodies[0], bodies[1]);
  assert.deepEqual(JSON.parse(bodies[0]), {
    error: "InvalidInviteCode",
    message: "Invite code is invalid or has no uses left",
  });
});

Deno.test("oversized strings bound for KV keys answer 400 InvalidRequest naming the parameter, never 500", async () => {
  await using t = await createTestApp();
  const alice = await signUp(t.app, "alice.test");
  const longHandle = `${"a".repeat(5000)}.test`;
  const longDid = `did:plc:${"a".repeat(2030)}`;
  const longKey = "k".repeat(5000);
  const cases: [string, string][] = [
    [
      `com.atproto.repo.listRecords?repo=${alice.did}&collection=${COLLECTION_POST}&cursor=${longKey}`,
      `Invalid cursor: ${JSON.stringify("k".repeat(100) + "...")}`,
    ],
    [
      `com.atproto.repo.getRecord?repo=${longHandle}&collection=${COLLECTION_POST}&rkey=${RKEY}`,
      `Invalid repo: ${JSON.stringify("a".repeat(100) + "...")}`,
    ],
    [
      `com.atproto.repo.getRecord?repo=${longDid}&collection=${COLLECTION_POST}&rkey=${RKEY}`,
      `Invalid repo: ${JSON.stringify(longDid.slice(0, 100) + "...")}`,
    ],
    [
      `com.atproto.repo.getRecord?repo=${alice.did}&collection=${COLLECTION_POST}&rkey=${longKey}`,
      `Invalid rkey: ${JSON.stringify("k".repeat(100) + "...")}`,
    ],
    [
      `com.atproto.repo.describeRepo?repo=${longHandle}`,
      `Invalid repo: ${JSON.stringify("a".repeat(100) + "...")}`,
    ],
    [
      `com.atproto.sync.listRepos?cursor=${longDid}`,
      `Invalid cursor: ${JSON.stringify(longDid.slice(0, 100) + "...")}`,
    ],
    [
      `com.atproto.sync.getLatestCommit?did=${longDid}`,
      `Invalid did: ${JSON.stringify(longDid.slice(0, 100) + "...")}`,
    ],
    [
      `com.atproto.sync.getBlob?did=${alice.did}&cid=b${"a".repeat(5000)}`,
      `Invalid cid: ${JSON.stringify("b" + "a".repeat(99) + "...")}`,
    ],
    [
      `com.atproto.identity.resolveDid?did=${longDid}`,
      `Invalid did: ${JSON.stringify(longDid.slice(0, 100) + "...")}`,
    ],
  ];
  for (const [path, message] of cases) {
    const res = await xrpcGet(t.app, path);
    assert.equal(res.status, 400, path.slice(0, 60));
    assert.deepEqual(await res.json(), { error: "InvalidRequest", message }, path.slice(0, 60));
  }
  const write = await xrpcPost(t.app, "com.atproto.repo.createRecord", {
    repo: longHandle,
    collection: COLLECTION_POST,
    record: { text: "hi", createdAt: "2024-05-01T12:00:00.000Z" },
  }, bearer(alice.accessJwt));
  assert.equal(write.status, 400);
  assert.equal((await write.json()).error, "InvalidRequest");
  // Handle lookups and logins with oversized identifiers fail as usual, not with a 500.
  const handle = await xrpcGet(t.app, `com.atproto.identity.resolveHandle?handle=${longDid}`);
  assert.equal(handle.status, 400);
  assert.equal((await handle.json()).error, "HandleNotFound");
  const login = await xrpcPost(t.app, "com.atproto.server.createSession", {
    identifier: longDid,
    password: "correct horse battery",
  });
  assert.equal(login.status, 401);
  assert.equal((await login.json()).error, "AuthenticationRequired");
});

Deno.test("an external embed whose URI is not http or https is 400 InvalidRecord naming the field, and nothing is written (issue 36)", async () => {
  await using t = await createTestApp();
  const alice = await signUp(t.app, "alice.test");
  const auth = bearer(alice.accessJwt);
  const postWith = (embed: Record<string, unknown>) => ({
    text: "click me",
    embed,
    createdAt: "2024-05-01T12:00:00.000Z",
  });
  const quoted = {
    uri: `at://${alice.did}/${COLLECTION_POST}/${RKEY}`,
    cid: "bafyreie5737gdxlw5i64vzichcalba3z2v5n6icifvx5xytvske7mr3hpm",
  };
  const writes: [string, Record<string, unknown>, string][] = [
    [
      "com.atproto.repo.createRecord",
      {
        collection: COLLECTION_POST,
        record: postWith({ $type: EMBED_EXTERNAL, external: { uri: "javascript:alert(1)" } }),
      },
      'Invalid embed.external.uri, not an http or https URL: "javascript:alert(1)"',
    ],
    [
      "com.atproto.repo.putRecord",
      {
        collection: COLLECTION_POST,
        rkey: RKEY,
        record: postWith({
          $type: EMBED_RECORD_WITH_MEDIA,
          record: quoted,
          media: { external: { uri: "data:text/html,<script>alert(1)</script>" } },
        }),
      },
      'Invalid embed.media.external.uri, not an http or https URL: "data:text/html,<script>alert(1)</script>"',
    ],
    [
      "com.atproto.repo.applyWrites",
      {
        writes: [{
          $type: "com.atproto.repo.applyWrites#create",
          collection: COLLECTION_POST,
          rkey: RKEY,
          value: postWith({
            $type: EMBED_EXTERNAL,
            external: { uri: "https://example.com", thumb: "javascript:alert(1)" },
          }),
        }],
      },
      'Invalid embed.external.thumb, not an http or https URL: "javascript:alert(1)"',
    ],
  ];
  for (const [method, body, message] of writes) {
    const res = await xrpcPost(t.app, method, { repo: alice.did, ...body }, auth);
    assert.equal(res.status, 400, method);
    assert.deepEqual(await res.json(), { error: "InvalidRecord", message }, method);
  }
  const listed = await xrpcGet(
    t.app,
    `com.atproto.repo.listRecords?repo=${alice.did}&collection=${COLLECTION_POST}`,
  );
  assert.equal(listed.status, 200);
  assert.deepEqual((await listed.json()).records, []);
  const web = await xrpcPost(t.app, "com.atproto.repo.createRecord", {
    repo: alice.did,
    collection: COLLECTION_POST,
    record: postWith({ $type: EMBED_EXTERNAL, external: { uri: "https://example.com/a" } }),
  }, auth);
  assert.equal(web.status, 200);
  await web.body?.cancel();
});
