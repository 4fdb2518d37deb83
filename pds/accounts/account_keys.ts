/**
 * Per-account P-256 signing keys: generated when the account is created, stored in KV (in the
 * same atomic operation as the account), listed in the account's DID document, and used to sign
 * the account's repository commits.
 *
 * Keys never change once written, so reads are cached by the {@link AccountKeys} of the context.
 *
 * @module
 */

import type { P256KeyPair } from "../../shared/keys.ts";
import { accountSigningKeyKey } from "../store/keys.ts";

/** Stored form of an account key pair. */
interface StoredKeyPair {
  privateKey: Uint8Array;
  publicKey: Uint8Array;
}

/** The account keys of one KV store, cached (keys never change once written). */
export class AccountKeys {
  readonly #kv: Deno.Kv;
  readonly #cache = new Map<string, P256KeyPair>();

  constructor(kv: Deno.Kv) {
    this.#kv = kv;
  }

  /** Returns the signing key pair of `did`, or null when the account has none (unknown DID). */
  async get(did: string): Promise<P256KeyPair | null> {
    const hit = this.#cache.get(did);
    if (hit) return hit;
    const entry = await this.#kv.get<StoredKeyPair>(accountSigningKeyKey(did));
    if (entry.value === null) return null;
    const pair: P256KeyPair = {
      privateKey: entry.value.privateKey,
      publicKey: entry.value.publicKey,
    };
    this.#cache.set(did, pair);
    return pair;
  }
}

/** Adds the write of a new account's key pair to an atomic operation (no existing key allowed). */
export function setAccountKeyPair(
  op: Deno.AtomicOperation,
  did: string,
  keyPair: P256KeyPair,
): Deno.AtomicOperation {
  const key = accountSigningKeyKey(did);
  const value: StoredKeyPair = { privateKey: keyPair.privateKey, publicKey: keyPair.publicKey };
  return op.check({ key, versionstamp: null }).set(key, value);
}
