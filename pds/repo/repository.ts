/**
 * The one write path of the repository (docs/architecture.md 6.9): {@link RepoService.applyWrites}
 * validates records, assigns TID record keys, overlays profile updates (spec 4.1 rule 3),
 * updates the MST, signs the commit and stores blocks, the root, the record index and the
 * commit's event at the next seq in one Deno KV atomic operation (spec 6.1 rules 1-2).
 *
 * Writes to one repository are serialised by an in-process queue per DID (`repo_queue.ts`); the
 * atomic operation also checks the root's versionstamp, so a second process sharing the KV makes
 * us reload the root and redo the commit instead of forking the repository. The steps live in
 * `prepare_writes.ts` (records), `commit_writer.ts` (the atomic operation), `commit_limits.ts`
 * (its budget) and `compaction_scheduler.ts` (automatic compaction).
 *
 * @module
 */

import type { CommitSigner } from "./signer.ts";
import { parseCid } from "../../shared/cid.ts";
import { TidGenerator } from "../../shared/tid.ts";
import type { P256KeyPair } from "../../shared/keys.ts";
import type { Logger } from "../../shared/log.ts";
import { repoRootKey } from "../store/keys.ts";
import { blobRefIndexBuilt, deleteBlobIfUnreferenced } from "../blobs/blob_gc.ts";
import type { CheckedBlob } from "../blobs/blob_refs.ts";
import type { Sequencer } from "../sequencer/sequencer.ts";
import type { BlockStore } from "./block_store.ts";
import { Mst, MstError } from "./mst.ts";
import { type CompactionOptions, type CompactionResult, compactRepoBlocks } from "./compaction.ts";
import { CompactionScheduler } from "./compaction_scheduler.ts";
import { MAX_WRITES_PER_COMMIT } from "./commit_limits.ts";
import { writeCommit } from "./commit_writer.ts";
import { RepoError } from "./errors.ts";
import {
  checkNewBlobs,
  checkWriteShape,
  type PreparedOp,
  prepareWrites,
  type RepoWrite,
  type WriteResult,
} from "./prepare_writes.ts";
import { RepoQueue } from "./repo_queue.ts";
import type { LoadedRoot, RepoRoot } from "./repo_root.ts";

/** Commit attempts of one write before it gives up (the root kept moving under it). */
const MAX_ATTEMPTS = 10;

/** What the repository needs from the account host. */
export interface RepoDeps {
  kv: Deno.Kv;
  /** The blocks of `kv` (shared with the readers, so that their caches see the commits). */
  blocks: BlockStore;
  /** The sequencer of `kv` (shared with the stream). */
  sequencer: Sequencer;
  /**
   * Signs the commits (the process's `commitSigner()`, handed over by the context factory).
   * Absent, the service makes no commit (`deno task compact` only compacts): a write fails.
   */
  signer?: CommitSigner;
  log: Logger;
  /** Milliseconds since the epoch. */
  now(): number;
  /** The account's commit signing key; null for an unknown account. */
  signingKey(did: string): Promise<P256KeyPair | null>;
  /** Garbage blocks that trigger a compaction (default `COMPACT_AFTER_GARBAGE_BLOCKS`). */
  compactAfterGarbageBlocks?: number;
}

/** Outcome of {@link RepoService.applyWrites}. */
export interface ApplyWritesResult {
  /** The new commit; null when no write changed anything (a missing delete, an equal put). */
  commit: { cid: string; rev: string; seq: number } | null;
  results: WriteResult[];
}

/** The repository write path and state of one KV store. */
export class RepoService {
  readonly #deps: RepoDeps;
  readonly #sequencer: Sequencer;
  readonly #tids = new TidGenerator();
  readonly #queue = new RepoQueue();
  readonly #roots = new Map<string, LoadedRoot>();
  /** Commits between their MST update and their KV commit (signing can overlap them). */
  #building = 0;
  readonly #compactions: CompactionScheduler;

  constructor(deps: RepoDeps) {
    this.#deps = deps;
    this.#sequencer = deps.sequencer;
    this.#compactions = new CompactionScheduler({
      log: deps.log,
      compactAfterGarbageBlocks: deps.compactAfterGarbageBlocks,
      compact: (did, signal) => this.compact(did, { background: true, signal }),
    });
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
    return this.#queue.run(did, async () => {
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
    return this.#queue.run(did, () => this.#applyLocked(did, writes, opts));
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
        prepared = await prepareWrites(writes, {
          kv: this.#deps.kv,
          did,
          tree,
          source,
          tids: this.#tids,
        });
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
      const blobs = await checkNewBlobs(ops, { kv: this.#deps.kv, did });
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
        this.#compactions.maybeCompact(did, this.#roots.get(did));
        return { commit: committed, results };
      }
      this.#roots.delete(did);
    }
    throw new Error(`Repository ${did} kept changing under the write`);
  }

  /**
   * Removes the blocks the repository's current commit no longer reaches (`compaction.ts`), in
   * its serialised section; null when the repository does not exist. Writes compact on their
   * own once enough garbage accumulated (`compaction_scheduler.ts`).
   */
  compact(did: string, opts: CompactionOptions = {}): Promise<CompactionResult | null> {
    return this.#queue.run(did, async () => {
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
  compactionsSettled(opts: { stop?: boolean } = {}): Promise<void> {
    return this.#compactions.settled(opts);
  }

  /** Whether the stored root of `did` is no longer `root`. */
  async #rootMoved(did: string, root: LoadedRoot): Promise<boolean> {
    const current = await this.#loadRoot(did, true);
    return current?.commitCid !== root.commitCid;
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
      const written = await writeCommit({
        did,
        keyPair,
        root,
        tree,
        ops,
        blobs,
        concurrent: this.#building > 1,
        tids: this.#tids,
        sequencer: this.#sequencer,
        blockStore: this.#deps.blocks,
        signer: this.#deps.signer ?? null,
        now: () => this.#deps.now(),
      });
      if (written === null) return null;
      this.#roots.set(did, written.root);
      return { cid: written.cid, rev: written.rev, seq: written.seq };
    } finally {
      this.#building--;
    }
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
}
