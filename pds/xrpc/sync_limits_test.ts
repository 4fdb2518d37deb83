// getRepo is unauthenticated and builds a whole repository in memory: the account host bounds
// how many run and wait at once (spec 4.1 sync endpoints; limits enforced on the server).
import assert from "node:assert/strict";
import { readCar } from "../../shared/car.ts";
import { COLLECTION_POST } from "../../shared/nsid.ts";
import { waitFor } from "../../runtime/_test_helpers.ts";
import { signUp, startTestServer, xrpcPost } from "../_test_helpers.ts";
import { carBody, EXPORTS_RUNNING, EXPORTS_WAITING } from "./sync.ts";
import type { ConcurrencyGate } from "../concurrency_gate.ts";

/**
 * Takes every running place and all but one waiting place of `gate` with tasks that end when
 * `release` is called.
 */
function fillAllButOnePlace(gate: ConcurrencyGate) {
  let release!: () => void;
  const hold = new Promise<void>((r) => release = r);
  const holders = Array.from(
    { length: EXPORTS_RUNNING + EXPORTS_WAITING - 1 },
    () => gate.run(() => hold),
  );
  return { release, holders };
}

Deno.test("getRepo beyond the running and waiting exports is 429 RateLimitExceeded; queued ones finish", async () => {
  await using server = await startTestServer();
  const alice = await signUp(server.url, "alice.test");
  for (let i = 0; i < 3; i++) {
    const res = await xrpcPost(server.url, "com.atproto.repo.createRecord", {
      repo: alice.did,
      collection: COLLECTION_POST,
      record: { text: `post ${i}`, createdAt: new Date().toISOString() },
    }, { authorization: `Bearer ${alice.accessJwt}` });
    assert.equal(res.status, 200);
    await res.body?.cancel();
  }
  const getRepo = () => fetch(`${server.url}/xrpc/com.atproto.sync.getRepo?did=${alice.did}`);

  // Take every running place and all but one waiting place with exports that do not end yet.
  const gate = server.ctx.exportGate;
  const { release, holders } = fillAllButOnePlace(gate);
  assert.equal(gate.active, EXPORTS_RUNNING);
  assert.equal(gate.queued, EXPORTS_WAITING - 1);

  const queued = getRepo();
  await waitFor(() => gate.queued === EXPORTS_WAITING, {
    message: "the getRepo request never queued",
  });
  const refused = await getRepo();
  assert.equal(refused.status, 429);
  assert.equal(refused.headers.get("retry-after"), "1");
  assert.deepEqual(await refused.json(), {
    error: "RateLimitExceeded",
    message: `Too many repository exports at once (${EXPORTS_RUNNING} running and ` +
      `${EXPORTS_WAITING} waiting (the most allowed)); retry in 1 second`,
  });

  // Other sync methods do not queue behind exports.
  const latest = await fetch(
    `${server.url}/xrpc/com.atproto.sync.getLatestCommit?did=${alice.did}`,
  );
  assert.equal(latest.status, 200);
  const { cid } = await latest.json();

  release();
  await Promise.all(holders);
  const res = await queued;
  assert.equal(res.status, 200);
  assert.equal(res.headers.get("content-type"), "application/vnd.ipld.car");
  const car = readCar(new Uint8Array(await res.arrayBuffer()));
  assert.deepEqual(car.roots.map(String), [cid]);
  assert.equal(gate.active, 0);
  assert.equal(gate.queued, 0);

  // With places free again, an export is served at once.
  const again = await getRepo();
  assert.equal(again.status, 200);
  await again.body?.cancel();
});

Deno.test("a queued getRepo whose client goes away leaves the queue and frees its place", async () => {
  await using server = await startTestServer();
  const alice = await signUp(server.url, "alice.test");
  const url = `${server.url}/xrpc/com.atproto.sync.getRepo?did=${alice.did}`;
  const gate = server.ctx.exportGate;
  const { release, holders } = fillAllButOnePlace(gate);

  try {
    const client = new AbortController();
    const leaving = fetch(url, { signal: client.signal }).catch((err: Error) => err);
    await waitFor(() => gate.queued === EXPORTS_WAITING, { message: "getRepo never queued" });
    client.abort();
    assert.equal((await leaving as Error).name, "AbortError");
    await waitFor(() => gate.queued === EXPORTS_WAITING - 1, {
      message: "the abandoned export stayed queued",
    });
  } catch (err) {
    release(); // let the server shut down
    throw err;
  }

  // The freed place takes the next request, which is served once the holders finish.
  const next = fetch(url);
  await waitFor(() => gate.queued === EXPORTS_WAITING, { message: "the next never queued" });
  release();
  await Promise.all(holders);
  const res = await next;
  assert.equal(res.status, 200);
  assert.equal(readCar(new Uint8Array(await res.arrayBuffer())).roots.length, 1);
  assert.equal(gate.active, 0);
  assert.equal(gate.queued, 0);
});

Deno.test("an export holds its place until its client has taken the whole CAR or gone away", async () => {
  await using server = await startTestServer();
  const alice = await signUp(server.url, "alice.test");
  // About 6.8 MB of distinct posts (150 graphemes of 49 bytes each): more than loopback socket
  // buffers take from a client that reads nothing.
  const text = ("a" + "\u0301".repeat(24)).repeat(150);
  const repos = server.ctx.repos;
  for (let i = 0; i < 30; i++) {
    await repos.applyWrites(
      alice.did,
      Array.from({ length: 30 }, (_, j) => ({
        action: "create" as const,
        collection: COLLECTION_POST,
        record: { text: `${i}.${j} ${text}`, createdAt: new Date().toISOString() },
      })),
    );
  }
  const gate = server.ctx.exportGate;
  const port = Number(new URL(server.url).port);
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  await conn.write(
    new TextEncoder().encode(
      `GET /xrpc/com.atproto.sync.getRepo?did=${alice.did} HTTP/1.1\r\nHost: x\r\n\r\n`,
    ),
  );
  try {
    await waitFor(() => gate.active === 1, { message: "the export never started" });
    // The client reads nothing: the export keeps its place (and its CAR) while it is unsent.
    await new Promise((r) => setTimeout(r, 500));
    assert.equal(gate.active, 1);
  } finally {
    conn.close();
  }
  await waitFor(() => gate.active === 0, { message: "the place was kept after the client left" });

  // A client that reads the whole body frees the place as well.
  const res = await fetch(`${server.url}/xrpc/com.atproto.sync.getRepo?did=${alice.did}`);
  assert.equal(res.status, 200);
  const bytes = new Uint8Array(await res.arrayBuffer());
  assert.equal(Number(res.headers.get("content-length")), bytes.length);
  assert.ok(bytes.length > 6_500_000, `CAR of ${bytes.length} bytes`);
  assert.ok(readCar(bytes).blocks.size > 900, "every post is in the CAR");
  await waitFor(() => gate.active === 0, { message: "the place was kept after the body was sent" });
});

Deno.test("carBody gives its place back when the client stops reading for the idle limit", async () => {
  let released = 0;
  const bytes = new Uint8Array(200 * 1024).map((_, i) => i & 0xff);
  const res = carBody(bytes, () => released++, { idleMs: 100 });
  assert.equal(res.headers.get("content-length"), String(bytes.length));
  const reader = res.body!.getReader();
  const first = await reader.read();
  assert.equal(first.value!.length, 64 * 1024);
  assert.deepEqual(first.value!.subarray(0, 3), new Uint8Array([0, 1, 2]));
  await new Promise((r) => setTimeout(r, 250));
  assert.equal(released, 1);
  // The body then ends short of its Content-Length (the server drops such a connection).
  assert.deepEqual(await reader.read(), { done: true, value: undefined });
  assert.equal(released, 1);

  // Read to the end: released once, when the last piece is taken.
  let done = 0;
  const whole = new Uint8Array(await carBody(bytes, () => done++, { idleMs: 100 }).arrayBuffer());
  assert.deepEqual(whole, bytes);
  assert.equal(done, 1);
  await new Promise((r) => setTimeout(r, 150));
  assert.equal(done, 1, "no timer fires after the end");
});

/** Reads `res` one piece every `everyMs`; the bytes read. */
async function readSlowly(res: Response, everyMs: number): Promise<number> {
  const reader = res.body!.getReader();
  let n = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return n;
    n += value.length;
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

Deno.test("carBody: a steady reader may take longer than the idle limit, a trickle no longer than its deadline", async () => {
  const bytes = new Uint8Array(320 * 1024); // five pieces
  // A piece every 60 ms, 300 ms in all, with a 100 ms idle limit: each read restarts it.
  let steady = 0;
  assert.equal(
    await readSlowly(carBody(bytes, () => steady++, { idleMs: 100 }), 60),
    bytes.length,
  );
  assert.equal(steady, 1);
  // The same reader against a deadline of 100 ms + 320 KiB at 4 MiB/s = 178 ms: cut after
  // three or four pieces.
  let trickle = 0;
  const read = await readSlowly(
    carBody(bytes, () => trickle++, { idleMs: 100, minRate: 4 * 1024 * 1024 }),
    60,
  );
  assert.ok(read >= 2 * 64 * 1024 && read < bytes.length, `${read} bytes read`);
  assert.equal(trickle, 1);
});

Deno.test("a HEAD getRepo gives its export place back once answered", async () => {
  await using server = await startTestServer();
  const alice = await signUp(server.url, "alice.test");
  const gate = server.ctx.exportGate;
  const url = `${server.url}/xrpc/com.atproto.sync.getRepo?did=${alice.did}`;
  const res = await fetch(url, { method: "HEAD" });
  assert.equal(res.status, 200);
  assert.equal(res.headers.get("content-type"), "application/vnd.ipld.car");
  // Nobody reads the body of a HEAD answer: the place must not wait for it.
  assert.equal(gate.active, 0);
  const get = await fetch(url);
  const bytes = new Uint8Array(await get.arrayBuffer());
  assert.equal(res.headers.get("content-length"), String(bytes.length));
});

Deno.test("carBody: once the server is done with the response, an unread body keeps nothing", async () => {
  // With the idle timer and the deadline still pending, the test's timer sanitizer would fail.
  let done = 0;
  let served!: () => void;
  const res = carBody(
    new Uint8Array(1024 * 1024),
    () => done++,
    { idleMs: 60_000 },
    new Promise<void>((r) => served = r),
  );
  assert.equal(res.status, 200);
  served();
  await new Promise((r) => setTimeout(r, 0));
  assert.equal(done, 1);
});
