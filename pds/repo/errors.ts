/**
 * The repository's domain error: a protocol error name (`InvalidRecord`, `InvalidSwap`,
 * `RepoNotFound`, ...) and a message naming the value at fault. The XRPC layer maps it to a
 * status; the domain never speaks HTTP.
 *
 * @module
 */

/** A refused repository operation. */
export class RepoError extends Error {
  override readonly name = "RepoError";
  constructor(readonly code: string, message: string) {
    super(message);
  }
}
