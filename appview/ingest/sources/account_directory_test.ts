import assert from "node:assert/strict";
import { serveOnPort0 } from "../../../runtime/_test_helpers.ts";
import { didOf } from "../../_fixtures.ts";
import { testDidDocument } from "../../_test_helpers.ts";
import {
  ACCOUNT_TTL_MS,
  AccountHostDirectory,
  AccountLookupError,
  RESOLVE_DID_PATH,
} from "./account_directory.ts";

const ALICE = didOf("alice");
const STRANGER = didOf("stranger");

/** A fake account host hosting Alice only; counts its resolveDid requests. */
function fakeHost(status = () => 200) {
  const asked: string[] = [];
  const server = serveOnPort0((req) => {
    const url = new URL(req.url);
    if (url.pathname !== RESOLVE_DID_PATH) return new Response("no", { status: 404 });
    const did = url.searchParams.get("did") ?? "";
    asked.push(did);
    if (status() !== 200) return Response.json({ error: "Oops" }, { status: status() });
    if (did !== ALICE) {
      return Response.json({ error: "DidNotFound", message: "no" }, { status: 400 });
    }
    return Response.json({ didDoc: testDidDocument(did) });
  });
  return { server, asked };
}

Deno.test("the account host's DID document gives the key and handle, cached until it expires", async () => {
  const host = fakeHost();
  await using _ = host.server;
  let now = 0;
  const dir = new AccountHostDirectory({ pdsUrl: host.server.url, now: () => now });
  const [a, b] = await Promise.all([dir.lookup(ALICE), dir.lookup(ALICE)]);
  assert.equal(a, b);
  assert.equal(a.handle, "alice.test");
  assert.equal(a.key.type, "public");
  assert.equal(host.asked.length, 1); // concurrent lookups share one request
  // A refresh is granted only once the entry is a minute old.
  assert.equal(await dir.lookup(ALICE, { refresh: true }), a);
  now += 60_000;
  await dir.lookup(ALICE, { refresh: true });
  now += ACCOUNT_TTL_MS;
  await dir.lookup(ALICE);
  assert.equal(host.asked.length, 3);
});

Deno.test("an account the host does not host is not-hosted (cached); an unreachable host is unavailable", async () => {
  let failing = false;
  const host = fakeHost(() => failing ? 502 : 200);
  await using _ = host.server;
  const dir = new AccountHostDirectory({ pdsUrl: host.server.url, maxEntries: 2 });
  for (let i = 0; i < 2; i++) {
    await assert.rejects(
      dir.lookup(STRANGER),
      (e) => e instanceof AccountLookupError && e.reason === "not-hosted",
    );
  }
  assert.equal(host.asked.length, 1);
  failing = true;
  await assert.rejects(
    dir.lookup(ALICE),
    new AccountLookupError("unavailable", `Account host answered 502 for ${ALICE}`),
  );
  failing = false;
  await dir.lookup(ALICE);
  await assert.rejects(dir.lookup(didOf("third")), AccountLookupError);
  assert.equal(dir.size, 2); // bounded: the oldest entry went
});
