// P-256 keys and compact low-S signatures (docs/protocol.md 7; spec 5.1).
import assert from "node:assert/strict";
import { p256 } from "@noble/curves/nist.js";
import { sha256 } from "@noble/hashes/sha2.js";
import {
  deriveP256KeyPair,
  generateP256KeyPair,
  publicKeyFromPrivate,
  signCompact,
  verifyCompact,
} from "./keys.ts";

const N = p256.Point.Fn.ORDER;
const message = new TextEncoder().encode("commit bytes");

function scalarOf(bytes: Uint8Array): bigint {
  return BigInt("0x" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join(""));
}

Deno.test("deriveP256KeyPair is deterministic per (secret, info) and separates info strings", () => {
  const a = deriveP256KeyPair("s3cret", "jwt");
  const b = deriveP256KeyPair("s3cret", "jwt");
  const c = deriveP256KeyPair("s3cret", "repo");
  const d = deriveP256KeyPair("other", "jwt");
  assert.deepEqual(a, b);
  assert.notDeepEqual(a.privateKey, c.privateKey);
  assert.notDeepEqual(a.privateKey, d.privateKey);
});

Deno.test("deriveP256KeyPair returns a 32-byte scalar in [1, n-1] and its 65-byte public key", () => {
  for (let i = 0; i < 50; i++) {
    const kp = deriveP256KeyPair("secret", `info-${i}`);
    assert.equal(kp.privateKey.length, 32);
    const d = scalarOf(kp.privateKey);
    assert.ok(d >= 1n && d <= N - 1n);
    assert.equal(kp.publicKey.length, 65);
    assert.equal(kp.publicKey[0], 0x04);
    assert.deepEqual(kp.publicKey, p256.getPublicKey(kp.privateKey, false));
  }
});

Deno.test("deriveP256KeyPair rejects an empty secret", () => {
  assert.throws(() => deriveP256KeyPair("", "jwt"), {
    name: "TypeError",
    message: "Key derivation secret must be a non-empty string",
  });
});

Deno.test("generateP256KeyPair returns fresh valid key pairs", () => {
  const a = generateP256KeyPair();
  const b = generateP256KeyPair();
  assert.notDeepEqual(a.privateKey, b.privateKey);
  assert.deepEqual(publicKeyFromPrivate(a.privateKey), a.publicKey);
  assert.equal(p256.utils.isValidPublicKey(a.publicKey, false), true);
});

Deno.test("signCompact returns a deterministic 64-byte low-S signature that verifyCompact accepts", () => {
  const kp = deriveP256KeyPair("secret", "sign");
  const sig = signCompact(kp.privateKey, message);
  assert.equal(sig.length, 64);
  assert.deepEqual(signCompact(kp.privateKey, message), sig);
  const s = scalarOf(sig.subarray(32));
  assert.ok(s <= N >> 1n, "s is in the low half");
  assert.equal(verifyCompact(kp.publicKey, message, sig), true);
});

Deno.test("signCompact hashes the message with SHA-256 exactly once", () => {
  const kp = deriveP256KeyPair("secret", "sign");
  const sig = signCompact(kp.privateKey, message);
  // Verifying against the single digest without further hashing must succeed...
  assert.equal(p256.verify(sig, sha256(message), kp.publicKey, { prehash: false }), true);
  // ...and against a double hash must fail.
  assert.equal(p256.verify(sig, sha256(sha256(message)), kp.publicKey, { prehash: false }), false);
});

Deno.test("signatures made by signCompact verify with WebCrypto ECDSA P-256/SHA-256", async () => {
  const kp = deriveP256KeyPair("secret", "webcrypto");
  const key = await crypto.subtle.importKey(
    "raw",
    new Uint8Array(kp.publicKey),
    { name: "ECDSA", namedCurve: "P-256" },
    false,
    ["verify"],
  );
  const sig = new Uint8Array(signCompact(kp.privateKey, message));
  const ok = await crypto.subtle.verify({ name: "ECDSA", hash: "SHA-256" }, key, sig, message);
  assert.equal(ok, true);
});

Deno.test("verifyCompact rejects the high-S twin of a valid signature", () => {
  const kp = deriveP256KeyPair("secret", "high-s");
  const sig = p256.Signature.fromBytes(signCompact(kp.privateKey, message), "compact");
  const highS = new p256.Signature(sig.r, N - sig.s).toBytes("compact");
  // The twin is a mathematically valid ECDSA signature...
  assert.equal(p256.verify(highS, message, kp.publicKey, { lowS: false }), true);
  // ...that atproto (and verifyCompact) refuses.
  assert.equal(verifyCompact(kp.publicKey, message, highS), false);
});

Deno.test("verifyCompact rejects DER signatures and any length other than 64", () => {
  const kp = deriveP256KeyPair("secret", "der");
  const compact = signCompact(kp.privateKey, message);
  const der = p256.Signature.fromBytes(compact, "compact").toBytes("der");
  assert.equal(verifyCompact(kp.publicKey, message, der), false);
  assert.equal(verifyCompact(kp.publicKey, message, compact.subarray(0, 63)), false);
  assert.equal(verifyCompact(kp.publicKey, message, new Uint8Array(65)), false);
  assert.equal(verifyCompact(kp.publicKey, message, new Uint8Array(0)), false);
});

Deno.test("verifyCompact rejects a wrong message, a wrong key and malformed keys", () => {
  const kp = deriveP256KeyPair("secret", "wrong");
  const other = deriveP256KeyPair("secret", "other");
  const sig = signCompact(kp.privateKey, message);
  assert.equal(verifyCompact(kp.publicKey, new TextEncoder().encode("other bytes"), sig), false);
  assert.equal(verifyCompact(other.publicKey, message, sig), false);
  assert.equal(verifyCompact(new Uint8Array(65), message, sig), false);
  assert.equal(verifyCompact(kp.publicKey.subarray(0, 64), message, sig), false);
  assert.equal(verifyCompact(kp.publicKey, message, new Uint8Array(64)), false);
});

Deno.test("verifyCompact accepts a compressed public key", () => {
  const kp = deriveP256KeyPair("secret", "compressed");
  const compressed = p256.getPublicKey(kp.privateKey, true);
  assert.equal(verifyCompact(compressed, message, signCompact(kp.privateKey, message)), true);
});
