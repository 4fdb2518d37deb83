/**
 * `did:plc:` identifiers (docs/protocol.md 13; docs/behaviour.md 10.4): the signed genesis
 * operation that mints an account's DID, the update operations of its later changes (a new
 * handle), and the account's operation log as the store keeps it.
 *
 * Every operation's `rotationKeys` is the host's PLC rotation key, a P-256 key generated once
 * and kept in the store (`plcRotationKeyKey`), apart from the token key that `PDS_JWT_SECRET`
 * derives: changing that secret must not cost the host control of its DIDs. Accounts minted
 * before the rotation key existed list the token key (the service key) instead; their next
 * operation is signed with it and lists the rotation key from then on.
 *
 * The DID is `did:plc:` + the first 24 characters of base32(SHA-256(DAG-CBOR(signed genesis))).
 *
 * @module
 */

import { sha256 } from "@noble/hashes/sha2.js";
import { base32 } from "multiformats/bases/base32";
import { base64url } from "jose";
import { encodeCbor } from "../../shared/cbor.ts";
import { cidForCbor, formatCid } from "../../shared/cid.ts";
import { generateP256KeyPair, type P256KeyPair, signCompact } from "../../shared/keys.ts";
import { encodeDidKey } from "../../shared/multikey.ts";
import { plcOpKey, plcRotationKeyKey } from "../store/keys.ts";

/** A signed did:plc operation (JSON form). */
export interface PlcOperation {
  type: "plc_operation";
  rotationKeys: string[];
  verificationMethods: Record<string, string>;
  alsoKnownAs: string[];
  services: Record<string, { type: string; endpoint: string }>;
  /** CID of the previous operation; null for the genesis. */
  prev: string | null;
  sig: string;
}

/** What the store keeps of an account's operation log (`plcOpKey`). */
export interface PlcLog {
  /** The signed genesis operation: its hash is the DID. */
  genesis: PlcOperation;
  /** The latest operation (the genesis until the first update). */
  last: PlcOperation;
  /** CID of `last`: the `prev` of the next operation. */
  lastCid: string;
  /** Operations in the log, the genesis included. */
  ops: number;
  /** The directory that accepted the log, or null while it has never been submitted. */
  publishedTo: string | null;
}

/** The state an operation declares: what the account host knows of the account now. */
export interface PlcState {
  /** The account's signing key (`verificationMethods.atproto`). */
  signingPublicKey: Uint8Array;
  handle: string;
  /** The account host's public URL (the `atproto_pds` service endpoint). */
  pdsUrl: string;
}

/** Builds and signs a genesis operation and derives its DID. */
export function mintPlcDid(
  opts: PlcState & {
    /** Signs the operation and is its only rotation key. */
    rotationKey: P256KeyPair;
  },
): { did: string; op: PlcOperation } {
  const op = signOperation(opts.rotationKey, {
    type: "plc_operation",
    rotationKeys: [encodeDidKey(opts.rotationKey.publicKey)],
    ...declaredState(opts),
    prev: null,
  });
  return { did: plcDidForOperation(op), op };
}

/**
 * The operation that follows `log` with `state`, signed with whichever of `keys` the last
 * operation lists as a rotation key; the rotation keys become `keys.rotation` (replacing the
 * service key of accounts minted before the rotation key existed).
 *
 * @throws {Error} when the last operation lists none of `keys`.
 */
export function nextPlcOperation(
  log: PlcLog,
  state: PlcState,
  keys: { rotation: P256KeyPair; service: P256KeyPair },
): PlcOperation {
  const rotationDid = encodeDidKey(keys.rotation.publicKey);
  const serviceDid = encodeDidKey(keys.service.publicKey);
  const listed = log.last.rotationKeys;
  const signer = listed.includes(rotationDid)
    ? keys.rotation
    : listed.includes(serviceDid)
    ? keys.service
    : null;
  if (signer === null) {
    throw new Error("The account host holds none of the rotation keys of the last PLC operation");
  }
  const rotationKeys = listed.map((k) => k === serviceDid ? rotationDid : k)
    .filter((k, i, all) => all.indexOf(k) === i);
  return signOperation(signer, {
    type: "plc_operation",
    rotationKeys,
    ...declaredState(state),
    prev: log.lastCid,
  });
}

/** The DID of a signed genesis operation. */
export function plcDidForOperation(op: PlcOperation): string {
  return "did:plc:" + base32.baseEncode(sha256(encodeCbor(op))).slice(0, 24);
}

/** The CID of a signed operation (what the next operation's `prev` names). */
export function plcOperationCid(op: PlcOperation): string {
  return formatCid(cidForCbor(encodeCbor(op)));
}

/** The log of a newly minted account. */
export function newPlcLog(genesis: PlcOperation, publishedTo: string | null): PlcLog {
  return { genesis, last: genesis, lastCid: plcOperationCid(genesis), ops: 1, publishedTo };
}

/** `log` with `op` appended. */
export function appendPlcLog(log: PlcLog, op: PlcOperation, publishedTo: string | null): PlcLog {
  return { ...log, last: op, lastCid: plcOperationCid(op), ops: log.ops + 1, publishedTo };
}

/**
 * Reads the account's operation log with its entry (for a versionstamp check); null when it has
 * none. Accounts created before the log was kept stored their genesis operation alone: read as
 * a log of one operation, never published.
 */
export async function readPlcLog(
  kv: Deno.Kv,
  did: string,
): Promise<{ log: PlcLog; entry: Deno.KvEntryMaybe<unknown> } | null> {
  const entry = await kv.get<PlcLog | PlcOperation>(plcOpKey(did));
  const value = entry.value;
  if (value === null) return null;
  const log = "type" in value ? newPlcLog(value, null) : value;
  return { log, entry };
}

/** Stored form of the rotation key. */
interface StoredRotationKey {
  privateKey: Uint8Array;
  publicKey: Uint8Array;
}

/**
 * The host's PLC rotation key, generated and stored on first use (a check on the absent key
 * makes two processes agree on one).
 */
export async function loadPlcRotationKey(kv: Deno.Kv): Promise<P256KeyPair> {
  for (;;) {
    const entry = await kv.get<StoredRotationKey>(plcRotationKeyKey());
    if (entry.value !== null) {
      return { privateKey: entry.value.privateKey, publicKey: entry.value.publicKey };
    }
    const pair = generateP256KeyPair();
    const stored: StoredRotationKey = { privateKey: pair.privateKey, publicKey: pair.publicKey };
    const res = await kv.atomic().check(entry).set(plcRotationKeyKey(), stored).commit();
    if (res.ok) return pair;
  }
}

function declaredState(state: PlcState) {
  return {
    verificationMethods: { atproto: encodeDidKey(state.signingPublicKey) },
    alsoKnownAs: [`at://${state.handle}`],
    services: { atproto_pds: { type: "AtprotoPersonalDataServer", endpoint: state.pdsUrl } },
  };
}

function signOperation(key: P256KeyPair, unsigned: Omit<PlcOperation, "sig">): PlcOperation {
  const sig = base64url.encode(signCompact(key.privateKey, encodeCbor(unsigned)));
  return { ...unsigned, sig };
}
