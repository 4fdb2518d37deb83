// Spec 5.2 rules 4-7 (key source, key cache, rotation, fail closed) and part 8 (2 s fetch
// timeout, 60 s re-fetch spacing), checked through the verifier against a real document server.

import assert from "node:assert/strict";
import { createLogger, silentLogger } from "../../shared/log.ts";
import { encodeMultikey } from "../../shared/multikey.ts";
import {
  KEY_FETCH_TIMEOUT_MS,
  KEY_REFETCH_INTERVAL_MS,
  keyFromDidDocument,
  PdsKeySource,
} from "./key_source.ts";
import { TokenVerifier } from "./verifier.ts";
import {
  accessClaims,
  ALICE,
  DidDocServer,
  didDocument,
  makeSigner,
  SERVICE_DID,
} from "../_test_helpers.ts";
import { captureLogRecords, ManualClock } from "../../runtime/_test_helpers.ts";

const T0 = Date.parse("2025-06-01T12:00:00Z");

function makeVerifier(
  server: DidDocServer,
  clock: ManualClock,
  opts: { sink?: (line: string) => void; timeoutMs?: number } = {},
) {
  const log = opts.sink ? createLogger("appview.auth", { sink: opts.sink }) : silentLogger;
  const keySource = new PdsKeySource({
    pdsUrl: server.url,
    log,
    now: clock.now,
    timeoutMs: opts.timeoutMs,
  });
  return new TokenVerifier({
    serviceDid: SERVICE_DID,
    authRequired: true,
    keySource,
    log,
    now: clock.now,
  });
}

/** Verifies `token`, returning "ok" or `<status> <error>: <message>`. */
async function outcome(verifier: TokenVerifier, token: string): Promise<string> {
  try {
    const v = await verifier.verifyHeader(`Bearer ${token}`);
    assert.equal(v.sub, ALICE);
    return "ok";
  } catch (err) {
    const e = err as { status: number; error: string; message: string };
    return `${e.status} ${e.error}: ${e.message}`;
  }
}

Deno.test("rotation: a token of the new key succeeds after exactly one re-fetch", async () => {
  const clock = new ManualClock(T0);
  const oldKey = await makeSigner("secret before rotation");
  const newKey = await makeSigner("secret after rotation");
  await using server = new DidDocServer({ body: didDocument(oldKey.keyPair.publicKey) });
  const verifier = makeVerifier(server, clock);
  await verifier.keySource.warmUp();
  assert.equal(server.requests, 1);
  const oldToken = await oldKey.sign(accessClaims(clock.ms));
  assert.equal(await outcome(verifier, oldToken), "ok");
  assert.equal(verifier.cachedTokens, 1);

  // The account host restarts with a new PDS_JWT_SECRET.
  server.setKey(newKey.keyPair.publicKey);
  clock.advance(61);
  const newToken = await newKey.sign(accessClaims(clock.ms));
  assert.equal(await outcome(verifier, newToken), "ok");
  assert.equal(server.requests, 2);
  // The key change emptied the cache: the old token is checked again, against the new key.
  assert.equal(verifier.cachedTokens, 1);
  assert.equal(await outcome(verifier, oldToken), "401 TokenInvalid: Token signature is invalid");
  assert.equal(await outcome(verifier, newToken), "ok");
  assert.equal(server.requests, 2);
});

Deno.test("rotation: a re-fetch within 60 s of the last attempt does not happen", async () => {
  const clock = new ManualClock(T0);
  const oldKey = await makeSigner("secret before rotation");
  const newKey = await makeSigner("secret after rotation");
  await using server = new DidDocServer({ body: didDocument(oldKey.keyPair.publicKey) });
  const verifier = makeVerifier(server, clock);
  await verifier.keySource.warmUp();
  server.setKey(newKey.keyPair.publicKey);
  clock.advance(59);
  const token = await newKey.sign(accessClaims(clock.ms));
  assert.equal(await outcome(verifier, token), "401 TokenInvalid: Token signature is invalid");
  assert.equal(server.requests, 1);
  clock.advance(1);
  assert.equal(await outcome(verifier, token), "ok");
  assert.equal(server.requests, 2);
});

Deno.test("a burst of bad tokens causes at most one document fetch per 60 s", async () => {
  const clock = new ManualClock(T0);
  const key = await makeSigner("the real secret");
  const attacker = await makeSigner("attacker secret");
  await using server = new DidDocServer({ body: didDocument(key.keyPair.publicKey) });
  const verifier = makeVerifier(server, clock);
  await verifier.keySource.warmUp();
  assert.equal(server.requests, 1);
  const bad = await Promise.all(
    Array.from({ length: 50 }, () => attacker.sign(accessClaims(clock.ms))),
  );
  const invalidOnly = new Set(["401 TokenInvalid: Token signature is invalid"]);
  clock.advance(60);
  for (let minute = 1; minute <= 3; minute++) {
    // 50 concurrent then 50 sequential bad tokens: one re-fetch.
    const results = await Promise.all(bad.map((t) => outcome(verifier, t)));
    for (const t of bad) results.push(await outcome(verifier, t));
    assert.equal(server.requests, 1 + minute);
    // 30 s later: none.
    clock.advance(30);
    for (const t of bad) results.push(await outcome(verifier, t));
    assert.deepEqual(new Set(results), invalidOnly);
    assert.equal(server.requests, 1 + minute);
    clock.advance(30);
  }
});

Deno.test("a failed re-fetch keeps the cached key and returns the original failure", async () => {
  const clock = new ManualClock(T0);
  const key = await makeSigner("the real secret");
  const attacker = await makeSigner("attacker secret");
  await using server = new DidDocServer({ body: didDocument(key.keyPair.publicKey) });
  const verifier = makeVerifier(server, clock);
  await verifier.keySource.warmUp();
  server.answer = { body: { id: "did:web:x" } };
  clock.advance(60);
  assert.equal(
    await outcome(verifier, await attacker.sign(accessClaims(clock.ms))),
    "401 TokenInvalid: Token signature is invalid",
  );
  assert.equal(server.requests, 2);
  assert.equal(await outcome(verifier, await key.sign(accessClaims(clock.ms))), "ok");
});

Deno.test("host down at startup: warns, then the first request fetches the key once it is up", async () => {
  const clock = new ManualClock(T0);
  const key = await makeSigner("the real secret");
  await using server = new DidDocServer({ body: didDocument(key.keyPair.publicKey) });
  await server.stop();
  const { lines, sink } = captureLogRecords();
  const verifier = makeVerifier(server, clock, { sink });
  await verifier.keySource.warmUp();
  const warnings = lines.filter((l) => l.level === "warn");
  assert.equal(warnings.length, 1);
  assert.equal(
    warnings[0].msg,
    "account host key not available at startup; will fetch on first use",
  );
  assert.equal(warnings[0].reason, "Account host is unreachable");
  assert.equal(verifier.keySource.current(), null);

  server.start();
  const token = await key.sign(accessClaims(clock.ms));
  assert.equal(await outcome(verifier, token), "ok");
  assert.equal(server.requests, 1);
  assert.equal(await outcome(verifier, token), "ok");
  assert.equal(server.requests, 1);
  for (const line of lines) assert.ok(!JSON.stringify(line).includes(token), "token logged");
});

Deno.test("host down for good: 503 AuthUnavailable with the reason, never a pass", async () => {
  const clock = new ManualClock(T0);
  const key = await makeSigner("the real secret");
  await using server = new DidDocServer({ body: didDocument(key.keyPair.publicKey) });
  await server.stop();
  const verifier = makeVerifier(server, clock);
  await verifier.keySource.warmUp();
  const token = await key.sign(accessClaims(clock.ms));
  for (let i = 0; i < 3; i++) {
    assert.equal(
      await outcome(verifier, token),
      "503 AuthUnavailable: Account host key is unavailable: Account host is unreachable",
    );
  }
});

Deno.test("a DID document fetch that takes longer than the timeout gives 503", async () => {
  const clock = new ManualClock(T0);
  const key = await makeSigner("the real secret");
  await using server = new DidDocServer({ body: didDocument(key.keyPair.publicKey) });
  server.hang = true;
  const verifier = makeVerifier(server, clock, { timeoutMs: 100 });
  const token = await key.sign(accessClaims(clock.ms));
  assert.equal(
    await outcome(verifier, token),
    "503 AuthUnavailable: Account host key is unavailable: Account host did not answer within 100 ms",
  );
  server.release();
});

Deno.test("the default fetch timeout is 2 s and the re-fetch spacing 60 s (spec part 8)", () => {
  assert.equal(KEY_FETCH_TIMEOUT_MS, 2000);
  assert.equal(KEY_REFETCH_INTERVAL_MS, 60_000);
});

const UNUSABLE_DOCUMENTS: Array<{ name: string; status?: number; body: unknown; reason: string }> =
  [
    {
      name: "without verificationMethod",
      body: { id: "did:web:localhost%3A2583" },
      reason: "DID document has no verificationMethod array",
    },
    {
      name: "with verificationMethod not an array",
      body: { verificationMethod: { publicKeyMultibase: "zDn" } },
      reason: "DID document has no verificationMethod array",
    },
    {
      name: "with an empty verificationMethod",
      body: { verificationMethod: [] },
      reason: "DID document has no verificationMethod with a publicKeyMultibase",
    },
    {
      name: "with only empty keys",
      body: { verificationMethod: [{ publicKeyMultibase: "" }, { id: "#atproto" }, null] },
      reason: "DID document has no verificationMethod with a publicKeyMultibase",
    },
    {
      name: "with a malformed key",
      body: { verificationMethod: [{ publicKeyMultibase: "z0OIl" }] },
      reason: 'Multikey is not valid base58btc: "z0OIl"',
    },
    { name: "that is not JSON", body: "<html>", reason: "DID document is not JSON" },
    { name: "that is a JSON array", body: [], reason: "DID document is not a JSON object" },
    {
      name: "answered with HTTP 500",
      status: 500,
      body: {},
      reason: "DID document request answered HTTP 500",
    },
    {
      name: "larger than 64 KiB",
      body: { pad: "x".repeat(70_000) },
      reason: "DID document is larger than 65536 bytes",
    },
  ];

for (const doc of UNUSABLE_DOCUMENTS) {
  Deno.test(`a DID document ${doc.name} gives 503, not a pass`, async () => {
    const clock = new ManualClock(T0);
    const key = await makeSigner("the real secret");
    await using server = new DidDocServer({ status: doc.status, body: doc.body });
    const verifier = makeVerifier(server, clock);
    await verifier.keySource.warmUp();
    const token = await key.sign(accessClaims(clock.ms));
    assert.equal(
      await outcome(verifier, token),
      `503 AuthUnavailable: Account host key is unavailable: ${doc.reason}`,
    );
  });
}

Deno.test("the key is the first verificationMethod with a non-empty publicKeyMultibase", () => {
  assert.equal(
    keyFromDidDocument({
      verificationMethod: [
        { id: "#a", publicKeyMultibase: "" },
        { id: "#b" },
        { id: "#c", publicKeyMultibase: "zDnKey1" },
        { id: "#d", publicKeyMultibase: "zDnKey2" },
      ],
    }),
    "zDnKey1",
  );
});

Deno.test("a key published in the standard compressed Multikey form is accepted", async () => {
  const clock = new ManualClock(T0);
  const key = await makeSigner("the real secret");
  await using server = new DidDocServer({
    body: { verificationMethod: [{ publicKeyMultibase: encodeMultikey(key.keyPair.publicKey) }] },
  });
  const verifier = makeVerifier(server, clock);
  assert.equal(await outcome(verifier, await key.sign(accessClaims(clock.ms))), "ok");
});

Deno.test("concurrent first requests share one document fetch", async () => {
  const clock = new ManualClock(T0);
  const key = await makeSigner("the real secret");
  await using server = new DidDocServer({ body: didDocument(key.keyPair.publicKey) });
  const verifier = makeVerifier(server, clock);
  const tokens = await Promise.all(
    Array.from({ length: 20 }, () => key.sign(accessClaims(clock.ms))),
  );
  const results = await Promise.all(tokens.map((t) => outcome(verifier, t)));
  assert.deepEqual(new Set(results), new Set(["ok"]));
  assert.equal(server.requests, 1);
});

Deno.test("key source log lines show the account host URL without its credentials", async () => {
  await using server = new DidDocServer({ body: {} });
  await server.stop();
  const { lines, sink } = captureLogRecords();
  const keySource = new PdsKeySource({
    pdsUrl: server.url.replace("http://", "http://operator:hunter2@"),
    log: createLogger("appview.auth", { sink }),
    now: new ManualClock(T0).now,
  });
  await keySource.warmUp();
  assert.equal(
    lines.find((l) => l.level === "warn")?.url,
    `${server.url.replace("http://", "http://redacted:redacted@")}/.well-known/did.json`,
  );
  assert.equal(JSON.stringify(lines).includes("hunter2"), false);
});
