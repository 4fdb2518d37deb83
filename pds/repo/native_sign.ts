/**
 * Commit signatures through the system's OpenSSL (`libcrypto.so.3`, by Deno FFI), when the
 * process may load it. A P-256 signature costs about 40 µs of native code there, against about
 * 300 µs of BigInt JavaScript in `@noble/curves` (the signing worker's cost on the 2-core bench
 * machine, plus the garbage it leaves): the largest single cost of a commit.
 *
 * The result has exactly the form `shared/keys.ts` `signCompact` gives: ECDSA over SHA-256 of the
 * message, 64-byte compact `r||s`, low S (OpenSSL's DER signature is converted, and S replaced by
 * n - S when it is high). Only the nonce differs: OpenSSL draws it at random, where noble derives
 * it (RFC 6979); atproto verifiers accept either, since both are plain ECDSA.
 *
 * Loading is opt-in and fails closed to `@noble/curves`:
 * - only the absolute paths in {@link LIBCRYPTO_PATHS} are tried, and only those the process
 *   already has `--allow-ffi` for (no permission prompt);
 * - a library that loads must pass a self-test (a signature that noble verifies) or is unloaded;
 * - a signature the library fails to make throws, and the caller signs with noble instead.
 *
 * Each account key becomes an OpenSSL key and signing context once (bounded, least recently used
 * freed first), so a signature is one FFI call.
 *
 * @module
 */

import { bytesToHex, hexToBytes } from "@noble/hashes/utils.js";
import { publicKeyFromPrivate, verifyCompact } from "../../shared/keys.ts";

/** Where OpenSSL 3's libcrypto lives on common Linux distributions (Debian, Fedora, Alpine). */
export const LIBCRYPTO_PATHS = [
  "/usr/lib/x86_64-linux-gnu/libcrypto.so.3",
  "/usr/lib/aarch64-linux-gnu/libcrypto.so.3",
  "/usr/lib64/libcrypto.so.3",
  "/usr/lib/libcrypto.so.3",
] as const;

/** Most account keys kept loaded in OpenSSL at once. */
export const MAX_NATIVE_KEYS = 1_024;

/** Longest DER ECDSA P-256 signature (two 33-byte integers and their headers). */
const MAX_DER_SIG = 72;

const SYMBOLS = {
  BIO_new_mem_buf: { parameters: ["buffer", "i32"], result: "pointer" },
  d2i_PrivateKey_bio: { parameters: ["pointer", "pointer"], result: "pointer" },
  BIO_free: { parameters: ["pointer"], result: "i32" },
  EVP_PKEY_CTX_new: { parameters: ["pointer", "pointer"], result: "pointer" },
  EVP_PKEY_sign_init: { parameters: ["pointer"], result: "i32" },
  EVP_PKEY_sign: {
    parameters: ["pointer", "buffer", "buffer", "buffer", "usize"],
    result: "i32",
  },
  EVP_PKEY_CTX_free: { parameters: ["pointer"], result: "void" },
  EVP_PKEY_free: { parameters: ["pointer"], result: "void" },
  ERR_clear_error: { parameters: [], result: "void" },
  // Returns its `md` argument, which the caller already has: declared void, so no pointer
  // object is made per call.
  SHA256: { parameters: ["buffer", "usize", "buffer"], result: "void" },
} as const;

type Lib = Deno.DynamicLibrary<typeof SYMBOLS>;

interface NativeKey {
  pkey: Deno.PointerObject;
  ctx: Deno.PointerObject;
}

/** The curve order n of P-256, big-endian. */
const ORDER = hexToBytes("ffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551");
/** floor(n / 2): S above it is high. */
const HALF_ORDER = hexToBytes("7fffffff800000007fffffffffffffffde737d56d38bcf4279dce5617e3192a8");
/**
 * PKCS#8 `PrivateKeyInfo` DER before a 32-byte P-256 scalar (id-ecPublicKey, prime256v1, and a
 * SEC1 `ECPrivateKey` without its optional fields).
 */
const PKCS8_PREFIX = hexToBytes(
  "308141020100301306072a8648ce3d020106082a8648ce3d030107042730250201010420",
);

/** Signs with P-256 keys through OpenSSL; {@link open} one, {@link close} it when done. */
export class NativeP256Signer {
  readonly #lib: Lib;
  readonly #path: string;
  /**
   * Keys by the SHA-256 of the private key (hex): by content, so that no reference to a caller's
   * key bytes is kept, and bytes changed in place are a different key.
   */
  readonly #keys = new Map<string, NativeKey>();
  readonly #sig = new Uint8Array(MAX_DER_SIG);
  readonly #sigLength = new BigUint64Array(1);
  readonly #sigLengthBytes = new Uint8Array(this.#sigLength.buffer);
  readonly #digest = new Uint8Array(32);
  readonly #keyDigest = new Uint8Array(32);
  #closed = false;

  private constructor(lib: Lib, path: string) {
    this.#lib = lib;
    this.#path = path;
  }

  /**
   * Loads the first of `paths` that this process may load by FFI and that passes the self-test;
   * null when none does (no permission, no library, or a failed self-test).
   */
  static open(paths: readonly string[] = LIBCRYPTO_PATHS): NativeP256Signer | null {
    if (typeof Deno?.dlopen !== "function") return null;
    for (const path of paths) {
      if (Deno.permissions.querySync({ name: "ffi", path }).state !== "granted") continue;
      let lib: Lib;
      try {
        lib = Deno.dlopen(path, SYMBOLS);
      } catch {
        continue; // not there, or not OpenSSL 3
      }
      const signer = new NativeP256Signer(lib, path);
      if (signer.#selfTest()) return signer;
      signer.close();
    }
    return null;
  }

  /** The library's path. */
  get path(): string {
    return this.#path;
  }

  /** Account keys loaded now (for tests). */
  get loadedKeys(): number {
    return this.#keys.size;
  }

  /**
   * Returns the 64-byte compact low-S signature over SHA-256(`message`) with the 32-byte
   * `privateKey`.
   *
   * @throws {Error} when OpenSSL refuses the key or fails to sign, or after {@link close}
   */
  sign(privateKey: Uint8Array, message: Uint8Array): Uint8Array {
    if (this.#closed) throw new Error("Native signer is closed");
    const key = this.#key(privateKey);
    const digest = this.#digest;
    this.#sha256(message, digest);
    this.#sigLength[0] = BigInt(MAX_DER_SIG);
    const ok = this.#lib.symbols.EVP_PKEY_sign(
      key.ctx,
      this.#sig,
      this.#sigLengthBytes,
      digest,
      32n,
    );
    if (ok !== 1) {
      this.#lib.symbols.ERR_clear_error();
      throw new Error("OpenSSL could not sign");
    }
    return compactLowS(this.#sig.subarray(0, Number(this.#sigLength[0])));
  }

  /**
   * Writes SHA-256(`data`) into `out` (32 bytes) with OpenSSL; false once the signer is closed
   * (the shape `useNativeSha256` in `shared/cid.ts` takes).
   */
  sha256Into(data: Uint8Array, out: Uint8Array): boolean {
    if (this.#closed || out.length !== 32) return false;
    this.#sha256(data, out);
    return true;
  }

  /** OpenSSL's one-shot SHA-256 of `data` into the 32 bytes of `out`. */
  #sha256(data: Uint8Array, out: Uint8Array): void {
    this.#lib.symbols.SHA256(data, BigInt(data.length), out);
  }

  /** Frees every loaded key and unloads the library. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const key of this.#keys.values()) this.#free(key);
    this.#keys.clear();
    this.#lib.close();
  }

  /** The cache key of a private key: its SHA-256, in hex. */
  #keyId(privateKey: Uint8Array): string {
    this.#sha256(privateKey, this.#keyDigest);
    return bytesToHex(this.#keyDigest);
  }

  #key(privateKey: Uint8Array): NativeKey {
    const id = this.#keyId(privateKey);
    const hit = this.#keys.get(id);
    if (hit !== undefined) {
      // Most recently used last: the first entry is the one to free.
      this.#keys.delete(id);
      this.#keys.set(id, hit);
      return hit;
    }
    if (privateKey.length !== 32) throw new Error("Private key must be 32 bytes");
    // OpenSSL takes 0 (and would make a signature with it): check 0 < d < n here.
    if (privateKey.every((b) => b === 0) || compareBytes(privateKey, ORDER) >= 0) {
      throw new Error("Private key is not a P-256 scalar");
    }
    const der = new Uint8Array(PKCS8_PREFIX.length + 32);
    der.set(PKCS8_PREFIX);
    der.set(privateKey, PKCS8_PREFIX.length);
    // A memory BIO reads the DER where it is: no pointer is made in JavaScript, which Deno
    // allows only with unscoped --allow-ffi (the tasks grant the library's paths only).
    const symbols = this.#lib.symbols;
    const bio = symbols.BIO_new_mem_buf(der, der.length);
    const pkey = bio === null ? null : symbols.d2i_PrivateKey_bio(bio, null);
    if (bio !== null) symbols.BIO_free(bio);
    der.fill(0);
    if (pkey === null) {
      symbols.ERR_clear_error();
      throw new Error("OpenSSL refused the private key");
    }
    const ctx = symbols.EVP_PKEY_CTX_new(pkey, null);
    if (ctx === null || symbols.EVP_PKEY_sign_init(ctx) !== 1) {
      if (ctx !== null) symbols.EVP_PKEY_CTX_free(ctx);
      symbols.EVP_PKEY_free(pkey);
      symbols.ERR_clear_error();
      throw new Error("OpenSSL could not prepare a signing context");
    }
    // Decoding may leave notes in the thread's OpenSSL error queue even when it succeeds.
    symbols.ERR_clear_error();
    const key = { pkey, ctx };
    if (this.#keys.size >= MAX_NATIVE_KEYS) {
      const [oldest, evicted] = this.#keys.entries().next().value!;
      this.#keys.delete(oldest);
      this.#free(evicted);
    }
    this.#keys.set(id, key);
    return key;
  }

  #free(key: NativeKey): void {
    this.#lib.symbols.EVP_PKEY_CTX_free(key.ctx);
    this.#lib.symbols.EVP_PKEY_free(key.pkey);
  }

  /** Signs with a fixed key and checks the result with noble; forgets the key after. */
  #selfTest(): boolean {
    const privateKey = new Uint8Array(32).fill(7);
    const message = new TextEncoder().encode("native signer self-test");
    try {
      const sig = this.sign(privateKey, message);
      return verifyCompact(publicKeyFromPrivate(privateKey), message, sig);
    } catch {
      return false;
    } finally {
      const id = this.#keyId(privateKey);
      const key = this.#keys.get(id);
      if (key !== undefined) this.#free(key);
      this.#keys.delete(id);
    }
  }
}

/**
 * Converts a DER ECDSA signature (`30 len 02 rlen r 02 slen s`) to compact `r||s` with low S.
 *
 * @throws {Error} when the DER is malformed or an integer does not fit 32 bytes
 */
export function compactLowS(der: Uint8Array): Uint8Array {
  if (der.length < 8 || der[0] !== 0x30 || der[1] !== der.length - 2) {
    throw new Error("Malformed DER signature");
  }
  const out = new Uint8Array(64);
  const afterR = derInteger(der, 2, out, 0);
  const afterS = derInteger(der, afterR, out, 32);
  if (afterS !== der.length) throw new Error("Malformed DER signature");
  const s = out.subarray(32);
  if (compareBytes(s, HALF_ORDER) > 0) subtractFromOrder(s);
  return out;
}

/** Copies the DER INTEGER at `at` into `out[offset..offset+32)`; returns the offset after it. */
function derInteger(der: Uint8Array, at: number, out: Uint8Array, offset: number): number {
  if (der[at] !== 0x02) throw new Error("Malformed DER signature");
  const length = der[at + 1];
  let start = at + 2;
  const end = start + length;
  if (length === 0 || end > der.length) throw new Error("Malformed DER signature");
  while (start < end - 1 && der[start] === 0) start++;
  if (end - start > 32) throw new Error("DER integer too long for P-256");
  out.set(der.subarray(start, end), offset + 32 - (end - start));
  return end;
}

function compareBytes(a: Uint8Array, b: Uint8Array): number {
  for (let i = 0; i < a.length; i++) {
    if (a[i] !== b[i]) return a[i] - b[i];
  }
  return 0;
}

/** Replaces the 32-byte big-endian `s` by n - s, in place. */
function subtractFromOrder(s: Uint8Array): void {
  let borrow = 0;
  for (let i = 31; i >= 0; i--) {
    const d = ORDER[i] - s[i] - borrow;
    borrow = d < 0 ? 1 : 0;
    s[i] = d & 0xff;
  }
}
