/**
 * The one write path of the repository (docs/architecture.md 6.9): {@link RepoService.applyWrites}
 * validates records, assigns TID record keys, overlays profile updates (spec 4.1 rule 3),
 * updates the MST, signs the commit and stores blocks, the root, the record index and the
 * commit's event at the next seq in one Deno KV atomic operation (spec 6.1 rules 1-2).
 *
 * Writes to one repository are serialised by an in-process queue per DID; the atomic operation
 * also checks the root's versionstamp, so a second process sharing the KV makes us reload the
 * root and redo the commit instead of forking the repository.
 *
 * @module
 */

import { type CID, encodeBlock, formatCid, parseCid } from "../../shared/cid.ts";
import { TidGenerator } from "../../shared/tid.ts";
import type { P256KeyPair } from "../../shared/keys.ts";
import type { Logger } from "../../shared/log.ts";
import { COLLECTION_PROFILE, PROFILE_RKEY } from "../../shared/nsid.ts";
import { validateRecord } from "../../shared/records.ts";
import { isValidNsid, isValidRecordKey } from "../../shared/syntax.ts";
import { formatAtUri } from "../../shared/at_uri.ts";
import { fromLexJsonObject, LexJsonError, toLexJson } from "../../shared/lex_json.ts";
import { decodeCbor } from "../../shared/cbor.ts";
import { carLength, CborWriter, writeCarOneRoot } from "./cbor_writer.ts";
import {
  blobRefKey,
  kvKeyBytes,
  repoBlocksKey,
  repoRecordKey,
  repoRootKey,
} from "../store/keys.ts";
import { blobRefIndexBuilt, deleteBlobIfUnreferenced } from "../blobs/blob_gc.ts";
import type { CommitEventOp, Sequencer } from "../sequencer/sequencer.ts";
import { blockChunks, type BlockStore, type KvBlockSource, putBlocks } from "./block_store.ts";
import { signCommitWith } from "./commit.ts";
import { commitSigner } from "./signer.ts";
import { type Block, EMPTY_TREE_CID, Mst, MstError } from "./mst.ts";
import { type CompactionOptions, type CompactionResult, compactRepoBlocks } from "./compaction.ts";
import { RepoError } from "./errors.ts";
import {
  checkBlobRefs,
  type CheckedBlob,
  findBlobRefs,
  type FoundBlob,
} from "../blobs/blob_refs.ts";

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
const MAX_MUTATIONS = 990;
const MAX_COMMIT_BYTES = 780_000;
/** Key bytes of one commit's checks and mutations (Deno KV allows 81,920 per operation). */
const MAX_COMMIT_KEY_BYTES = 70_000;
const MAX_ATTEMPTS = 10;
/**
 * Unreachable blocks a repository's commits leave (replaced MST nodes, the previous commit,
 * replaced and deleted records; counted in its root, `RepoRoot.garbage`) before a write queues
 * its compaction, and at least as many as the blocks its last compaction kept: compaction reads
 * the whole repository, so its cost per commit stays bounded.
 */
export const COMPACT_AFTER_GARBAGE_BLOCKS = 5_000;

/** What the repository needs from the account host. */
export interface RepoDeps {
  kv: Deno.Kv;
  /** The blocks of `kv` (shared with the readers, so that their caches see the commits). */
  blocks: BlockStore;
  /** The sequencer of `kv` (shared with the stream). */
  sequencer: Sequencer;
  log: Logger;
  /** Milliseconds since the epoch. */
  now(): number;
  /** The account's commit signing key; null for an unknown account. */
  signingKey(did: string): Promise<P256KeyPair | null>;
  /** Garbage blocks that trigger a compaction (default {@link COMPACT_AFTER_GARBAGE_BLOCKS}). */
  compactAfterGarbageBlocks?: number;
}

/** One write of {@link RepoService.applyWrites}; records are in lex JSON form. */
export type RepoWrite =
  | { action: "create"; collection: string; rkey?: string; record: unknown }
  | {
    action: "update";
    collection: string;
    rkey: string;
    record: unknown;
    /** Absent: no check; null: the record must not exist; a CID: the current record CID. */
    swapRecord?: string | null;
  }
  | { action: "delete"; collection: string; rkey: string; swapRecord?: string | null };

/** Outcome of one write. */
export interface WriteResult {
  action: "create" | "update" | "delete";
  uri: string;
  /** The record CID; null for deletes. */
  cid: string | null;
}

/** Outcome of {@link RepoService.applyWrites}. */
export interface ApplyWritesResult {
  /** The new commit; null when no write changed anything (a missing delete, an equal put). */
  commit: { cid: string; rev: string; seq: number } | null;
  results: WriteResult[];
}

/** Stored value of a record index entry (`repoRecordKey`). */
export interface StoredRecord {
  /** The record CID string. */
  cid: string;
  /** Rev of the commit that wrote it. */
  rev: string;
  /** The record block. */
  bytes: Uint8Array;
}

/** The stored root of a repository. */
export interface RepoRoot {
  commitCid: string;
  rev: string;
  dataCid: string;
  /**
   * Unreachable blocks the commits left since the last compaction (replaced MST nodes, the
   * previous commits, replaced and deleted records), counted by each commit; absent in roots
   * written before it was counted.
   */
  garbage?: number;
  /** Blocks the last compaction kept (absent before the first). */
  kept?: number;
}

interface LoadedRoot extends RepoRoot {
  versionstamp: string;
  /** `dataCid` parsed. */
  data: CID;
}

interface PreparedOp {
  action: "create" | "update" | "delete";
  collection: string;
  rkey: string;
  path: string;
  block: Block | null;
  prev: CID | null;
  /** The record as encoded (IPLD form), for in-process listeners of the commit (the push). */
  value: unknown;
  /** `block.cid` as a string (null for deletes), formatted once. */
  cid: string | null;
  /** Blobs the record references (empty for deletes). */
  blobs: FoundBlob[];
  /** Of those, the ones its previous version did not reference: checked against the uploads. */
  newBlobs: FoundBlob[];
  /** Blob CIDs whose reference by this record path the write adds and removes. */
  refs: BlobRefChanges;
}

interface BlobRefChanges {
  added: string[];
  removed: string[];
}

/** The repository write path and state of one KV store. */
export class RepoService {
  readonly #deps: RepoDeps;
  readonly #sequencer: Sequencer;
  readonly #tids = new TidGenerator();
  readonly #queues = new Map<string, Promise<unknown>>();
  readonly #roots = new Map<string, LoadedRoot>();
  /** Commits between their MST update and their KV commit (signing can overlap them). */
  #building = 0;
  /** Repositories with a compaction queued. */
  readonly #compactionQueued = new Set<string>();
  /** Settles when the last automatic compaction queued so far has (see {@link #maybeCompact}). */
  #compactionSlot: Promise<unknown> = Promise.resolve();
  /** Aborted by {@link compactionsSettled} with `stop`: the running one stops at its next rest. */
  readonly #compactionAbort = new AbortController();

  constructor(deps: RepoDeps) {
    this.#deps = deps;
    this.#sequencer = deps.sequencer;
  }

  /** The sequencer the commits go through (for `onCommit`). */
  get sequencer(): Sequencer {
    return this.#sequencer;
  }

  /** The blocks the commits are stored in. */
  get blocks(): BlockStore {
    return this.#deps.blocks;
  }

  /** Writes the initial empty commit of a new account; no-op when the repository exists. */
  initRepo(did: string): Promise<RepoRoot> {
    return this.#serialised(did, async () => {
      const root = await this.#loadRoot(did, true);
      return root ?? await this.#createRepo(did);
    });
  }

  /** Reads the current root of a repository (null when it does not exist). */
  async getRoot(did: string): Promise<RepoRoot | null> {
    const entry = await this.#deps.kv.get<RepoRoot>(repoRootKey(did));
    return entry.value;
  }

  /**
   * Applies writes to a repository as one commit. Creates the repository first when the
   * account exists but has none yet.
   *
   * @throws {RepoError} `InvalidRecord`, `InvalidRequest`, `InvalidSwap`, `RepoNotFound`.
   */
  applyWrites(
    did: string,
    writes: RepoWrite[],
    opts: { swapCommit?: string } = {},
  ): Promise<ApplyWritesResult> {
    if (!Array.isArray(writes) || writes.length === 0) {
      return Promise.reject(new RepoError("InvalidRequest", "Writes must not be empty"));
    }
    if (writes.length > MAX_WRITES_PER_COMMIT) {
      return Promise.reject(
        new RepoError(
          "InvalidRequest",
          `Too many writes in one commit: ${writes.length} (at most ${MAX_WRITES_PER_COMMIT})`,
        ),
      );
    }
    for (const w of writes) checkWriteShape(w);
    return this.#serialised(did, () => this.#applyLocked(did, writes, opts));
  }

  async #applyLocked(
    did: string,
    writes: RepoWrite[],
    opts: { swapCommit?: string },
  ): Promise<ApplyWritesResult> {
    const keyPair = await this.#deps.signingKey(did);
    if (!keyPair) throw new RepoError("RepoNotFound", `Repository not found: ${did}`);
    for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
      const root = await this.#loadRoot(did, attempt > 0) ?? await this.#createRepo(did);
      if (opts.swapCommit !== undefined && opts.swapCommit !== root.commitCid) {
        throw new RepoError(
          "InvalidSwap",
          `Commit was at ${root.commitCid}, not ${opts.swapCommit}`,
        );
      }
      const source = this.#deps.blocks.source(did);
      let tree: Mst;
      let prepared: { ops: PreparedOp[]; results: WriteResult[] };
      try {
        tree = await Mst.load(source, root.data);
        prepared = await this.#prepare(did, writes, tree, source);
        for (const op of prepared.ops) {
          if (op.block) await tree.set(op.path, op.block.cid);
          else await tree.delete(op.path);
        }
      } catch (err) {
        // A node of a root that another process has since replaced and compacted away.
        if (err instanceof MstError && await this.#rootMoved(did, root)) continue;
        throw err;
      }
      const { ops, results } = prepared;
      if (ops.length === 0) return { commit: null, results };
      const blobs = await this.#checkBlobs(did, ops);
      let committed;
      try {
        committed = await this.#commit(did, keyPair, root, tree, ops, blobs);
      } catch (err) {
        // A node of the ops' covering proofs, likewise gone with a replaced root.
        if (err instanceof MstError && await this.#rootMoved(did, root)) continue;
        throw err;
      }
      if (committed) {
        tree.release();
        await this.#deleteDereferencedBlobs(did, ops);
        this.#maybeCompact(did);
        return { commit: committed, results };
      }
      this.#roots.delete(did);
    }
    throw new Error(`Repository ${did} kept changing under the write`);
  }

  /**
   * Removes the blocks the repository's current commit no longer reaches (`compaction.ts`), in
   * its serialised section; null when the repository does not exist. Writes compact on their
   * own once enough garbage accumulated ({@link COMPACT_AFTER_GARBAGE_BLOCKS}).
   */
  compact(did: string, opts: CompactionOptions = {}): Promise<CompactionResult | null> {
    return this.#serialised(did, async () => {
      const root = await this.#loadRoot(did, true);
      if (root === null) return null;
      const started = performance.now();
      const result = await compactRepoBlocks(this.#deps.blocks, did, root, opts);
      // The compaction rewrote the root (its garbage count): reload it with its versionstamp.
      await this.#loadRoot(did, true);
      this.#deps.log.info("repository compacted", {
        did,
        blocksRemoved: result.blocksRemoved,
        bytesRemoved: result.bytesRemoved,
        blocksKept: result.blocksKept,
        complete: result.complete,
        ms: Math.round(performance.now() - started),
        background: opts.background ?? false,
      });
      return result;
    });
  }

  /**
   * Deletes the blobs the commit's records stopped referencing when no other record references
   * them (`blob_gc.ts`). A failure is logged, not the write's: the hourly sweep retries.
   */
  async #deleteDereferencedBlobs(did: string, ops: PreparedOp[]): Promise<void> {
    const dropped = new Set(ops.flatMap((op) => op.refs.removed));
    if (dropped.size === 0) return;
    try {
      if (!await blobRefIndexBuilt(this.#deps.kv)) return;
      for (const cid of dropped) {
        if (await deleteBlobIfUnreferenced(this.#deps.kv, did, cid)) {
          this.#deps.log.info("deleted a blob no record references", { did, cid });
        }
      }
    } catch (err) {
      this.#deps.log.warn("deleting dereferenced blobs failed", { did, error: err });
    }
  }

  /**
   * Resolves once no automatic compaction is queued or running; with `stop`, the running one
   * stops at its next rest, the queued ones are dropped and no new one starts (shutdown: the
   * store is about to close). A stopped compaction loses nothing: what it removed stays removed,
   * the root keeps its garbage count, and a later write queues it again.
   */
  async compactionsSettled(opts: { stop?: boolean } = {}): Promise<void> {
    if (opts.stop) this.#compactionAbort.abort(new Error("Compactions stopped"));
    let slot;
    do {
      slot = this.#compactionSlot;
      await slot;
    } while (slot !== this.#compactionSlot);
  }

  /** Queues a compaction once the garbage counted in the root is enough. */
  #maybeCompact(did: string): void {
    const root = this.#roots.get(did);
    if (root === undefined) return;
    const threshold = Math.max(
      this.#deps.compactAfterGarbageBlocks ?? COMPACT_AFTER_GARBAGE_BLOCKS,
      root.kept ?? 0,
    );
    if (
      (root.garbage ?? 0) < threshold || this.#compactionQueued.has(did) ||
      this.#compactionAbort.signal.aborted
    ) return;
    this.#compactionQueued.add(did);
    // One automatic compaction at a time, at the background pace: accounts written at the same
    // rate reach the threshold together, and a dozen compactions at once had taken the main
    // thread and KV's writer from every other repository's writes for seconds. The slot is
    // taken before the repository's serialised section, so its writes wait for its own
    // compaction only, and the compaction is queued behind the current write (whose caller is
    // answered first).
    const run = this.#compactionSlot
      .then(() =>
        this.#compactionAbort.signal.aborted
          ? null
          : this.compact(did, { background: true, signal: this.#compactionAbort.signal })
      )
      .catch((err) => this.#deps.log.warn("repository compaction failed", { did, error: err }))
      .finally(() => this.#compactionQueued.delete(did));
    this.#compactionSlot = run;
  }

  /** Whether the stored root of `did` is no longer `root`. */
  async #rootMoved(did: string, root: LoadedRoot): Promise<boolean> {
    const current = await this.#loadRoot(did, true);
    return current?.commitCid !== root.commitCid;
  }

  /** The uploads the commit's records newly reference, checked (`blob_refs.ts`). */
  async #checkBlobs(did: string, ops: PreparedOp[]): Promise<CheckedBlob[]> {
    const fresh = ops.flatMap((op) => op.newBlobs);
    if (fresh.length === 0) return [];
    const checked = await checkBlobRefs(this.#deps.kv, did, fresh);
    if (checked.size > MAX_BLOBS_PER_COMMIT) {
      throw new RepoError(
        "InvalidRequest",
        `Commit references ${checked.size} new blobs (at most ${MAX_BLOBS_PER_COMMIT})`,
      );
    }
    return [...checked.values()];
  }

  /** Resolves rkeys, checks swaps, overlays profiles, validates and encodes the records. */
  async #prepare(did: string, writes: RepoWrite[], tree: Mst, source: KvBlockSource) {
    const ops: PreparedOp[] = [];
    const results: WriteResult[] = [];
    const seen = new Set<string>();
    for (const w of writes) {
      const isProfile = w.collection === COLLECTION_PROFILE;
      const rkey = w.rkey ?? (isProfile ? PROFILE_RKEY : this.#tids.next());
      const path = `${w.collection}/${rkey}`;
      const uri = formatAtUri(did, w.collection, rkey);
      if (seen.has(path)) throw new RepoError("InvalidRequest", `Duplicate write to ${path}`);
      seen.add(path);
      const prev = await tree.get(path);
      if ("swapRecord" in w && w.swapRecord !== undefined) {
        const current = prev ? formatCid(prev) : null;
        if (current !== w.swapRecord) {
          throw new RepoError(
            "InvalidSwap",
            `Record ${path} was at ${current ?? "nothing"}, not ${w.swapRecord ?? "nothing"}`,
          );
        }
      }
      const stored = prev
        ? await readRecordValue(this.#deps.kv, did, source, w.collection, rkey, prev)
        : null;
      const storedBlobs = findBlobRefs(stored);
      if (w.action === "delete") {
        results.push({ action: "delete", uri, cid: null });
        if (prev) {
          ops.push({
            action: "delete",
            collection: w.collection,
            rkey,
            path,
            block: null,
            prev,
            value: null,
            cid: null,
            blobs: [],
            newBlobs: [],
            refs: blobRefChanges([], storedBlobs),
          });
        }
        continue;
      }
      if (w.action === "create" && prev && !isProfile) {
        throw new RepoError("InvalidRequest", `Record already exists: ${uri}`);
      }
      let record = w.record as Record<string, unknown>;
      if (isProfile) {
        const current = stored === null ? null : toLexJson(stored) as Record<string, unknown>;
        record = overlayProfile(current, record);
      }
      const { block, value } = encodeRecord(w.collection, record);
      const cid = formatCid(block.cid);
      results.push({ action: prev ? "update" : "create", uri, cid });
      if (prev && prev.equals(block.cid)) continue;
      const blobs = findBlobRefs(value);
      // A blob the previous version referenced alike is not checked again: the update of a
      // profile's description must not fail on the avatar it keeps.
      const kept = new Set(storedBlobs.map(blobIdentity));
      ops.push({
        action: prev ? "update" : "create",
        collection: w.collection,
        rkey,
        path,
        block,
        prev,
        value,
        cid,
        blobs,
        newBlobs: blobs.filter((b) => !kept.has(blobIdentity(b))),
        refs: blobRefChanges(blobs, storedBlobs),
      });
    }
    return { ops, results };
  }

  async #commit(
    did: string,
    keyPair: P256KeyPair,
    root: LoadedRoot | null,
    tree: Mst,
    ops: PreparedOp[],
    blobs: CheckedBlob[] = [],
  ): Promise<{ cid: string; rev: string; seq: number } | null> {
    this.#building++;
    try {
      return await this.#commitCounted(did, keyPair, root, tree, ops, blobs);
    } finally {
      this.#building--;
    }
  }

  async #commitCounted(
    did: string,
    keyPair: P256KeyPair,
    root: LoadedRoot | null,
    tree: Mst,
    ops: PreparedOp[],
    blobs: CheckedBlob[],
  ): Promise<{ cid: string; rev: string; seq: number } | null> {
    const { root: data, blocks: nodeBlocks } = tree.finalize();
    // The event also carries the unchanged nodes of each op's covering proof (a sync 1.1
    // consumer proves and inverts the ops with the event's blocks alone); they are stored
    // already, so the commit's pack does not hold them again.
    const proofBlocks = await tree.coveringProof(ops.map((op) => op.path));
    const rev = root ? this.#tids.nextAfter(root.rev) : this.#tids.next();
    const concurrent = this.#building > 1;
    const commitBlock = await signCommitWith(commitSigner(), {
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
    const committed = await this.#sequencer.commit({
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
        time: new Date(this.#deps.now()).toISOString(),
      },
      records: new Map(ops.flatMap((op) => op.cid !== null ? [[op.cid, op.value]] : [])),
      mutations: blockChunks(size) + ops.length + 1 + blobs.length + refMutations,
      bytes: size,
      checks: 1 + blobs.length,
      keyBytes,
    });
    if (!committed) return null;
    this.#deps.blocks.noteCommitBlocks(did, root?.rev ?? null, rev, blocks);
    // Every key of one atomic operation gets the operation's versionstamp.
    this.#roots.set(did, { ...newRoot, versionstamp: committed.versionstamp, data });
    return { cid: newRoot.commitCid, rev, seq: committed.seq };
  }

  async #createRepo(did: string): Promise<LoadedRoot> {
    const keyPair = await this.#deps.signingKey(did);
    if (!keyPair) throw new RepoError("RepoNotFound", `Repository not found: ${did}`);
    const tree = Mst.empty(this.#deps.blocks.source(did));
    for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
      const committed = await this.#commit(did, keyPair, null, tree, []);
      const root = await this.#loadRoot(did, true);
      if (root) return root;
      if (committed) break;
    }
    throw new Error(`Repository ${did} could not be created`);
  }

  async #loadRoot(did: string, fresh: boolean): Promise<LoadedRoot | null> {
    if (!fresh) {
      const hit = this.#roots.get(did);
      if (hit) return hit;
    }
    const entry = await this.#deps.kv.get<RepoRoot>(repoRootKey(did));
    if (entry.value === null) {
      this.#roots.delete(did);
      return null;
    }
    const root = {
      ...entry.value,
      versionstamp: entry.versionstamp,
      data: parseCid(entry.value.dataCid),
    };
    this.#roots.set(did, root);
    return root;
  }

  /** Runs `fn` after every earlier task of the same repository has settled. */
  #serialised<T>(did: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.#queues.get(did) ?? Promise.resolve();
    const run = prev.then(fn, fn);
    const tail = run.then(() => {}, () => {});
    this.#queues.set(did, tail);
    tail.then(() => {
      if (this.#queues.get(did) === tail) this.#queues.delete(did);
    });
    return run;
  }
}

function checkWriteShape(w: RepoWrite): void {
  if (w === null || typeof w !== "object") {
    throw new RepoError("InvalidRequest", "Write is not an object");
  }
  const action = (w as { action: unknown }).action;
  if (action !== "create" && action !== "update" && action !== "delete") {
    throw new RepoError("InvalidRequest", `Unknown write action: ${JSON.stringify(action)}`);
  }
  if (typeof w.collection !== "string" || !isValidNsid(w.collection)) {
    throw new RepoError("InvalidRequest", `Invalid collection: ${JSON.stringify(w.collection)}`);
  }
  if (w.action !== "create" || w.rkey !== undefined) {
    if (typeof w.rkey !== "string" || !isValidRecordKey(w.rkey)) {
      throw new RepoError("InvalidRequest", `Invalid record key: ${JSON.stringify(w.rkey)}`);
    }
  }
  if (w.collection === COLLECTION_PROFILE && w.rkey !== undefined && w.rkey !== PROFILE_RKEY) {
    throw new RepoError("InvalidRequest", `Profile record key must be self: ${w.rkey}`);
  }
  if (w.action !== "delete") {
    const r = w.record;
    if (r === null || typeof r !== "object" || Array.isArray(r)) {
      throw new RepoError("InvalidRecord", "Record is not an object");
    }
  }
}

/** The current version `prev` of a record (IPLD form); null when its block is gone. */
async function readRecordValue(
  kv: Deno.Kv,
  did: string,
  source: KvBlockSource,
  collection: string,
  rkey: string,
  prev: CID,
): Promise<unknown> {
  const stored = (await kv.get<StoredRecord>(repoRecordKey(did, collection, rkey))).value;
  const bytes = stored?.cid === formatCid(prev) ? stored.bytes : await source.getBlock(prev);
  return bytes ? decodeCbor(bytes) : null;
}

/**
 * Spec 4.1 rule 3: supplied fields replace the stored ones, omitted fields are kept, a field
 * sent as null is removed.
 */
function overlayProfile(
  stored: Record<string, unknown> | null,
  supplied: Record<string, unknown>,
): Record<string, unknown> {
  const merged: Record<string, unknown> = { ...stored };
  for (const [k, v] of Object.entries(supplied)) {
    if (v === null) delete merged[k];
    else merged[k] = v;
  }
  return merged;
}

/** What makes two references of a blob alike (the field too: moving it rechecks it). */
function blobIdentity(b: FoundBlob): string {
  return `${b.cid} ${b.mimeType} ${b.size} ${b.path}`;
}

/** The blob references a write adds and removes for its record path. */
function blobRefChanges(blobs: FoundBlob[], previous: FoundBlob[]): BlobRefChanges {
  const now = new Set(blobs.map((b) => b.cid));
  const before = new Set(previous.map((b) => b.cid));
  return {
    added: [...now].filter((cid) => !before.has(cid)),
    removed: [...before].filter((cid) => !now.has(cid)),
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

/** Validates a lex JSON record, fills `$type`, and encodes it as a block (with its value). */
function encodeRecord(
  collection: string,
  record: Record<string, unknown>,
): { block: Block; value: Record<string, unknown> } {
  const checked = validateRecord(collection, record);
  if (!checked.ok) throw new RepoError("InvalidRecord", checked.reason);
  let value: Record<string, unknown>;
  try {
    value = fromLexJsonObject({ ...checked.value, $type: collection });
  } catch (e) {
    if (e instanceof LexJsonError) throw new RepoError("InvalidRecord", e.message);
    throw e;
  }
  let block: Block;
  try {
    block = encodeBlock(value);
  } catch (e) {
    throw new RepoError("InvalidRecord", `Record cannot be encoded: ${(e as Error).message}`);
  }
  if (block.bytes.length > MAX_RECORD_BYTES) {
    throw new RepoError(
      "InvalidRecord",
      `Record is ${block.bytes.length} bytes, over the ${MAX_RECORD_BYTES} byte limit`,
    );
  }
  return { block, value };
}

/**
 * Bytes of the keys `fill` checks and writes, as Deno KV counts them toward its per-operation
 * limit (about the encoded tuple: each part's bytes plus a tag and a terminator).
 */
function commitKeyBytes(
  did: string,
  rev: string,
  blocks: Block[],
  ops: PreparedOp[],
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

function checkCommitSize(
  blocks: Block[],
  proofBlocks: Block[],
  ops: PreparedOp[],
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

export { EMPTY_TREE_CID };
