/**
 * Limits of one commit, which is one Deno KV atomic operation (at most 1,000 mutations, 100
 * checks, 800 KB of values and 81,920 key bytes), and the budgeting that refuses a commit over
 * them before it is signed.
 *
 * @module
 */

import type { Block } from "./mst.ts";
import { blockChunks } from "./block_store.ts";
import {
  blobRefKey,
  kvKeyBytes,
  repoBlocksKey,
  repoRecordKey,
  repoRootKey,
} from "../store/keys.ts";
import type { CheckedBlob } from "../blobs/blob_refs.ts";
import { RepoError } from "./errors.ts";

/** Most writes in one commit (keeps the atomic operation under Deno KV's 1,000 mutations). */
export const MAX_WRITES_PER_COMMIT = 100;
/**
 * Most distinct blobs newly referenced by one commit: each is a check of the atomic operation,
 * of which Deno KV allows 100 (the root and the seq head take two).
 */
export const MAX_BLOBS_PER_COMMIT = 90;
/** Largest encoded record (one KV value holds at most 64 KiB). */
export const MAX_RECORD_BYTES = 60_000;
/** Deno KV limits of one atomic operation, with some headroom. */
export const MAX_MUTATIONS = 990;
export const MAX_COMMIT_BYTES = 780_000;
/** Key bytes of one commit's checks and mutations (Deno KV allows 81,920 per operation). */
export const MAX_COMMIT_KEY_BYTES = 70_000;

/**
 * What the limits read of a prepared write (`PreparedOp` of `prepare_writes.ts`, which imports
 * this module's limits: named here by shape, so the two modules do not import each other).
 */
export interface SizedOp {
  collection: string;
  rkey: string;
  path: string;
  block: Block | null;
  refs: { added: string[]; removed: string[] };
}

/**
 * Bytes of the keys `fill` checks and writes, as Deno KV counts them toward its per-operation
 * limit (about the encoded tuple: each part's bytes plus a tag and a terminator).
 */
export function commitKeyBytes(
  did: string,
  rev: string,
  blocks: Block[],
  ops: readonly SizedOp[],
  blobs: CheckedBlob[],
): number {
  const blockBytes = blocks.reduce((n, b) => n + b.bytes.length + 40, 0);
  let bytes = 2 * kvKeyBytes(repoRootKey(did)) +
    blockChunks(blockBytes) * kvKeyBytes(repoBlocksKey(did, rev, 0));
  for (const b of blobs) bytes += 2 * kvKeyBytes(b.key);
  for (const op of ops) {
    bytes += kvKeyBytes(repoRecordKey(did, op.collection, op.rkey));
    for (const cid of [...op.refs.added, ...op.refs.removed]) {
      bytes += kvKeyBytes(blobRefKey(did, cid, op.path));
    }
  }
  return bytes;
}

/**
 * Refuses a commit over the limits of one atomic operation (`InvalidRequest`); returns the bytes
 * its `fill` adds.
 */
export function checkCommitSize(
  blocks: Block[],
  proofBlocks: Block[],
  ops: readonly SizedOp[],
  blobMutations: number,
  keyBytes: number,
): number {
  // Stored bytes: the blocks (in the commit's pack and again in its event, with the proof's
  // unchanged nodes) and the records (again in the record index). Mutations: pack chunks, root,
  // index entries, event chunks, head.
  const blockBytes = blocks.reduce((n, b) => n + b.bytes.length + 40, 0);
  const proofBytes = proofBlocks.reduce((n, b) => n + b.bytes.length + 40, 0);
  const recordBytes = ops.reduce((n, op) => n + (op.block ? op.block.bytes.length + 150 : 50), 0);
  const chunks = Math.ceil(blockBytes / 60_000);
  const eventChunks = Math.ceil((blockBytes + proofBytes) / 60_000);
  const mutations = chunks + eventChunks + ops.length + 2 + blobMutations;
  if (
    mutations > MAX_MUTATIONS || 2 * blockBytes + proofBytes + recordBytes > MAX_COMMIT_BYTES ||
    keyBytes > MAX_COMMIT_KEY_BYTES
  ) {
    throw new RepoError(
      "InvalidRequest",
      `Commit is too large: ${blocks.length + proofBlocks.length} blocks, ` +
        `${blockBytes + proofBytes} bytes, ${mutations} mutations, ${keyBytes} key bytes; ` +
        `send fewer writes`,
    );
  }
  // What `fill` adds (the sequencer adds the event's own size).
  return blockBytes + recordBytes + 200;
}
