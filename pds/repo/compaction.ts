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

import { parseCid } from "../../shared/cid.ts";
import { repoBlocksKey, repoRootKey } from "../store/keys.ts";
import {
  BLOCKS_CHUNK_BYTES,
  type BlockStore,
  encodeBlockPack,
  type StoredPack,
} from "./block_store.ts";
import type { Block } from "./mst.ts";
import { reachableBlocks } from "./reader.ts";
import { BACKGROUND_PACE, type Pace, TimeSlicer } from "./time_slice.ts";
import type { RepoRoot } from "./repo_root.ts";

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
  /**
   * False when a commit landed meanwhile and the compaction stopped early (the root then keeps
   * its garbage count); true when it finished and reset the root's count.
   */
  complete: boolean;
}

/** Most mutations and value bytes per atomic operation (Deno KV allows 1,000 and ~800 KB). */
const OP_MAX_MUTATIONS = 500;
const OP_MAX_BYTES = 400_000;
/**
 * The same for a background compaction: KV has one writer, and the commits of every repository
 * wait behind each of these operations, so they are kept to a few ms of it each.
 */
const BACKGROUND_OP_MAX_MUTATIONS = 64;
const BACKGROUND_OP_MAX_BYTES = 64_000;

/** Options of {@link compactRepoBlocks}. */
export interface CompactionOptions {
  /**
   * Run as background maintenance: at the {@link BACKGROUND_PACE} (about a third of the main
   * thread), in small atomic operations with a rest after each. Default false: as fast as the
   * event loop allows (`deno task compact`, an explicit call).
   */
  background?: boolean;
  /**
   * Stops the compaction at its next rest once aborted (shutdown): what it removed so far stays
   * removed (each atomic operation is whole), and it answers `complete: false`.
   */
  signal?: AbortSignal;
}

/**
 * Removes the blocks of `did` that the commit `root` does not reach. `root` must be the current
 * root with its versionstamp; if it is not (or stops being), nothing more is removed. Once done,
 * it rewrites the root with no garbage and the number of blocks it kept (`RepoRoot`), so the
 * root's versionstamp changes.
 *
 * @throws {Error} when a block the root reaches is not stored (nothing is removed then).
 */
export async function compactRepoBlocks(
  store: BlockStore,
  did: string,
  root: RepoRoot & { versionstamp: string },
  opts: CompactionOptions = {},
): Promise<CompactionResult> {
  const run: Run = {
    pace: opts.background ? { ...BACKGROUND_PACE, signal: opts.signal } : { signal: opts.signal },
    maxMutations: opts.background ? BACKGROUND_OP_MAX_MUTATIONS : OP_MAX_MUTATIONS,
    maxBytes: opts.background ? BACKGROUND_OP_MAX_BYTES : OP_MAX_BYTES,
    restAfterWrites: opts.background ?? false,
    result: {
      packs: 0,
      rewritten: 0,
      deleted: 0,
      blocksKept: 0,
      blocksRemoved: 0,
      bytesRemoved: 0,
      complete: true,
    },
  };
  try {
    return await compact(store, did, root, run);
  } catch (err) {
    if (opts.signal?.aborted && err === opts.signal.reason) {
      return { ...run.result, complete: false };
    }
    throw err;
  }
}

/** How one compaction runs, and what it did so far (counted as its atomic operations commit). */
interface Run {
  pace: Pace;
  maxMutations: number;
  maxBytes: number;
  /** Rest after each atomic operation too (background). */
  restAfterWrites: boolean;
  result: CompactionResult;
}

async function compact(
  store: BlockStore,
  did: string,
  root: RepoRoot & { versionstamp: string },
  { pace, maxMutations, maxBytes, restAfterWrites, result }: Run,
): Promise<CompactionResult> {
  pace.signal?.throwIfAborted();
  const kv = store.kv;
  const packs = await store.source(did).packs(pace);
  const latest = new Map<string, StoredPack>();
  for (const pack of packs) for (const id of pack.blocks.keys()) latest.set(id, pack);
  const reachable = await reachableBlocks(
    did,
    root.commitCid,
    (id) => latest.get(id)?.blocks.get(id),
    pace,
  );
  result.packs = packs.length;
  result.blocksKept = reachable.size;

  const newOp = () => kv.atomic().check({ key: repoRootKey(did), versionstamp: root.versionstamp });
  let op = newOp();
  let mutations = 0;
  let bytes = 0;
  /** The changes in `op`, counted into `result` once it commits. */
  let pending: { rev: string; dropped: string[]; droppedBytes: number; deleted: boolean }[] = [];
  const flush = async (): Promise<boolean> => {
    if (pending.length === 0) return true;
    if (!(await op.commit()).ok) return false;
    const removed = new Map<string, string>();
    for (const change of pending) {
      for (const id of change.dropped) removed.set(id, change.rev);
      if (change.deleted) result.deleted++;
      else result.rewritten++;
      result.blocksRemoved += change.dropped.length;
      result.bytesRemoved += change.droppedBytes;
    }
    store.forgetCompacted(did, removed, pending.map((change) => change.rev));
    op = newOp();
    mutations = bytes = 0;
    pending = [];
    return true;
  };

  const slicer = new TimeSlicer(pace);
  for (const pack of packs) {
    if (slicer.due()) await slicer.next();
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
    if (mutations + packMutations > maxMutations || bytes + packBytes > maxBytes) {
      if (!await flush()) return { ...result, complete: false };
      if (restAfterWrites) await slicer.next();
    }
    for (let c = 0; c < chunks; c++) {
      const start = c * BLOCKS_CHUNK_BYTES;
      op.set(repoBlocksKey(did, pack.rev, c), encoded!.slice(start, start + BLOCKS_CHUNK_BYTES));
    }
    for (let c = chunks; c < pack.chunks; c++) op.delete(repoBlocksKey(did, pack.rev, c));
    mutations += packMutations;
    bytes += packBytes;
    pending.push({ rev: pack.rev, dropped, droppedBytes, deleted: encoded === null });
  }
  if (!await flush()) return { ...result, complete: false };
  const compacted: RepoRoot = {
    commitCid: root.commitCid,
    rev: root.rev,
    dataCid: root.dataCid,
    garbage: 0,
    kept: reachable.size,
  };
  if (!(await newOp().set(repoRootKey(did), compacted).commit()).ok) {
    return { ...result, complete: false };
  }
  return result;
}
