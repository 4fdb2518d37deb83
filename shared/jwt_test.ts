// ES256 tokens (spec 5.1 claims and key publication; spec 5.2 rule 2 leeway and alg checks).
import assert from "node:assert/strict";
import { deriveP256KeyPair } from "./keys.ts";
import { encodeMultikeyUncompressed, parseMultikey } from "./multikey.ts";
import { CompactSign } from "jose";
import {
  decodeJwtUnverified,
  importSigningKey,
  importVerifyKey,
  JwtError,
  signJwt,
  verifyJwt,
} from "./jwt.ts";

const NOW = 1_750_000_000;
const keyPair = deriveP256KeyPair("jwt test secret", "jwt");
const signingKey = await importSigningKey(keyPair);
const verifyKey = await importVerifyKey(keyPair.publicKey);
const claims = {
  iss: "did:web:localhost%3A2583",
  sub: "did:plc:abcdefghijklmnopqrstuvwx",
  aud: "did:web:localhost%3A3000",
  iat: NOW,
  exp: NOW + 3600,
  scope: "com.atproto.access",
};

function b64url(data: string | Uint8Array): string {
  const bytes = typeof data === "string" ? new TextEncoder().encode(data) : data;
  return btoa(String.fromCharCode(...bytes)).replaceAll("+", "-").replaceAll("/", "_")
    .replaceAll("=", "");
}

/** A correctly ES256-signed JWS whose payload is `text` (not necessarily a claims object). */
function signRawPayload(text: string): Promise<string> {
  return new CompactSign(new TextEncoder().encode(text)).setProtectedHeader({ alg: "ES256" })
    .sign(signingKey);
}

async function rejectsWith(
  token: string,
  reason: string,
  opts: { nowSeconds?: number; leewaySeconds?: number } = { nowSeconds: NOW },
) {
  await assert.rejects(verifyJwt(token, verifyKey, opts), (err: unknown) => {
    assert.ok(err instanceof JwtError, String(err));
    assert.equal(err.reason, reason);
    assert.equal(err.message, reason);
    return true;
  });
}

Deno.test("a token signed with the derived key verifies with the key parsed from its multikey", async () => {
  const token = await signJwt(claims, signingKey, { typ: "at+jwt" });
  const published = encodeMultikeyUncompressed(keyPair.publicKey);
  const key = await importVerifyKey(parseMultikey(published));
  assert.deepEqual(await verifyJwt(token, key, { nowSeconds: NOW }), claims);
  assert.deepEqual(decodeJwtUnverified(token).header, { alg: "ES256", typ: "at+jwt" });
});

Deno.test("signJwt writes a three-part ES256 token with a 64-byte signature", async () => {
  const token = await signJwt(claims, signingKey);
  const parts = token.split(".");
  assert.equal(parts.length, 3);
  assert.equal(parts[2].length, 86); // 64 bytes in unpadded base64url
  assert.deepEqual(decodeJwtUnverified(token), { header: { alg: "ES256" }, claims });
});

Deno.test("verifyJwt rejects an alg none token naming the algorithm", async () => {
  const header = b64url(JSON.stringify({ alg: "none", typ: "JWT" }));
  const token = `${header}.${b64url(JSON.stringify(claims))}.`;
  await rejectsWith(token, "Token algorithm is not ES256: none");
});

Deno.test("verifyJwt rejects an HS256 token keyed with the public key bytes", async () => {
  const signingInput = `${b64url(JSON.stringify({ alg: "HS256", typ: "JWT" }))}.${
    b64url(JSON.stringify(claims))
  }`;
  const hmacKey = await crypto.subtle.importKey(
    "raw",
    new Uint8Array(keyPair.publicKey),
    { name: "HMAC", hash: "SHA-256" },
    false,
    ["sign"],
  );
  const mac = await crypto.subtle.sign("HMAC", hmacKey, new TextEncoder().encode(signingInput));
  const token = `${signingInput}.${b64url(new Uint8Array(mac))}`;
  await rejectsWith(token, "Token algorithm is not ES256: HS256");
});

Deno.test("verifyJwt rejects a missing or non-string alg", async () => {
  const body = b64url(JSON.stringify(claims));
  await rejectsWith(`${b64url("{}")}.${body}.sig`, "Token algorithm is not ES256: (missing)");
  await rejectsWith(`${b64url('{"alg":256}')}.${body}.sig`, "Token algorithm is not ES256: 256");
});

Deno.test("verifyJwt accepts a token expired by 29 s with 30 s leeway and rejects 31 s", async () => {
  const token = await signJwt({ ...claims, exp: NOW - 29 }, signingKey);
  const result = await verifyJwt(token, verifyKey, { nowSeconds: NOW, leewaySeconds: 30 });
  assert.equal(result.exp, NOW - 29);
  const older = await signJwt({ ...claims, exp: NOW - 31 }, signingKey);
  await rejectsWith(older, "Token has expired", { nowSeconds: NOW, leewaySeconds: 30 });
});

Deno.test("verifyJwt without leeway rejects a token at its exp second", async () => {
  const token = await signJwt({ ...claims, exp: NOW }, signingKey);
  await rejectsWith(token, "Token has expired");
  assert.equal((await verifyJwt(token, verifyKey, { nowSeconds: NOW - 1 })).exp, NOW);
});

Deno.test("verifyJwt rejects a token without a numeric exp", async () => {
  const { exp: _exp, ...noExp } = claims;
  await rejectsWith(await signJwt(noExp, signingKey), "Token has no expiration");
  await rejectsWith(
    await signJwt({ ...claims, exp: "tomorrow" as unknown as number }, signingKey),
    "Token has no expiration",
  );
});

Deno.test("verifyJwt rejects a token whose nbf is beyond the leeway", async () => {
  const token = await signJwt({ ...claims, nbf: NOW + 60 }, signingKey);
  await rejectsWith(token, "Token is not yet valid", { nowSeconds: NOW, leewaySeconds: 30 });
  await verifyJwt(token, verifyKey, { nowSeconds: NOW + 31, leewaySeconds: 30 });
});

Deno.test("verifyJwt rejects a token signed by another key or with altered claims", async () => {
  const otherKey = await importSigningKey(deriveP256KeyPair("jwt test secret", "other"));
  await rejectsWith(await signJwt(claims, otherKey), "Token signature is invalid");
  const [h, , s] = (await signJwt(claims, signingKey)).split(".");
  const forged = `${h}.${b64url(JSON.stringify({ ...claims, sub: "did:plc:attacker" }))}.${s}`;
  await rejectsWith(forged, "Token signature is invalid");
});

Deno.test("verifyJwt rejects malformed tokens", async () => {
  const good = await signJwt(claims, signingKey);
  const [h, p, s] = good.split(".");
  const malformed = [
    "",
    "abc",
    `${h}.${p}`,
    `${h}.${p}.${s}.extra`,
    `.${p}.${s}`,
    `${h}..${s}`,
    `${h}.${p}.`,
    `${h}.${p}.${s}=`,
    `${h}.${p}.${s.slice(0, 40)}`,
    `${h}.${p}!.${s}`,
    `${b64url("not json")}.${p}.${s}`,
    `${b64url("[1]")}.${p}.${s}`,
    await signRawPayload("[1]"),
    await signRawPayload("null"),
    await signRawPayload("not json"),
    "a".repeat(20_000),
  ];
  for (const token of malformed) await rejectsWith(token, "Token is malformed");
});

Deno.test("decodeJwtUnverified rejects malformed tokens with JwtError", () => {
  for (const token of ["", "a.b", "a.b.c.d", `${b64url("{}")}.${b64url("null")}.x`]) {
    assert.throws(() => decodeJwtUnverified(token), {
      name: "JwtError",
      message: "Token is malformed",
    });
  }
});

Deno.test("importVerifyKey rejects bytes that are not a P-256 point", async () => {
  await assert.rejects(() => importVerifyKey(new Uint8Array(65)), {
    name: "TypeError",
    message: "Public key is not a P-256 point",
  });
});
