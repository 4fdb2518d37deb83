// Conformance: signatures and did:key parsing against the interop `crypto/` vectors
// (docs/protocol.md 7 and 16 items 5 and 6; spec 5.1).
import assert from "node:assert/strict";
import { base58btc } from "multiformats/bases/base58";
import { p256 } from "@noble/curves/nist.js";
import { publicKeyFromPrivate, verifyCompact } from "../shared/keys.ts";
import { encodeDidKey, MultikeyError, parseMultikey } from "../shared/multikey.ts";

// tests/ -> repo root (/work/main/) -> its sibling shared/ (/work/shared/testdata/...).
const repoRoot = new URL("../", import.meta.url);
const vectorsDir = new URL("../shared/testdata/atproto-interop/", repoRoot);
const cryptoDir = new URL("crypto/", vectorsDir);

function dirExists(url: URL): boolean {
  try {
    return Deno.statSync(url).isDirectory;
  } catch {
    return false;
  }
}

const exists = dirExists(cryptoDir);
if (!exists) {
  console.log(`Skipping crypto conformance tests: ${cryptoDir.pathname} is absent`);
}

interface SignatureFixture {
  comment: string;
  messageBase64: string;
  algorithm: string;
  didDocSuite: string;
  publicKeyDid: string;
  publicKeyMultibase: string;
  signatureBase64: string;
  validSignature: boolean;
  tags: string[];
}

function readJson<T>(name: string): T {
  return JSON.parse(Deno.readTextFileSync(new URL(name, cryptoDir))) as T;
}

/** DAG-CBOR of `{"hello": "world"}` (docs/protocol.md 16 item 5). */
const HELLO_WORLD_CBOR = Uint8Array.of(
  0xa1,
  0x65,
  0x68,
  0x65,
  0x6c,
  0x6c,
  0x6f,
  0x65,
  0x77,
  0x6f,
  0x72,
  0x6c,
  0x64,
);

/** Decodes standard or URL-safe base64, padded or not (the fixtures use unpadded standard). */
function fromBase64(s: string): Uint8Array {
  const std = s.replaceAll("-", "+").replaceAll("_", "/");
  const bin = atob(std + "=".repeat((4 - (std.length % 4)) % 4));
  return Uint8Array.from(bin, (c) => c.charCodeAt(0));
}

Deno.test({
  name: "verifyCompact accepts or rejects every P-256 signature fixture as labelled",
  ignore: !exists,
  fn() {
    const fixtures = readJson<SignatureFixture[]>("signature-fixtures.json");
    const p256 = fixtures.filter((f) => f.algorithm === "ES256");
    assert.equal(p256.length, 3);
    // The set covers a valid signature, a high-S one and a DER one.
    assert.deepEqual(p256.map((f) => [f.validSignature, f.tags]), [
      [true, []],
      [false, ["high-s"]],
      [false, ["der-encoded"]],
    ]);
    for (const f of p256) {
      const key = parseMultikey(f.publicKeyDid);
      const message = fromBase64(f.messageBase64);
      // The message is the DAG-CBOR of {"hello":"world"}; verifyCompact hashes it itself.
      assert.deepEqual(message, HELLO_WORLD_CBOR);
      assert.equal(
        verifyCompact(key, message, fromBase64(f.signatureBase64)),
        f.validSignature,
        f.comment,
      );
    }
  },
});

Deno.test({
  name: "the rejected P-256 fixtures verify once normalised, so high-S and DER are the only faults",
  ignore: !exists,
  fn() {
    const fixtures = readJson<SignatureFixture[]>("signature-fixtures.json");
    const byTag = (tag: string) =>
      fixtures.find((f) => f.algorithm === "ES256" && f.tags.includes(tag))!;
    const highS = byTag("high-s");
    const key = parseMultikey(highS.publicKeyDid);
    const message = fromBase64(highS.messageBase64);
    const high = p256.Signature.fromBytes(fromBase64(highS.signatureBase64), "compact");
    assert.equal(high.hasHighS(), true);
    const low = new p256.Signature(high.r, p256.Point.Fn.ORDER - high.s).toBytes("compact");
    assert.equal(verifyCompact(key, message, low), true);

    const der = byTag("der-encoded");
    const derBytes = fromBase64(der.signatureBase64);
    assert.notEqual(derBytes.length, 64);
    const compact = p256.Signature.fromBytes(derBytes, "der").toBytes("compact");
    assert.equal(verifyCompact(parseMultikey(der.publicKeyDid), message, compact), true);
  },
});

Deno.test({
  name: "parseMultikey rejects every secp256k1 signature fixture key with a MultikeyError",
  ignore: !exists,
  fn() {
    const fixtures = readJson<SignatureFixture[]>("signature-fixtures.json");
    const k256 = fixtures.filter((f) => f.algorithm === "ES256K");
    assert.equal(k256.length, 3);
    for (const f of k256) {
      assert.throws(() => parseMultikey(f.publicKeyDid), {
        name: "MultikeyError",
        message: `Multikey is a secp256k1 key; only P-256 is supported: "${f.publicKeyDid}"`,
      });
    }
  },
});

Deno.test({
  name: "parseMultikey maps every w3c P-256 did:key to the public key of its private key",
  ignore: !exists,
  fn() {
    const entries = readJson<Array<{ privateKeyBytesBase58: string; publicDidKey: string }>>(
      "w3c_didkey_P256.json",
    );
    assert.ok(entries.length > 0);
    for (const e of entries) {
      const privateKey = base58btc.baseDecode(e.privateKeyBytesBase58);
      assert.equal(privateKey.length, 32);
      const expected = publicKeyFromPrivate(privateKey);
      assert.deepEqual(parseMultikey(e.publicDidKey), expected);
      // And the encoder reproduces the exact did:key string.
      assert.equal(encodeDidKey(expected), e.publicDidKey);
    }
  },
});

Deno.test({
  name: "parseMultikey rejects every w3c secp256k1 did:key with a MultikeyError",
  ignore: !exists,
  fn() {
    const entries = readJson<Array<{ publicDidKey: string }>>("w3c_didkey_K256.json");
    assert.ok(entries.length > 0);
    for (const e of entries) {
      assert.throws(() => parseMultikey(e.publicDidKey), (err: unknown) => {
        assert.ok(err instanceof MultikeyError);
        assert.match(err.message, /secp256k1 key; only P-256 is supported/);
        assert.ok(err.message.includes(e.publicDidKey), "message names the value");
        return true;
      });
    }
  },
});
