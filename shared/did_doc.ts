/**
 * DID documents as the account host serves them (the index's tests stand in for it with the
 * same): its own `did:web` document (spec 4.1, 5.1: the service key in the spec's `0x80 0x12`
 * uncompressed Multikey form) and each hosted account's `did:plc` document (the account key in
 * the standard compressed form, docs/protocol.md 12.1).
 *
 * @module
 */

import { encodeMultikey, encodeMultikeyUncompressed } from "./multikey.ts";

/** A DID document (the members atproto reads). */
export interface DidDocument {
  "@context": string[];
  id: string;
  alsoKnownAs?: string[];
  verificationMethod: {
    id: string;
    type: "Multikey";
    controller: string;
    publicKeyMultibase: string;
  }[];
  service: { id: string; type: string; serviceEndpoint: string }[];
}

const CONTEXT = ["https://www.w3.org/ns/did/v1", "https://w3id.org/security/multikey/v1"];
const PDS_SERVICE = { id: "#atproto_pds", type: "AtprotoPersonalDataServer" } as const;

/** The account host's own document at `/.well-known/did.json`. */
export function serviceDidDocument(
  serviceDid: string,
  publicKey: Uint8Array,
  publicUrl: string,
): DidDocument {
  return {
    "@context": CONTEXT,
    id: serviceDid,
    verificationMethod: [{
      id: `${serviceDid}#atproto`,
      type: "Multikey",
      controller: serviceDid,
      publicKeyMultibase: encodeMultikeyUncompressed(publicKey),
    }],
    service: [{ ...PDS_SERVICE, serviceEndpoint: publicUrl }],
  };
}

/** A hosted account's document: handle, commit-signing key and this account host. */
export function accountDidDocument(
  did: string,
  handle: string,
  publicKey: Uint8Array,
  publicUrl: string,
): DidDocument {
  return {
    "@context": CONTEXT,
    id: did,
    alsoKnownAs: [`at://${handle}`],
    verificationMethod: [{
      id: `${did}#atproto`,
      type: "Multikey",
      controller: did,
      publicKeyMultibase: encodeMultikey(publicKey),
    }],
    service: [{ ...PDS_SERVICE, serviceEndpoint: publicUrl }],
  };
}
