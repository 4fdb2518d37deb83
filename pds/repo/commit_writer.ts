/**
 * Committing one repository change (docs/architecture.md 6.9, spec 6.1 rules 1-2): finalises the
 * MST, signs the commit, and stores the blocks, the root, the record index, the blob references
 * and the commit's event at the next seq in one Deno KV atomic operation that checks the root's
 * versionstamp (a second process's commit in between makes it fail, and the caller retries).
 *
 * @module
 */

import { type CID, formatCid, parseCid } from "../../shared/cid.ts";
import type { P256KeyPair } from "../../shared/keys.ts";
import type { TidGenerator } from "../../shared/tid.ts";
import { blobRefKey, repoRecordKey, repoRootKey } from "../store/keys.ts";
import type { CheckedBlob } from "../blobs/blob_refs.ts";
import type { CommitEventOp, Sequencer } from "../sequencer/sequencer.ts";
import { blockChunks, type BlockStore, putBlocks } from "./block_store.ts";
import { carLength, CborWriter, writeCarOneRoot } from "./cbor_writer.ts";
import { signCommitWith } from "./commit.ts";
import { checkCommitSize, commitKeyBytes } from "./commit_limits.ts";
import type { Block, Mst } from "./mst.ts";
import type { PreparedOp } from "./prepare_writes.ts";
import type { LoadedRoot, RepoRoot, StoredRecord } from "./repo_root.ts";
import type { CommitSigner } from "./signer.ts";

/** What {@link writeCommit} commits, and what it writes through. */
export interface CommitInput {
  did: string;
  keyPair: P256KeyPair;
  /** The root the commit builds on (null: the repository's first commit). */
  root: LoadedRoot | null;
  /** The tree with the ops applied. */
  tree: Mst;
  ops: PreparedOp[];
  /** The uploads the ops newly reference, checked. */
  blobs: CheckedBlob[];
  /** Other commits are being built meanwhile (passed to the signer). */
  concurrent: boolean;
  tids: TidGenerator;
  sequencer: Sequencer;
  blockStore: BlockStore;
  /** The signer of the service; null when it makes no commits (`RepoDeps.signer`). */
  signer: CommitSigner | null;
  /** Milliseconds since the epoch (the event's time). */
  now(): number;
}

/** A stored commit, and the root it wrote (with the operation's versionstamp). */
export interface WrittenCommit {
  cid: string;
  rev: string;
  seq: number;
  root: LoadedRoot;
}

/**
 * Signs and stores one commit; null when the root's versionstamp check failed (another commit
 * landed first). Refuses a commit over the limits of one atomic operation (`commit_limits.ts`).
 */
export async function writeCommit(input: CommitInput): Promise<WrittenCommit | null> {
  const { did, keyPair, root, tree, ops, blobs, concurrent, tids, sequencer, blockStore, now } =
    input;
  if (input.signer === null) throw new Error("This repository service has no commit signer");
  const { root: data, blocks: nodeBlocks } = tree.finalize();
  // The event also carries the unchanged nodes of each op's covering proof (a sync 1.1
  // consumer proves and inverts the ops with the event's blocks alone); they are stored
  // already, so the commit's pack does not hold them again.
  const proofBlocks = await tree.coveringProof(ops.map((op) => op.path));
  const rev = root ? tids.nextAfter(root.rev) : tids.next();
  const commitBlock = await signCommitWith(input.signer, {
    did,
    data,
    rev,
    keyPair,
    concurrent,
  });
  const recordBlocks = ops.flatMap((op) => op.block ? [op.block] : []);
  const blocks = [commitBlock, ...nodeBlocks, ...recordBlocks];
  const newRoot: RepoRoot = {
    commitCid: formatCid(commitBlock.cid),
    rev,
    dataCid: formatCid(data),
    // This commit's garbage: the nodes it replaced, the records it replaced or deleted, the
    // previous commit. Kept in the root so that a restart does not forget it.
    garbage: root === null ? 0 : (root.garbage ?? 0) + tree.replacedNodes + 1 +
      ops.filter((op) => op.prev !== null).length,
  };
  if (root?.kept !== undefined) newRoot.kept = root.kept;
  const refMutations = ops.reduce(
    (n, op) => n + op.refs.added.length + op.refs.removed.length,
    0,
  );
  const keyBytes = commitKeyBytes(did, rev, blocks, ops, blobs);
  const size = checkCommitSize(blocks, proofBlocks, ops, blobs.length + refMutations, keyBytes);
  const eventOps: CommitEventOp[] = ops.map((op) => {
    const e: CommitEventOp = { action: op.action, path: op.path, cid: op.block?.cid ?? null };
    if (op.prev) e.prev = op.prev;
    return e;
  });
  const committed = await sequencer.commit({
    fill: (atomic) => {
      atomic.check({ key: repoRootKey(did), versionstamp: root?.versionstamp ?? null });
      // A referenced upload deleted since it was checked fails the commit (and the retry
      // answers BlobNotFound).
      // Rewriting the upload's metadata fails a concurrent deletion of it (`blob_gc.ts`).
      for (const b of blobs) {
        atomic.check({ key: b.key, versionstamp: b.versionstamp });
        atomic.set(b.key, b.meta);
      }
      putBlocks(atomic, did, rev, blocks);
      atomic.set(repoRootKey(did), newRoot);
      for (const op of ops) {
        const key = repoRecordKey(did, op.collection, op.rkey);
        if (op.block && op.cid !== null) {
          const value: StoredRecord = {
            cid: op.cid,
            rev,
            bytes: exact(op.block.bytes),
          };
          atomic.set(key, value);
        } else {
          atomic.delete(key);
        }
        for (const cid of op.refs.added) atomic.set(blobRefKey(did, cid, op.path), true);
        for (const cid of op.refs.removed) atomic.delete(blobRefKey(did, cid, op.path));
      }
    },
    event: {
      rebase: false,
      tooBig: false,
      repo: did,
      commit: commitBlock.cid,
      rev,
      since: root?.rev ?? null,
      blocks: eventCar(
        commitBlock.cid,
        proofBlocks.length ? [...blocks, ...proofBlocks] : blocks,
      ),
      ops: eventOps,
      blobs: commitBlobs(ops),
      ...(root ? { prevData: root.data } : {}),
      time: new Date(now()).toISOString(),
    },
    records: new Map(ops.flatMap((op) => op.cid !== null ? [[op.cid, op.value]] : [])),
    mutations: blockChunks(size) + ops.length + 1 + blobs.length + refMutations,
    bytes: size,
    checks: 1 + blobs.length,
    keyBytes,
  });
  if (!committed) return null;
  blockStore.noteCommitBlocks(did, root?.rev ?? null, rev, blocks);
  return {
    cid: newRoot.commitCid,
    rev,
    seq: committed.seq,
    // Every key of one atomic operation gets the operation's versionstamp.
    root: { ...newRoot, versionstamp: committed.versionstamp, data },
  };
}

/** The `blobs` of a commit event: every blob its new records reference, once each. */
function commitBlobs(ops: PreparedOp[]): CID[] {
  const cids = new Set(ops.flatMap((op) => op.blobs.map((b) => b.cid)));
  return [...cids].map(parseCid);
}

/** The CAR of a commit event: root = the commit; the commit, nodes (new and proof), records. */
function eventCar(root: CID, blocks: Block[]): Uint8Array {
  const w = new CborWriter(carLength(root, blocks));
  writeCarOneRoot(w, root, blocks);
  return w.finish();
}

/** Deno KV serialises a typed array inside an object with its whole buffer: store exact copies. */
function exact(bytes: Uint8Array): Uint8Array {
  return bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength
    ? bytes
    : bytes.slice();
}
