/**
 * When the write path compacts a repository on its own: once the garbage its commits counted in
 * the root is enough, one automatic compaction at a time, at the background pace, and none once
 * stopped (shutdown).
 *
 * @module
 */

import type { Logger } from "../../shared/log.ts";
import type { RepoRoot } from "./repo_root.ts";

/**
 * Unreachable blocks a repository's commits leave (replaced MST nodes, the previous commit,
 * replaced and deleted records; counted in its root, `RepoRoot.garbage`) before a write queues
 * its compaction, and at least as many as the blocks its last compaction kept: compaction reads
 * the whole repository, so its cost per commit stays bounded.
 */
export const COMPACT_AFTER_GARBAGE_BLOCKS = 5_000;

/** Options of {@link CompactionScheduler}. */
export interface CompactionSchedulerOptions {
  log: Logger;
  /** Garbage blocks that trigger a compaction (default {@link COMPACT_AFTER_GARBAGE_BLOCKS}). */
  compactAfterGarbageBlocks?: number;
  /** Runs one background compaction of `did` (in the repository's queue). */
  compact(did: string, signal: AbortSignal): Promise<unknown>;
}

/** The automatic compactions of one repository service. */
export class CompactionScheduler {
  readonly #log: Logger;
  readonly #threshold: number;
  readonly #compact: (did: string, signal: AbortSignal) => Promise<unknown>;
  /** Repositories with a compaction queued. */
  readonly #queued = new Set<string>();
  /** Settles when the last automatic compaction queued so far has (see {@link maybeCompact}). */
  #slot: Promise<unknown> = Promise.resolve();
  /** Aborted by {@link settled} with `stop`: the running one stops at its next rest. */
  readonly #abort = new AbortController();

  constructor(opts: CompactionSchedulerOptions) {
    this.#log = opts.log;
    this.#threshold = opts.compactAfterGarbageBlocks ?? COMPACT_AFTER_GARBAGE_BLOCKS;
    this.#compact = opts.compact;
  }

  /**
   * Resolves once no automatic compaction is queued or running; with `stop`, the running one
   * stops at its next rest, the queued ones are dropped and no new one starts (shutdown: the
   * store is about to close). A stopped compaction loses nothing: what it removed stays removed,
   * the root keeps its garbage count, and a later write queues it again.
   */
  async settled(opts: { stop?: boolean } = {}): Promise<void> {
    if (opts.stop) this.#abort.abort(new Error("Compactions stopped"));
    let slot;
    do {
      slot = this.#slot;
      await slot;
    } while (slot !== this.#slot);
  }

  /** Queues a compaction of `did` once the garbage counted in its root is enough. */
  maybeCompact(did: string, root: RepoRoot | undefined): void {
    if (root === undefined) return;
    const threshold = Math.max(this.#threshold, root.kept ?? 0);
    if (
      (root.garbage ?? 0) < threshold || this.#queued.has(did) ||
      this.#abort.signal.aborted
    ) return;
    this.#queued.add(did);
    // One automatic compaction at a time, at the background pace: accounts written at the same
    // rate reach the threshold together, and a dozen compactions at once had taken the main
    // thread and KV's writer from every other repository's writes for seconds. The slot is
    // taken before the repository's serialised section, so its writes wait for its own
    // compaction only, and the compaction is queued behind the current write (whose caller is
    // answered first).
    const run = this.#slot
      .then(() => this.#abort.signal.aborted ? null : this.#compact(did, this.#abort.signal))
      .catch((err) => this.#log.warn("repository compaction failed", { did, error: err }))
      .finally(() => this.#queued.delete(did));
    this.#slot = run;
  }
}
