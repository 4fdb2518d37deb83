/**
 * Reading and checking a signed v3 repository commit (docs/protocol.md 7): the block
 * `{did, version: 3, data, rev, prev, sig}` whose `sig` is a 64-byte compact low-S ECDSA P-256
 * signature over the DAG-CBOR of the same map without `sig`.
 *
 * @module
 */

import { isPlainObject, show } from "./_checks.ts";
import { decodeCbor, encodeCbor } from "./cbor.ts";
import { asCid, type CID } from "./cid.ts";
import { COMPACT_SIGNATURE_LENGTH } from "./keys.ts";
import { isValidDid } from "./syntax.ts";
import { isValidTid } from "./tid.ts";

/** A decoded commit with the bytes its signature covers. */
export interface SignedCommit {
  readonly did: string;
  /** MST root of the repository after this commit. */
  readonly data: CID;
  readonly rev: string;
  readonly sig: Uint8Array;
  /** DAG-CBOR of the commit without `sig`: what {@link verifyCommitSignature} checks. */
  readonly unsigned: Uint8Array;
}

/** Thrown by {@link parseSignedCommit} for a block that is not a v3 commit. */
export class CommitError extends Error {
  /** Creates an error; the message names the member at fault. */
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "CommitError";
  }
}

/**
 * Decodes a commit block strictly: a map with a valid `did`, `version` 3, a `data` link, a TID
 * `rev` and a 64-byte `sig`.
 *
 * @throws {CommitError} naming what is wrong
 */
export function parseSignedCommit(bytes: Uint8Array): SignedCommit {
  let value: unknown;
  try {
    value = decodeCbor(bytes);
  } catch (e) {
    throw new CommitError("Commit block is not valid DAG-CBOR", { cause: e });
  }
  if (!isPlainObject(value)) throw new CommitError(`Commit block is not a map: ${show(value)}`);
  const { sig, ...rest } = value;
  if (typeof rest.did !== "string" || !isValidDid(rest.did)) {
    throw new CommitError(`Commit has an invalid did: ${show(rest.did)}`);
  }
  if (rest.version !== 3) throw new CommitError(`Commit version is not 3: ${show(rest.version)}`);
  const data = asCid(rest.data);
  if (data === null) throw new CommitError(`Commit has an invalid data link: ${show(rest.data)}`);
  if (typeof rest.rev !== "string" || !isValidTid(rest.rev)) {
    throw new CommitError(`Commit has an invalid rev: ${show(rest.rev)}`);
  }
  if (!(sig instanceof Uint8Array) || sig.length !== COMPACT_SIGNATURE_LENGTH) {
    throw new CommitError(`Commit sig is not ${COMPACT_SIGNATURE_LENGTH} bytes: ${show(sig)}`);
  }
  return { did: rest.did, data, rev: rest.rev, sig, unsigned: encodeCbor(rest) };
}

/** Half the order of P-256: a signature with a larger `s` is high-S and refused. */
const HALF_ORDER = Uint8Array.from(
  "7fffffff800000007fffffffffffffffde737d56d38bcf4279dce5617e3192a8".match(/../g)!,
  (h) => parseInt(h, 16),
);

/**
 * Whether the commit's signature verifies against `key` (a WebCrypto ECDSA P-256 verification
 * key, as `importVerifyKey` makes it). High-S signatures are refused (atproto requires low S).
 */
export async function verifyCommitSignature(
  commit: SignedCommit,
  key: CryptoKey,
): Promise<boolean> {
  if (!isLowS(commit.sig)) return false;
  try {
    return await crypto.subtle.verify(
      { name: "ECDSA", hash: "SHA-256" },
      key,
      commit.sig as Uint8Array<ArrayBuffer>,
      commit.unsigned as Uint8Array<ArrayBuffer>,
    );
  } catch {
    return false;
  }
}

function isLowS(sig: Uint8Array): boolean {
  for (let i = 0; i < 32; i++) {
    const s = sig[32 + i];
    if (s !== HALF_ORDER[i]) return s < HALF_ORDER[i];
  }
  return true;
}
