/**
 * Repository blocks in Deno KV. Each commit stores the blocks it wrote (commit, new MST nodes,
 * records) as one value, chunked under the value limit, keyed by (DID, rev): a commit appends
 * one value next to the repository's previous ones instead of inserting one value per block at
 * a random CID key (random-key inserts cost SQLite ~5x more per mutation). Records are also
 * kept, with their bytes, in the record index (`store.ts`), so record reads are one get.
 *
 * Reading a block by CID goes through a per-repository CID -> rev index built lazily by
 * scanning the repository's commits (then kept up to date by this process's commits, and
 * refreshed on a miss, for commits of another process), and a small cache of decoded commits;
 * both are held by the {@link BlockStore} of the KV handle.
 * On the write path, MST nodes come from the process-wide node cache (`mst.ts`), so a commit
 * reads no blocks in steady state.
 *
 * @module
 */

import { CID, formatCid } from "../../shared/cid.ts";
import { repoBlocksKey, repoBlocksPrefix, repoBlocksRevPrefix } from "../store/keys.ts";
import { CborWriter } from "./cbor_writer.ts";
import { concatBytes } from "../../shared/bytes.ts";
import type { Block, NodeSource } from "./mst.ts";
import { type Pace, TimeSlicer } from "./time_slice.ts";

/** A block with the rev of the (latest) commit that wrote it. */
export interface StoredBlock {
  rev: string;
  bytes: Uint8Array;
}

/** The blocks one commit wrote, as stored: its rev, the KV values (chunks) they fill, the blocks. */
export interface StoredPack {
  rev: string;
  chunks: number;
  blocks: Map<string, Uint8Array>;
}

/** Largest chunk of one commit's blocks in one KV value (the value limit is 64 KiB). */
export const BLOCKS_CHUNK_BYTES = 60_000;

/** Encodes blocks as CAR sections: `varint(len(cid) + len(bytes)) || cid || bytes`. */
export function encodeBlockPack(blocks: Iterable<Block>): Uint8Array {
  const w = new CborWriter(4096);
  for (const b of blocks) {
    const cid = b.cid.bytes;
    w.varint(cid.length + b.bytes.length);
    w.raw(cid);
    w.raw(b.bytes);
  }
  return w.finish();
}

/** Decodes {@link encodeBlockPack} output into a map from CID string to bytes (views). */
export function decodeBlockPack(pack: Uint8Array): Map<string, Uint8Array> {
  const out = new Map<string, Uint8Array>();
  let pos = 0;
  while (pos < pack.length) {
    let len = 0;
    let mul = 1;
    for (;;) {
      const b = pack[pos++];
      if (b === undefined) throw new Error("Stored block pack is truncated");
      len += (b & 0x7f) * mul;
      if (b < 0x80) break;
      mul *= 0x80;
    }
    const end = pos + len;
    if (end > pack.length) throw new Error("Stored block pack is truncated");
    const [cid, rest] = CID.decodeFirst(pack.subarray(pos, end));
    out.set(formatCid(cid), rest);
    pos = end;
  }
  return out;
}

/**
 * Adds the writes of `blocks` (written by the commit `rev`) to an atomic operation; returns
 * the number of mutations added.
 */
export function putBlocks(
  op: Deno.AtomicOperation,
  did: string,
  rev: string,
  blocks: Iterable<Block>,
): number {
  const pack = encodeBlockPack(blocks);
  let chunk = 0;
  for (let pos = 0; pos < pack.length || chunk === 0; pos += BLOCKS_CHUNK_BYTES, chunk++) {
    op.set(repoBlocksKey(did, rev, chunk), pack.slice(pos, pos + BLOCKS_CHUNK_BYTES));
  }
  return chunk;
}

/** Mutations {@link putBlocks} adds for a pack of `bytes` bytes. */
export function blockChunks(bytes: number): number {
  return Math.max(1, Math.ceil(bytes / BLOCKS_CHUNK_BYTES));
}

interface RepoIndex {
  /** CID string -> rev of the latest commit that wrote the block. */
  revs: Map<string, string>;
  /** When it was last read or written (ms). */
  usedAt: number;
  /** Highest rev scanned (or recorded) so far; "" before any. */
  lastRev: string;
  /** A scan in progress. */
  scanning: Promise<void> | null;
}

/** Repositories whose CID index is kept per block store (least recently used dropped first). */
const MAX_INDEXED_REPOS = 1_000;
/**
 * Index entries (blocks) kept per block store, all repositories together: about 200 bytes of
 * heap per post (a 20,000-post repository's index took 4.1 MB), so about 100-200 MB at this
 * bound. Past it, the least recently used repositories' indexes are dropped (a later read of one
 * scans its commits again), except those used in the last {@link ACTIVE_INDEX_MS}: a repository
 * larger than the bound, still being written, is not scanned again at every other repository's
 * read. Without the bound, 1,000 large repositories could hold gigabytes.
 */
export const MAX_INDEXED_BLOCKS = 2_000_000;
const ACTIVE_INDEX_MS = 60_000;
/** Blocks noted by commits between two looks at the bound. */
const NOTED_BLOCKS_PER_CHECK = 10_000;

/**
 * KV entries per read when scanning a repository's commits. A commit has at most a few chunks
 * (`BLOCKS_CHUNK_BYTES` each), far fewer than a page.
 */
const SCAN_PAGE = 500;
/** Decoded commits' blocks, by `did rev` (least recently used dropped first). */
const MAX_CACHED_PACKS = 512;

/**
 * The repository blocks of one KV handle and this process's caches of them: the per-repository
 * CID indexes and the decoded commits. An account host builds one in `createPdsContext`
 * (`ctx.blocks`); its writer, readers, compaction and push share it.
 */
export class BlockStore {
  readonly kv: Deno.Kv;
  /** Per-repository CID indexes, least recently used first (read and kept by {@link KvBlockSource}). */
  readonly indexes = new Map<string, RepoIndex>();
  /** Decoded commits' blocks by `did rev`, least recently used first ({@link KvBlockSource}). */
  readonly packs = new Map<string, Map<string, Uint8Array>>();
  #limit = { blocks: MAX_INDEXED_BLOCKS, activeMs: ACTIVE_INDEX_MS };
  /** Blocks noted since the bound was last checked. */
  #notedSinceCheck = 0;

  constructor(kv: Deno.Kv) {
    this.kv = kv;
  }

  /** The blocks of one repository. */
  source(did: string): KvBlockSource {
    return new KvBlockSource(this, did);
  }

  /**
   * Sets the bound on index entries and how long a used index is kept past it (tests; defaults
   * {@link MAX_INDEXED_BLOCKS} and one minute).
   */
  limitIndexedBlocks(blocks: number, activeMs = ACTIVE_INDEX_MS): void {
    this.#limit = { blocks, activeMs };
  }

  /** Index entries held now, all repositories together (tests, diagnostics). */
  indexedBlocks(): number {
    let n = 0;
    for (const index of this.indexes.values()) n += index.revs.size;
    return n;
  }

  /** DIDs of the repositories whose index is held, least recently used first (tests). */
  indexedRepos(): string[] {
    return [...this.indexes.keys()];
  }

  /**
   * Drops the least recently used repositories' indexes while the entries exceed the bound:
   * never `keep`'s, one being scanned, or one used within the active time. Walks at most
   * {@link MAX_INDEXED_REPOS} maps.
   */
  enforceBlockLimit(keep: string | null): void {
    const { blocks: limit, activeMs } = this.#limit;
    let total = this.indexedBlocks();
    if (total <= limit) return;
    const idleSince = Date.now() - activeMs;
    for (const [did, index] of this.indexes) {
      if (total <= limit) break;
      if (did === keep || index.scanning !== null || index.usedAt > idleSince) continue;
      this.indexes.delete(did);
      total -= index.revs.size;
    }
  }

  /**
   * Records the blocks a commit of this process wrote in the CID index (when the repository's
   * index is loaded) and the commit cache.
   */
  noteCommitBlocks(did: string, since: string | null, rev: string, blocks: Block[]): void {
    const index = this.indexes.get(did);
    if (index && index.scanning === null && rev > index.lastRev) {
      for (const b of blocks) index.revs.set(formatCid(b.cid), rev);
      // Only a commit right after the last one seen proves no other commit was missed.
      if (since === index.lastRev) index.lastRev = rev;
      index.usedAt = Date.now();
      // Commits grow the indexes a few entries at a time: look at the bound now and then.
      const noted = this.#notedSinceCheck + blocks.length;
      this.#notedSinceCheck = noted >= NOTED_BLOCKS_PER_CHECK ? 0 : noted;
      if (noted >= NOTED_BLOCKS_PER_CHECK) this.enforceBlockLimit(did);
    }
  }

  /**
   * Forgets, in this process, what a compaction removed from the stored commits `revs`: the
   * CID index entries that pointed at one of them for a block it no longer holds (`removed`:
   * CID string -> the rev it was removed from), and the decoded copies of those commits.
   */
  forgetCompacted(
    did: string,
    removed: ReadonlyMap<string, string>,
    revs: Iterable<string>,
  ): void {
    const index = this.indexes.get(did);
    if (index) {
      for (const [cid, rev] of removed) if (index.revs.get(cid) === rev) index.revs.delete(cid);
    }
    for (const rev of revs) this.packs.delete(`${did} ${rev}`);
  }
}

/** Reads the blocks of one repository. */
export class KvBlockSource implements NodeSource {
  readonly #store: BlockStore;
  readonly #kv: Deno.Kv;
  readonly #did: string;

  constructor(store: BlockStore, did: string) {
    this.#store = store;
    this.#kv = store.kv;
    this.#did = did;
  }

  async getBlock(cid: CID): Promise<Uint8Array | null> {
    const id = formatCid(cid);
    return (await this.getMany([id])).get(id) ?? null;
  }

  /** Reads many blocks by CID string; missing ones are absent from the map. */
  async getMany(cids: string[]): Promise<Map<string, Uint8Array>> {
    const stored = await this.getStored(cids);
    const out = new Map<string, Uint8Array>();
    for (const [id, s] of stored) out.set(id, s.bytes);
    return out;
  }

  /** Reads many blocks with their revs; missing ones are absent from the map. */
  async getStored(cids: string[], rescanned = false): Promise<Map<string, StoredBlock>> {
    let index = await this.#index();
    if (cids.some((c) => !index.revs.has(c))) index = await this.#index(true);
    const byRev = new Map<string, string[]>();
    for (const c of cids) {
      const rev = index.revs.get(c);
      if (rev === undefined) continue;
      let list = byRev.get(rev);
      if (!list) byRev.set(rev, list = []);
      list.push(c);
    }
    const out = new Map<string, StoredBlock>();
    let stale = false;
    await Promise.all([...byRev].map(async ([rev, ids]) => {
      const pack = await this.readCommit(rev);
      for (const id of ids) {
        const bytes = pack.get(id);
        if (bytes) out.set(id, { rev, bytes });
        else stale = true;
      }
    }));
    if (stale && !rescanned) {
      // The index names a commit that no longer holds the block: another process compacted it,
      // keeping the block in a later commit whose copy this index missed (a commit that landed
      // during a scan is not recorded). Index the repository again.
      this.#store.indexes.delete(this.#did);
      return this.getStored(cids, true);
    }
    return out;
  }

  /** The blocks one commit wrote, by CID string (empty when there is no such commit). */
  async readCommit(rev: string): Promise<Map<string, Uint8Array>> {
    const cache = this.#store.packs;
    const key = `${this.#did} ${rev}`;
    const hit = cache.get(key);
    if (hit) {
      cache.delete(key);
      cache.set(key, hit);
      return hit;
    }
    const parts: Uint8Array[] = [];
    for await (
      const e of this.#kv.list<Uint8Array>({ prefix: repoBlocksRevPrefix(this.#did, rev) })
    ) parts.push(e.value);
    const pack = decodeBlockPack(concatBytes(parts));
    if (cache.size >= MAX_CACHED_PACKS) cache.delete(cache.keys().next().value!);
    cache.set(key, pack);
    return pack;
  }

  /** Reads every stored block of the repository with the rev of its latest write (export). */
  async all(): Promise<Map<string, StoredBlock>> {
    const out = new Map<string, StoredBlock>();
    await this.#scan("", (rev, pack) => {
      for (const [id, bytes] of pack) out.set(id, { rev, bytes });
    });
    return out;
  }

  /** Every stored commit of the repository, in rev order, with its chunk count (compaction). */
  async packs(pace?: Pace): Promise<StoredPack[]> {
    const out: StoredPack[] = [];
    await this.#scan("", (rev, blocks, chunks) => out.push({ rev, chunks, blocks }), pace);
    return out;
  }

  /** The CID index of the repository; `refresh` scans commits newer than the last seen. */
  async #index(refresh = false): Promise<RepoIndex> {
    const all = this.#store.indexes;
    let index = all.get(this.#did);
    if (index) {
      all.delete(this.#did);
      all.set(this.#did, index);
      index.usedAt = Date.now();
    } else {
      if (all.size >= MAX_INDEXED_REPOS) all.delete(all.keys().next().value!);
      index = { revs: new Map(), usedAt: Date.now(), lastRev: "", scanning: null };
      all.set(this.#did, index);
      refresh = true;
    }
    while (index.scanning) await index.scanning;
    if (refresh) {
      const target = index;
      target.scanning = this.#scan(target.lastRev, (rev, pack) => {
        for (const id of pack.keys()) target.revs.set(id, rev);
        if (rev > target.lastRev) target.lastRev = rev;
      }).finally(() => target.scanning = null);
      await target.scanning;
      this.#store.enforceBlockLimit(this.#did);
    }
    return index;
  }

  /**
   * Visits the commits with rev greater than `after`, in rev order.
   *
   * The commits are listed a page at a time, each page one read of the store, and each commit
   * is decoded from chunks of one page only: a compaction (of any process) that rewrites a
   * commit between two reads then yields either its old or its new blocks, never the old first
   * chunk joined to a new second one. A full page ends before its last commit, which the next
   * page starts with.
   */
  async #scan(
    after: string,
    visit: (rev: string, pack: Map<string, Uint8Array>, chunks: number) => void,
    pace?: Pace,
  ): Promise<void> {
    const prefix = repoBlocksPrefix(this.#did);
    let start: Deno.KvKey | undefined = after === "" ? undefined : [...prefix, after + "\0"];
    const slicer = new TimeSlicer(pace);
    for (;;) {
      const selector: Deno.KvListSelector = start === undefined ? { prefix } : { prefix, start };
      const page: Deno.KvEntry<Uint8Array>[] = [];
      for await (
        const e of this.#kv.list<Uint8Array>(selector, { limit: SCAN_PAGE, batchSize: SCAN_PAGE })
      ) page.push(e);
      const full = page.length === SCAN_PAGE;
      let end = page.length;
      if (full) {
        const lastRev = page[end - 1].key[2];
        while (end > 0 && page[end - 1].key[2] === lastRev) end--;
        if (end === 0) {
          throw new Error(`Stored commit ${String(lastRev)} of ${this.#did} has too many chunks`);
        }
        start = page[end].key;
      }
      for (let i = 0; i < end;) {
        if (slicer.due()) await slicer.next();
        const rev = page[i].key[2] as string;
        const parts: Uint8Array[] = [];
        for (; i < end && page[i].key[2] === rev; i++) parts.push(page[i].value);
        visit(rev, decodeBlockPack(concatBytes(parts)), parts.length);
      }
      if (!full) return;
    }
  }
}
