/**
 * An account deletion killed half way is finished later (issue 37; docs/operations.md "Operating
 * a community", behaviour 4.1 rule 13): a real process deleting an account with many records,
 * blobs and sessions is killed with SIGKILL right after a known step (the probe stops there), the
 * marker of the first atomic step says what is left, and `deno task admin account delete <DID>`
 * or an account host started on the store finishes it: no key of the DID remains but the invite
 * redemption log and the stream's past events, and no other account's key went.
 */

import assert from "node:assert/strict";
import { startTestServer, xrpcPost } from "../pds/_test_helpers.ts";
import type { AccountDeletion } from "../pds/accounts/account_delete.ts";
import { accountDeletionKey, accountKey } from "../pds/store/keys.ts";
import { COLLECTION_POST, EMBED_IMAGES } from "../shared/nsid.ts";
import { makeTempDir, REPO_ROOT, runPdsScript, waitFor } from "./_util.ts";

const PASSWORD = "correct horse battery";
const NOW = "2024-05-01T12:00:00.000Z";
/** Records of the deleted account: several delete batches of 500 keys (records and blocks). */
const RECORDS = 1200;

type Server = Awaited<ReturnType<typeof startTestServer>>;

async function call(s: Server, nsid: string, body: unknown, token?: string) {
  const res = await xrpcPost(
    s.url,
    nsid,
    body,
    token ? { authorization: `Bearer ${token}` } : {},
  );
  const json = await res.json();
  assert.equal(res.status, 200, `${nsid}: ${JSON.stringify(json)}`);
  return json;
}

/** An account with records, blobs, logins, an app password and a deletion token. */
async function populate(s: Server, handle: string, records: number): Promise<string> {
  const created = await call(s, "com.atproto.server.createAccount", { handle, password: PASSWORD });
  const { did, accessJwt } = created;
  const images: { alt: string; image: unknown }[] = [];
  for (let i = 0; i < 4; i++) {
    const res = await fetch(`${s.url}/xrpc/com.atproto.repo.uploadBlob`, {
      method: "POST",
      headers: { authorization: `Bearer ${accessJwt}`, "content-type": "image/png" },
      body: new Uint8Array(150_000).fill(i + 1), // three chunks each
    });
    images.push({ alt: "", image: (await res.json()).blob });
  }
  for (let i = 0; i < records; i += 100) {
    await call(s, "com.atproto.repo.applyWrites", {
      repo: did,
      writes: Array.from({ length: Math.min(100, records - i) }, (_, j) => ({
        $type: "com.atproto.repo.applyWrites#create",
        collection: COLLECTION_POST,
        value: {
          text: `post ${i + j}`,
          createdAt: NOW,
          ...(i + j < images.length
            ? { embed: { $type: EMBED_IMAGES, images: [images[i + j]] } }
            : {}),
        },
      })),
    }, accessJwt);
  }
  for (let i = 0; i < 5; i++) {
    await call(s, "com.atproto.server.createSession", { identifier: handle, password: PASSWORD });
  }
  await call(s, "com.atproto.server.createAppPassword", { name: "client" }, accessJwt);
  await call(s, "com.atproto.server.requestAccountDelete", {}, accessJwt);
  return did;
}

/** Keys naming `did` (in the key or as the value's `did`), but the two kinds kept by design. */
async function keysOf(kv: Deno.Kv, did: string): Promise<string[]> {
  const left: string[] = [];
  for await (const entry of kv.list({ prefix: [] })) {
    const table = entry.key[0];
    if (table === "invite_use" || table === "seq_event") continue;
    const value = entry.value as { did?: unknown } | null;
    if (entry.key.some((p) => typeof p === "string" && p.includes(did)) || value?.did === did) {
      left.push(JSON.stringify(entry.key));
    }
  }
  return left;
}

/**
 * Runs the probe deleting `did` and kills it with SIGKILL once it says it stopped after step
 * `stopAfter`; answers the steps it reported done.
 */
async function deleteAndKill(kvPath: string, dir: string, did: string, stopAfter: string) {
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--quiet",
      "--allow-read",
      `--allow-write=${dir}`,
      new URL("pds/accounts/_account_delete_probe.ts", REPO_ROOT).pathname,
      kvPath,
      did,
      stopAfter,
    ],
    cwd: REPO_ROOT.pathname,
    clearEnv: true,
    stdin: "null",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const lines: string[] = [];
  let rest = "";
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  while (!lines.includes("stopped")) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`probe ended before stopping: ${JSON.stringify(lines)}`);
    rest += value;
    const parts = rest.split("\n");
    rest = parts.pop()!;
    lines.push(...parts);
  }
  child.kill("SIGKILL");
  const status = await child.status;
  await reader.cancel();
  assert.equal(status.signal, "SIGKILL");
  return lines;
}

Deno.test("a deletion killed after its first step is finished by deno task admin account delete <DID>", async () => {
  await using dir = await makeTempDir("account-delete-resume-");
  const kvPath = `${dir.path}/pds.kv`;
  await using s = await startTestServer({ env: { PDS_KV_PATH: kvPath } });
  const kv = s.ctx.kv;
  const other = await populate(s, "alice.test", 20);
  const did = await populate(s, "bob.test", RECORDS);
  const otherKeys = await keysOf(kv, other);
  const before = await keysOf(kv, did);
  assert.ok(before.length > RECORDS, `${before.length} keys`);

  const steps = await deleteAndKill(kvPath, dir.path, did, "account");
  assert.deepEqual(steps, ["done account", "stopped"]);
  // Killed right after the first atomic step: the account is gone, the marker says what is left,
  // and everything else is still stored.
  assert.equal((await kv.get(accountKey(did))).value, null);
  const marker = (await kv.get<AccountDeletion>(accountDeletionKey(did))).value;
  assert.deepEqual(marker && { ...marker, startedAt: "" }, {
    did,
    handle: "bob.test",
    startedAt: "",
    remaining: ["credentials", "repository", "blobs", "sessions"],
  });
  assert.equal((await keysOf(kv, did)).length, before.length); // the marker instead of the account
  const login = await xrpcPost(s.url, "com.atproto.server.createSession", {
    identifier: did,
    password: PASSWORD,
  });
  assert.equal(login.status, 401);
  await login.body?.cancel();

  // The operator runs the command again, with the DID: it finishes the deletion.
  const run = await runPdsScript("admin.ts", dir.path, ["account", "delete", did]);
  assert.equal(run.code, 0, run.stderr);
  assert.match(
    run.stdout,
    new RegExp(
      `^Finished deleting bob\\.test \\(${did}\\), started \\S+; ` +
        "it had left: credentials, repository, blobs, sessions\\n$",
    ),
  );
  assert.deepEqual(await keysOf(kv, did), []);
  assert.deepEqual(await keysOf(kv, other), otherKeys);
  const again = await runPdsScript("admin.ts", dir.path, ["account", "delete", did]);
  assert.equal(again.code, 1);
  assert.equal(again.stderr, `admin: no account ${JSON.stringify(did)}\n`);
});

Deno.test("an account host started on the store finishes a deletion killed half way", async () => {
  await using dir = await makeTempDir("account-delete-resume-");
  const kvPath = `${dir.path}/pds.kv`;
  let did: string;
  let other: string;
  let otherKeys: string[];
  {
    await using s = await startTestServer({ env: { PDS_KV_PATH: kvPath } });
    other = await populate(s, "alice.test", 20);
    did = await populate(s, "bob.test", RECORDS);
    otherKeys = await keysOf(s.ctx.kv, other);
  }
  const steps = await deleteAndKill(kvPath, dir.path, did, "repository");
  assert.deepEqual(steps, ["done account", "done credentials", "done repository", "stopped"]);
  {
    using kv = await Deno.openKv(kvPath);
    const marker = (await kv.get<AccountDeletion>(accountDeletionKey(did))).value;
    assert.deepEqual(marker?.remaining, ["blobs", "sessions"]);
    const left = await keysOf(kv, did);
    assert.ok(left.some((k) => k.startsWith('["blob_chunk"')), "blobs are still stored");
    assert.ok(!left.some((k) => k.startsWith('["repo_record"')), "the records went");
  }

  await using s = await startTestServer({ env: { PDS_KV_PATH: kvPath } });
  await waitFor(async () => (await keysOf(s.ctx.kv, did)).length === 0, {
    timeoutMs: 10_000,
    message: "the account host finished the deletion",
  });
  assert.deepEqual(await keysOf(s.ctx.kv, other), otherKeys);
  const line = s.lines.find((l) => l.includes("finished an interrupted account deletion"));
  assert.ok(line, "logged");
  const logged = JSON.parse(line);
  assert.equal(logged.did, did);
  assert.deepEqual(logged.remaining, ["blobs", "sessions"]);
});
