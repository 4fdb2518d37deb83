/**
 * Repository compaction: removes the stored blocks that the current commit no longer reaches.
 *
 * Each commit stores the blocks it wrote (`block_store.ts`). The next commit replaces the MST
 * nodes on the path of its keys and the old commit block, and updates and deletes leave the old
 * record blocks behind: about five unreachable blocks per commit, kept forever unless removed.
 * The reference PDS deletes them as it commits; here the write path stays as it is and a
 * compaction, run in the repository's serialised section (`RepoService.compact`), rewrites the
 * stored commits:
 *
 * - every block reachable from the current commit (the commit, the MST nodes, the records) is
 *   kept once, in the latest stored commit holding it (where the CID index finds it and where
 *   `getRepo` with `since` dates it);
 * - every other block is removed: a stored commit left with no block is deleted, one left with
 *   fewer is rewritten.
 *
 * Safety: a reachable block missing from the store stops the compaction before it removes
 * anything. Every atomic operation checks the repository root's versionstamp, so a commit that
 * lands meanwhile (from any process) stops the compaction; what it had removed was unreachable
 * from a root that was current, and a later commit only reaches blocks of that root or blocks it
 * wrote itself (each commit stores every block its changes produce, even one that existed
 * before). Readers that met a removed block retry from the new root (`reader.ts`).
 *
 * @module
 */

import { type CID, formatCid, parseCid } from "../../shared/cid.ts";
import { repoBlocksKey, repoRootKey } from "../store/keys.ts";
import {
  BLOCKS_CHUNK_BYTES,
  encodeBlockPack,
  forgetCompacted,
  KvBlockSource,
  type StoredPack,
} from "./block_store.ts";
import { decodeCommit } from "./commit.ts";
import { type Block, decodeNode } from "./mst.ts";

/** What one compaction did. */
export interface CompactionResult {
  /** Stored commits looked at. */
  packs: number;
  /** Stored commits rewritten with fewer blocks. */
  rewritten: number;
  /** Stored commits deleted (no block of theirs was still needed). */
  deleted: number;
  /** Blocks reachable from the current commit (each stored once afterwards). */
  blocksKept: number;
  /** Blocks removed (unreachable ones and older copies of reachable ones). */
  blocksRemoved: number;
  /** Bytes of block data removed. */
  bytesRemoved: number;
  /** False when a commit landed meanwhile and the compaction stopped early. */
  complete: boolean;
}

/** Most mutations and value bytes per atomic operation (Deno KV allows 1,000 and ~800 KB). */
const OP_MAX_MUTATIONS = 500;
const OP_MAX_BYTES = 400_000;

/**
 * Removes the blocks of `did` that the commit `root` does not reach. `root` must be the current
 * root with its versionstamp; if it is not (or stops being), nothing more is removed.
 *
 * @throws {Error} when a block the root reaches is not stored (nothing is removed then).
 */
export async function compactRepoBlocks(
  kv: Deno.Kv,
  did: string,
  root: { commitCid: string; versionstamp: string },
): Promise<CompactionResult> {
  const packs = await new KvBlockSource(kv, did).packs();
  const latest = new Map<string, StoredPack>();
  for (const pack of packs) for (const id of pack.blocks.keys()) latest.set(id, pack);
  const reachable = reachableBlocks(did, root.commitCid, (id) => latest.get(id)?.blocks.get(id));
  const result: CompactionResult = {
    packs: packs.length,
    rewritten: 0,
    deleted: 0,
    blocksKept: reachable.size,
    blocksRemoved: 0,
    bytesRemoved: 0,
    complete: true,
  };

  let op = kv.atomic().check({ key: repoRootKey(did), versionstamp: root.versionstamp });
  let mutations = 0;
  let bytes = 0;
  let removed = new Map<string, string>();
  let revs: string[] = [];
  let counts = { rewritten: 0, deleted: 0, blocksRemoved: 0, bytesRemoved: 0 };
  const flush = async (): Promise<boolean> => {
    if (mutations === 0) return true;
    const res = await op.commit();
    if (!res.ok) return false;
    forgetCompacted(kv, did, removed, revs);
    result.rewritten += counts.rewritten;
    result.deleted += counts.deleted;
    result.blocksRemoved += counts.blocksRemoved;
    result.bytesRemoved += counts.bytesRemoved;
    op = kv.atomic().check({ key: repoRootKey(did), versionstamp: root.versionstamp });
    mutations = bytes = 0;
    removed = new Map();
    revs = [];
    counts = { rewritten: 0, deleted: 0, blocksRemoved: 0, bytesRemoved: 0 };
    return true;
  };

  for (const pack of packs) {
    const keep: Block[] = [];
    const dropped: string[] = [];
    let droppedBytes = 0;
    for (const [id, data] of pack.blocks) {
      if (reachable.has(id) && latest.get(id) === pack) {
        keep.push({ cid: parseCid(id), bytes: data });
      } else {
        dropped.push(id);
        droppedBytes += data.length;
      }
    }
    if (dropped.length === 0) continue;
    const encoded = keep.length === 0 ? null : encodeBlockPack(keep);
    const chunks = encoded === null ? 0 : Math.ceil(encoded.length / BLOCKS_CHUNK_BYTES);
    const packMutations = Math.max(chunks, pack.chunks);
    const packBytes = encoded?.length ?? 0;
    if (mutations + packMutations > OP_MAX_MUTATIONS || bytes + packBytes > OP_MAX_BYTES) {
      if (!await flush()) return { ...result, complete: false };
    }
    for (let c = 0; c < chunks; c++) {
      const start = c * BLOCKS_CHUNK_BYTES;
      op.set(repoBlocksKey(did, pack.rev, c), encoded!.slice(start, start + BLOCKS_CHUNK_BYTES));
    }
    for (let c = chunks; c < pack.chunks; c++) op.delete(repoBlocksKey(did, pack.rev, c));
    mutations += packMutations;
    bytes += packBytes;
    for (const id of dropped) removed.set(id, pack.rev);
    revs.push(pack.rev);
    if (encoded === null) counts.deleted++;
    else counts.rewritten++;
    counts.blocksRemoved += dropped.length;
    counts.bytesRemoved += droppedBytes;
  }
  if (!await flush()) return { ...result, complete: false };
  return result;
}

/**
 * The CID strings of the blocks the commit `commitCid` reaches: itself, every MST node and every
 * record. Throws when one of them is not stored.
 */
function reachableBlocks(
  did: string,
  commitCid: string,
  get: (id: string) => Uint8Array | undefined,
): Set<string> {
  const need = (id: string, what: string): Uint8Array => {
    const bytes = get(id);
    if (bytes === undefined) throw new Error(`${what} ${id} of ${did} is not stored`);
    return bytes;
  };
  const out = new Set<string>([commitCid]);
  const stack = [formatCid(decodeCommit(need(commitCid, "Commit")).data)];
  while (stack.length > 0) {
    const id = stack.pop()!;
    if (out.has(id)) continue;
    out.add(id);
    const node = decodeNode(need(id, "MST node"), parseCid(id));
    if (node.left) stack.push(formatCid(node.left as CID));
    for (const e of node.entries) {
      const record = formatCid(e.value);
      if (!out.has(record)) {
        need(record, "Record");
        out.add(record);
      }
      if (e.right) stack.push(formatCid(e.right as CID));
    }
  }
  return out;
}
