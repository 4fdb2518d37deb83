/**
 * Minting `did:plc:` identifiers (docs/protocol.md 13.2): a signed genesis operation whose
 * rotation key is the account host's service key and whose `atproto` verification method is the
 * account's own signing key. The DID is `did:plc:` + the first 24 characters of
 * base32(SHA-256(DAG-CBOR(signed op))). The operation is kept, not submitted to a directory.
 *
 * @module
 */

import { sha256 } from "@noble/hashes/sha2.js";
import { base32 } from "multiformats/bases/base32";
import { base64url } from "jose";
import { encodeCbor } from "../../shared/cbor.ts";
import { type P256KeyPair, signCompact } from "../../shared/keys.ts";
import { encodeDidKey } from "../../shared/multikey.ts";

/** A signed did:plc operation (JSON form). */
export interface PlcOperation {
  type: "plc_operation";
  rotationKeys: string[];
  verificationMethods: Record<string, string>;
  alsoKnownAs: string[];
  services: Record<string, { type: string; endpoint: string }>;
  prev: string | null;
  sig: string;
}

/** Builds and signs a genesis operation and derives its DID. */
export function mintPlcDid(opts: {
  /** Signs the operation and is its only rotation key. */
  rotationKey: P256KeyPair;
  /** The account's signing key (`verificationMethods.atproto`). */
  signingPublicKey: Uint8Array;
  handle: string;
  pdsUrl: string;
}): { did: string; op: PlcOperation } {
  const unsigned = {
    type: "plc_operation" as const,
    rotationKeys: [encodeDidKey(opts.rotationKey.publicKey)],
    verificationMethods: { atproto: encodeDidKey(opts.signingPublicKey) },
    alsoKnownAs: [`at://${opts.handle}`],
    services: { atproto_pds: { type: "AtprotoPersonalDataServer", endpoint: opts.pdsUrl } },
    prev: null,
  };
  const sig = base64url.encode(signCompact(opts.rotationKey.privateKey, encodeCbor(unsigned)));
  const op: PlcOperation = { ...unsigned, sig };
  return { did: plcDidForOperation(op), op };
}

/** The DID of a signed genesis operation. */
export function plcDidForOperation(op: PlcOperation): string {
  return "did:plc:" + base32.baseEncode(sha256(encodeCbor(op))).slice(0, 24);
}
