import assert from "node:assert/strict";
import { p256 } from "@noble/curves/nist.js";
import { sha256 } from "@noble/hashes/sha2.js";
import { publicKeyFromPrivate, signCompact, verifyCompact } from "../../shared/keys.ts";
import { compactLowS, LIBCRYPTO_PATHS, MAX_NATIVE_KEYS, NativeP256Signer } from "./native_sign.ts";
import { CommitSigner, commitSigner } from "./signer.ts";
import { cidForCbor, formatCid, nativeSha256InUse } from "../../shared/cid.ts";
import { taskPermissionSet } from "../../runtime/_test_helpers.ts";

const ORDER = 0xffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551n;

function keyOf(i: number): Uint8Array {
  const key = new Uint8Array(32).fill(0x21);
  key[30] = i >> 8;
  key[31] = i & 0xff;
  return key;
}

function messageOf(i: number): Uint8Array {
  return new TextEncoder().encode(`commit ${i} `.repeat(1 + (i % 13)));
}

function bigOf(bytes: Uint8Array): bigint {
  let n = 0n;
  for (const b of bytes) n = (n << 8n) | BigInt(b);
  return n;
}

function bytesOf(n: bigint): Uint8Array {
  const out = new Uint8Array(32);
  for (let i = 31; i >= 0; i--, n >>= 8n) out[i] = Number(n & 0xffn);
  return out;
}

/** DER of (r, s) as OpenSSL writes it: minimal integers, a 0x00 before a set high bit. */
function der(r: Uint8Array, s: Uint8Array): Uint8Array {
  const int = (v: Uint8Array) => {
    let i = 0;
    while (i < 31 && v[i] === 0) i++;
    const body = v[i] & 0x80 ? [0, ...v.subarray(i)] : [...v.subarray(i)];
    return [0x02, body.length, ...body];
  };
  const content = [...int(r), ...int(s)];
  return new Uint8Array([0x30, content.length, ...content]);
}

// The module's own tests need no library: DER to compact, low S (spec 2.3 signature form).

Deno.test("compactLowS turns DER into the compact low-S form noble makes", () => {
  for (let i = 0; i < 200; i++) {
    const sig = signCompact(keyOf(i), messageOf(i));
    const r = sig.subarray(0, 32);
    const s = sig.subarray(32);
    assert.deepEqual(compactLowS(der(r, s)), sig, `low S kept, signature ${i}`);
    // The same signature with S = n - S (as OpenSSL may return it) is brought back to low S.
    const high = bytesOf(ORDER - bigOf(s));
    assert.deepEqual(compactLowS(der(r, high)), sig, `high S lowered, signature ${i}`);
  }
});

Deno.test("compactLowS pads short integers and keeps S = n/2, the highest low S", () => {
  const r = new Uint8Array(32);
  r[31] = 5; // a 1-byte INTEGER
  const half = bytesOf(ORDER >> 1n);
  const out = compactLowS(der(r, half));
  assert.deepEqual(out.subarray(0, 32), r);
  assert.deepEqual(out.subarray(32), half);
  const above = bytesOf((ORDER >> 1n) + 1n);
  assert.deepEqual(compactLowS(der(r, above)).subarray(32), bytesOf(ORDER - ((ORDER >> 1n) + 1n)));
});

Deno.test("compactLowS rejects malformed DER", () => {
  const good = der(keyOf(1), keyOf(2));
  const cases: [string, Uint8Array][] = [
    ["not a SEQUENCE", Uint8Array.of(0x31, ...good.subarray(1))],
    ["wrong SEQUENCE length", Uint8Array.of(0x30, good[1] + 1, ...good.subarray(2))],
    ["trailing byte", Uint8Array.of(0x30, good[1] + 1, ...good.subarray(2), 0)],
    ["not an INTEGER", Uint8Array.of(0x30, good[1], 0x04, ...good.subarray(3))],
    ["integer past the end", Uint8Array.of(0x30, 6, 0x02, 1, 1, 0x02, 9, 1)],
    ["empty integer", Uint8Array.of(0x30, 6, 0x02, 0, 0x02, 2, 1, 1)],
    [
      "33 significant bytes",
      Uint8Array.of(0x30, 38, 0x02, 33, ...new Uint8Array(33).fill(1), 0x02, 1, 1),
    ],
    ["too short", Uint8Array.of(0x30, 0)],
  ];
  for (const [name, bytes] of cases) {
    assert.throws(() => compactLowS(bytes), /DER/, name);
  }
});

Deno.test("NativeP256Signer.open gives null for libraries it may not or cannot load", () => {
  assert.equal(NativeP256Signer.open(["/nonexistent/libcrypto.so.3"]), null);
  assert.equal(NativeP256Signer.open([]), null);
  // A library that loads but is not OpenSSL 3 (no EVP_PKEY_sign): skipped, not fatal.
  const libc = ["/usr/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/aarch64-linux-gnu/libc.so.6"]
    .find((path) => {
      try {
        return Deno.statSync(path).isFile;
      } catch {
        return false;
      }
    });
  if (libc !== undefined) assert.equal(NativeP256Signer.open([libc]), null);
});

/** The first listed libcrypto that exists on this machine, or null. */
function installedLibcrypto(): string | null {
  for (const path of LIBCRYPTO_PATHS) {
    try {
      if (Deno.statSync(path).isFile) return path;
    } catch {
      // not here
    }
  }
  return null;
}

Deno.test("with exactly the pds task's permissions, the signer loads the installed OpenSSL and signs", async () => {
  const config = JSON.parse(await Deno.readTextFile(new URL("../../deno.json", import.meta.url)));
  for (const task of ["pds", "dev", "compile:pds"]) {
    const set = taskPermissionSet(config, task);
    assert.deepEqual(set.grants.ffi, [...LIBCRYPTO_PATHS], `task ${task}'s set ${set.name} ffi`);
  }
  // Deno refuses some FFI calls under a path-scoped grant that an unscoped one (as the test
  // task's) allows: run the signer in a process that has the pds task's permission set only.
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      `--config=${new URL("../../deno.json", import.meta.url).pathname}`,
      taskPermissionSet(config, "pds").flag,
      new URL("./_native_sign_probe.ts", import.meta.url).pathname,
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
  const probe = JSON.parse(new TextDecoder().decode(out.stdout));
  const installed = installedLibcrypto();
  if (installed === null) {
    console.log(`native_sign_test: no OpenSSL 3 at ${LIBCRYPTO_PATHS.join(", ")}; noble signs`);
  }
  assert.deepEqual(
    probe,
    installed === null ? { path: null, verified: null } : {
      path: installed,
      verified: true,
    },
  );
});

// With OpenSSL (the test task grants --allow-ffi; skipped where libcrypto 3 is absent).

const native = NativeP256Signer.open();
if (native === null && installedLibcrypto() !== null) {
  throw new Error(`OpenSSL 3 is at ${installedLibcrypto()} but the native signer did not load`);
}
if (native === null) {
  console.log(`native_sign_test: no OpenSSL 3 at ${LIBCRYPTO_PATHS.join(", ")}; skipping`);
}

Deno.test({
  name: "OpenSSL signatures verify against the public key, low S, for 300 keys (spec 2.3)",
  ignore: native === null,
  fn() {
    for (let i = 0; i < 300; i++) {
      const sig = native!.sign(keyOf(i), messageOf(i));
      assert.equal(sig.length, 64);
      const publicKey = publicKeyFromPrivate(keyOf(i));
      // verifyCompact refuses high S, so this also checks the normalisation.
      assert.equal(verifyCompact(publicKey, messageOf(i), sig), true, `signature ${i}`);
      assert.ok(bigOf(sig.subarray(32)) <= ORDER >> 1n, `low S, signature ${i}`);
      assert.equal(verifyCompact(publicKey, messageOf(i + 1), sig), false, `other message ${i}`);
    }
  },
});

Deno.test({
  name: "OpenSSL's SHA-256 gives noble's digests, and nothing once the signer is closed",
  ignore: native === null,
  fn() {
    const signer = NativeP256Signer.open()!;
    const out = new Uint8Array(32);
    for (const len of [0, 1, 55, 56, 63, 64, 65, 300, 1_048_576]) {
      const data = new Uint8Array(len).map((_, i) => (i * 131 + len) & 0xff);
      assert.equal(signer.sha256Into(data, out), true);
      assert.deepEqual(out, sha256(data), `length ${len}`);
    }
    // A view: the digest of the viewed bytes only, written into a view.
    const big = new Uint8Array(100).map((_, i) => i);
    const into = new Uint8Array(40);
    assert.equal(signer.sha256Into(big.subarray(10, 20), into.subarray(4, 36)), true);
    assert.deepEqual(into.subarray(4, 36), sha256(big.subarray(10, 20)));
    assert.deepEqual(into.subarray(0, 4), new Uint8Array(4));
    assert.equal(signer.sha256Into(big, new Uint8Array(31)), false);
    signer.close();
    out.fill(0);
    assert.equal(signer.sha256Into(big, out), false);
    assert.deepEqual(out, new Uint8Array(32));
  },
});

Deno.test("the process-wide commit signer makes CIDs hash with its OpenSSL, when it has one", () => {
  const signer = commitSigner();
  const installed = nativeSha256InUse();
  assert.equal(installed !== null, native !== null);
  if (installed !== null) {
    // It is OpenSSL's (this process's signer's), and writes into a view at an offset only.
    const data = new Uint8Array(70).map((_, i) => i * 3);
    const out = new Uint8Array(40).fill(9);
    assert.equal(installed(data.subarray(5, 65), out.subarray(4, 36)), true);
    assert.deepEqual(out.subarray(4, 36), sha256(data.subarray(5, 65)));
    assert.deepEqual([...out.subarray(0, 4), ...out.subarray(36)], new Array(8).fill(9));
  }
  assert.equal(signer.nativePath !== null, native !== null);
  const block = new TextEncoder().encode("a block");
  const want = new Uint8Array([1, 0x71, 0x12, 32, ...sha256(block)]);
  assert.deepEqual(cidForCbor(block).bytes, want);
  assert.equal(formatCid(cidForCbor(block)).length, 59);
});

Deno.test({
  name: "OpenSSL signs over SHA-256 of the message: noble verifies with its own hashing",
  ignore: native === null,
  fn() {
    const key = keyOf(9);
    const message = new TextEncoder().encode("a commit, hashed once");
    const sig = native!.sign(key, message);
    assert.equal(p256.verify(sig, message, publicKeyFromPrivate(key)), true);
    // Random nonces: two signatures of one message differ, and both verify.
    const again = native!.sign(key, message);
    assert.notDeepEqual(again, sig);
    assert.equal(verifyCompact(publicKeyFromPrivate(key), message, again), true);
  },
});

Deno.test({
  name: "the OpenSSL key cache stays at its bound and still signs with evicted keys",
  ignore: native === null,
  fn() {
    const signer = NativeP256Signer.open()!;
    try {
      const keys = Array.from({ length: MAX_NATIVE_KEYS + 5 }, (_, i) => keyOf(i));
      for (const key of keys) signer.sign(key, messageOf(1));
      assert.equal(signer.loadedKeys, MAX_NATIVE_KEYS);
      // The first key was evicted (least recently used); it is loaded again and signs right.
      const sig = signer.sign(keys[0], messageOf(2));
      assert.equal(verifyCompact(publicKeyFromPrivate(keys[0]), messageOf(2), sig), true);
      assert.equal(signer.loadedKeys, MAX_NATIVE_KEYS);
    } finally {
      signer.close();
    }
  },
});

Deno.test({
  name: "the native signer refuses a key outside 0 < d < n, and refuses to sign once closed",
  ignore: native === null,
  fn() {
    const signer = NativeP256Signer.open()!;
    assert.throws(() => signer.sign(new Uint8Array(32), messageOf(1)), /not a P-256 scalar/);
    assert.throws(() => signer.sign(bytesOf(ORDER), messageOf(1)), /not a P-256 scalar/);
    assert.throws(() => signer.sign(new Uint8Array(32).fill(0xff), messageOf(1)), /not a P-256/);
    // n - 1, the largest scalar, is accepted.
    const last = bytesOf(ORDER - 1n);
    const sig = signer.sign(last, messageOf(1));
    assert.equal(verifyCompact(publicKeyFromPrivate(last), messageOf(1), sig), true);
    assert.equal(signer.loadedKeys, 1);
    assert.throws(() => signer.sign(new Uint8Array(31).fill(1), messageOf(1)), /32 bytes/);
    signer.close();
    assert.throws(() => signer.sign(keyOf(1), messageOf(1)), /closed/);
  },
});

Deno.test({
  name: "CommitSigner signs through OpenSSL inline, and falls back to noble when it fails",
  ignore: native === null,
  async fn() {
    const opened = NativeP256Signer.open()!;
    const signer = new CommitSigner({ native: opened });
    try {
      assert.equal(signer.nativePath, opened.path);
      const sig = signer.sign(keyOf(3), messageOf(3), true);
      assert.ok(sig instanceof Uint8Array, "a signature, not a promise: no worker hop");
      assert.equal(verifyCompact(publicKeyFromPrivate(keyOf(3)), messageOf(3), sig), true);
      assert.equal(signer.usingWorker, false);
      // OpenSSL gone: the same call signs with noble (deterministic, so equal to signCompact).
      opened.close();
      const fallback = await signer.sign(keyOf(4), messageOf(4), false);
      assert.deepEqual(fallback, signCompact(keyOf(4), messageOf(4)));
    } finally {
      opened.close();
      await signer.close();
    }
  },
});
