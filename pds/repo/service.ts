/**
 * The repository service of an account host context: `createPdsContext` builds one
 * {@link RepoService} per context (`ctx.repos`; its per-repository queues and caches are process
 * state) with {@link createRepoService}, signing with the account keys.
 *
 * @module
 */

import type { CommitSigner } from "./signer.ts";
import type { Logger } from "../../shared/log.ts";
import type { PdsContext } from "../context.ts";
import type { AccountKeys } from "../accounts/account_keys.ts";
import type { Sequencer } from "../sequencer/sequencer.ts";
import type { BlockStore } from "./block_store.ts";
import { type ApplyWritesResult, RepoService } from "./repository.ts";
import type { RepoWrite } from "./prepare_writes.ts";
import type { RepoRoot } from "./repo_root.ts";

/** The repository service of an account host, on its store, sequencer and account keys. */
export function createRepoService(parts: {
  kv: Deno.Kv;
  log: Logger;
  now(): number;
  accountKeys: AccountKeys;
  blocks: BlockStore;
  sequencer: Sequencer;
  signer: CommitSigner;
}): RepoService {
  const { accountKeys } = parts;
  return new RepoService({
    kv: parts.kv,
    log: parts.log,
    now: () => parts.now(),
    signingKey: (did) => accountKeys.get(did),
    blocks: parts.blocks,
    sequencer: parts.sequencer,
    signer: parts.signer,
  });
}

/** Writes the initial empty commit of a new account (wire it to `hooks.onAccountCreated`). */
export function initRepo(ctx: PdsContext, did: string): Promise<RepoRoot> {
  return ctx.repos.initRepo(did);
}

/** Applies writes to the repository of `did` as one commit (see {@link RepoService.applyWrites}). */
export function applyWrites(
  ctx: PdsContext,
  did: string,
  writes: RepoWrite[],
  opts?: { swapCommit?: string },
): Promise<ApplyWritesResult> {
  return ctx.repos.applyWrites(did, writes, opts);
}
