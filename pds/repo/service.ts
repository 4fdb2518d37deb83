/**
 * The repository service of an account host context: one {@link RepoService} per context (its
 * per-repository queues and caches are process state), signing with the account keys.
 *
 * @module
 */

import type { PdsContext } from "../context.ts";
import { getAccountKeyPair } from "../accounts/account_keys.ts";
import {
  type ApplyWritesResult,
  type RepoRoot,
  RepoService,
  type RepoWrite,
} from "./repository.ts";

const services = new WeakMap<PdsContext, RepoService>();

/** The repository service of `ctx` (created on first use). */
export function repoServiceFor(ctx: PdsContext): RepoService {
  let service = services.get(ctx);
  if (!service) {
    service = new RepoService({
      kv: ctx.kv,
      log: ctx.log,
      now: () => ctx.now(),
      signingKey: (did) => getAccountKeyPair(ctx.kv, did),
    });
    services.set(ctx, service);
  }
  return service;
}

/** Writes the initial empty commit of a new account (wire it to `hooks.onAccountCreated`). */
export function initRepo(ctx: PdsContext, did: string): Promise<RepoRoot> {
  return repoServiceFor(ctx).initRepo(did);
}

/** Applies writes to the repository of `did` as one commit (see {@link RepoService.applyWrites}). */
export function applyWrites(
  ctx: PdsContext,
  did: string,
  writes: RepoWrite[],
  opts?: { swapCommit?: string },
): Promise<ApplyWritesResult> {
  return repoServiceFor(ctx).applyWrites(did, writes, opts);
}
