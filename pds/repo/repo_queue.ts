/**
 * The per-repository queue of the write path: the tasks of one repository (writes, its
 * compactions) run one after another in the order they were queued; different repositories'
 * run concurrently. Process state: a second process sharing the KV is caught by the versionstamp
 * check of each commit instead.
 *
 * @module
 */

/** Serialises async tasks per repository (DID). */
export class RepoQueue {
  readonly #tails = new Map<string, Promise<unknown>>();

  /** Runs `fn` after every earlier task of the same repository has settled. */
  run<T>(did: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.#tails.get(did) ?? Promise.resolve();
    const run = prev.then(fn, fn);
    const tail = run.then(() => {}, () => {});
    this.#tails.set(did, tail);
    tail.then(() => {
      if (this.#tails.get(did) === tail) this.#tails.delete(did);
    });
    return run;
  }
}
