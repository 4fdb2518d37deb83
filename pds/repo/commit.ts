/**
 * Signed v3 commits (docs/protocol.md 7): `{did, version: 3, data, rev, prev: null,
 * sig}`, the signature a 64-byte compact low-S P-256 signature over the DAG-CBOR of the commit
 * without `sig`.
 *
 * @module
 */

import { decodeCbor } from "../../shared/cbor.ts";
import { asCid, type CID, cidForCbor } from "../../shared/cid.ts";
import { type P256KeyPair, signCompact } from "../../shared/keys.ts";
import { encodeCommit } from "./cbor_writer.ts";
import type { Block } from "./mst.ts";
import type { CommitSigner } from "./signer.ts";

/** A decoded commit. */
export interface Commit {
  did: string;
  version: 3;
  data: CID;
  rev: string;
  prev: null;
  sig: Uint8Array;
}

/** Builds and signs a commit with the account key; returns its block. */
export function signCommit(
  opts: { did: string; data: CID; rev: string; keyPair: P256KeyPair },
): Block {
  const sig = signCompact(opts.keyPair.privateKey, encodeCommit(opts));
  const bytes = encodeCommit(opts, sig);
  return { cid: cidForCbor(bytes), bytes };
}

/**
 * {@link signCommit} through a {@link CommitSigner} (a worker thread under concurrent load).
 */
export async function signCommitWith(
  signer: CommitSigner,
  opts: { did: string; data: CID; rev: string; keyPair: P256KeyPair; concurrent: boolean },
): Promise<Block> {
  const sig = await signer.sign(opts.keyPair.privateKey, encodeCommit(opts), opts.concurrent);
  const bytes = encodeCommit(opts, sig);
  return { cid: cidForCbor(bytes), bytes };
}

/** Decodes a commit block; throws when it is not a v3 commit. */
export function decodeCommit(bytes: Uint8Array): Commit {
  const value = decodeCbor(bytes) as Record<string, unknown>;
  const data = asCid(value?.data);
  if (
    value === null || typeof value !== "object" || value.version !== 3 || data === null ||
    typeof value.did !== "string" || typeof value.rev !== "string" ||
    !(value.sig instanceof Uint8Array)
  ) {
    throw new Error("Block is not a v3 commit");
  }
  return { did: value.did, version: 3, data, rev: value.rev, prev: null, sig: value.sig };
}
