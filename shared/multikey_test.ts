// Multikey encoding of P-256 keys (spec 5.1; docs/protocol.md 12.2).
import assert from "node:assert/strict";
import { base58btc } from "multiformats/bases/base58";
import { deriveP256KeyPair } from "./keys.ts";
import {
  encodeDidKey,
  encodeMultikey,
  encodeMultikeyUncompressed,
  MultikeyError,
  parseMultikey,
} from "./multikey.ts";

const { publicKey } = deriveP256KeyPair("multikey test secret", "test");

/** The spec's example P-256 did:key (docs/protocol.md 12.2). */
const SPEC_DID_KEY = "did:key:zDnaembgSGUhZULN2Caob4HLJPaxBh92N7rtH21TErzqf8HQo";

Deno.test("encodeMultikeyUncompressed decodes to exactly 0x80 0x12 followed by x and y", () => {
  const encoded = encodeMultikeyUncompressed(publicKey);
  assert.equal(encoded[0], "z");
  const bytes = base58btc.decode(encoded);
  assert.equal(bytes.length, 66);
  assert.deepEqual([bytes[0], bytes[1]], [0x80, 0x12]);
  assert.deepEqual(bytes.subarray(2), publicKey.subarray(1));
});

Deno.test("encodeMultikey decodes to 0x80 0x24 followed by the compressed point (zDn...)", () => {
  const encoded = encodeMultikey(publicKey);
  assert.ok(encoded.startsWith("zDn"), encoded);
  const bytes = base58btc.decode(encoded);
  assert.equal(bytes.length, 35);
  assert.deepEqual([bytes[0], bytes[1]], [0x80, 0x24]);
  assert.equal(bytes[2], 0x02 | (publicKey[64] & 1));
  assert.deepEqual(bytes.subarray(3), publicKey.subarray(1, 33));
});

Deno.test("parseMultikey returns the same 65-byte key from both forms and did:key", () => {
  const forms = [
    encodeMultikeyUncompressed(publicKey),
    encodeMultikey(publicKey),
    "did:key:" + encodeMultikeyUncompressed(publicKey),
    encodeDidKey(publicKey),
  ];
  for (const form of forms) assert.deepEqual(parseMultikey(form), publicKey, form);
});

Deno.test("parseMultikey round-trips the spec example did:key", () => {
  const key = parseMultikey(SPEC_DID_KEY);
  assert.equal(key.length, 65);
  assert.equal(key[0], 0x04);
  assert.equal(encodeDidKey(key), SPEC_DID_KEY);
  assert.deepEqual(parseMultikey(encodeMultikeyUncompressed(key)), key);
});

Deno.test("encoders accept a compressed 33-byte key and produce the same strings", () => {
  const compressed = Uint8Array.of(0x02 | (publicKey[64] & 1), ...publicKey.subarray(1, 33));
  assert.equal(encodeMultikey(compressed), encodeMultikey(publicKey));
  assert.equal(encodeMultikeyUncompressed(compressed), encodeMultikeyUncompressed(publicKey));
});

Deno.test("parseMultikey rejects a point that is not on P-256", () => {
  const bytes = base58btc.decode(encodeMultikeyUncompressed(publicKey));
  bytes[65] ^= 1; // flip a bit of y
  const bad = base58btc.encode(bytes);
  assert.throws(() => parseMultikey(bad), {
    name: "MultikeyError",
    message: `Multikey is not a point on P-256: "${bad}"`,
  });
});

Deno.test("parseMultikey rejects wrong lengths, prefixes and encodings, naming the value", () => {
  const uncompressed = base58btc.decode(encodeMultikeyUncompressed(publicKey));
  const cases: Array<[string, RegExp]> = [
    [base58btc.encode(uncompressed.subarray(0, 65)), /coordinates must be 64 bytes/],
    [base58btc.encode(Uint8Array.of(0x80, 0x24, 2, 3)), /compressed key must be 33 bytes/],
    [base58btc.encode(Uint8Array.of(0xed, 0x01, ...new Uint8Array(32))), /unsupported key type/],
    [
      base58btc.encode(Uint8Array.of(0xe7, 0x01, ...uncompressed.subarray(2, 35))),
      /secp256k1 key; only P-256 is supported/,
    ],
    ["", /expected a "z" prefix/],
    ["did:key:", /expected a "z" prefix/],
    ["mAYAS", /expected a "z" prefix/],
    ["z0OIl", /not valid base58btc/],
    ["z" + "1".repeat(300), /Invalid multikey/],
  ];
  for (const [input, pattern] of cases) {
    assert.throws(() => parseMultikey(input), (err: unknown) => {
      assert.ok(err instanceof MultikeyError, `${input}: ${err}`);
      assert.match(err.message, pattern);
      assert.ok(err.message.includes(JSON.stringify(input.slice(0, 128)).slice(1, -1)));
      return true;
    });
  }
});

Deno.test("encoders reject bytes that are not a P-256 point", () => {
  assert.throws(() => encodeMultikeyUncompressed(new Uint8Array(64)), {
    name: "MultikeyError",
    message:
      "Public key must be a 65-byte uncompressed or 33-byte compressed P-256 point, got 64 bytes",
  });
  const offCurve = publicKey.slice();
  offCurve[64] ^= 1;
  assert.throws(() => encodeMultikey(offCurve), {
    name: "MultikeyError",
    message: "Public key is not a point on P-256",
  });
});
