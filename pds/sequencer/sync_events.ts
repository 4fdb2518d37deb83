/**
 * `#sync` events (docs/protocol.md 6.2; docs/behaviour.md 6.1 rule 10): "this repository is now
 * at this commit; fetch it if you do not hold it". The body is `{seq, did, rev, blocks, time}`,
 * `blocks` a CAR whose one root and one block is the repository's signed commit. Sent after a new
 * account's first commit, as the reference host does, so that a consumer that never saw a
 * `#commit` of the account (a relay joining later) learns the repository's state from the event
 * alone. Stored as a whole frame (`frame_events.ts`), in one atomic operation that checks the
 * repository's root: a commit landing meanwhile makes it try again with the newer commit.
 *
 * @module
 */

import { parseCid } from "../../shared/cid.ts";
import { writeCar } from "../../shared/car.ts";
import type { BlockStore } from "../repo/block_store.ts";
import type { RepoRoot } from "../repo/repo_root.ts";
import { repoRootKey } from "../store/keys.ts";
import { commitFrameEvent, type FrameEventSpec } from "./frame_events.ts";

/** Frame type of sync events. */
export const SYNC_FRAME_TYPE = "#sync";

/** The `#sync` frame body. */
export interface SyncEvent {
  seq: number;
  did: string;
  /** The commit's rev. */
  rev: string;
  /** CAR v1: root = the commit's CID; one block, the signed commit. */
  blocks: Uint8Array;
  time: string;
}

/** The `#sync` event of `did` at the commit `rev` (`car` from {@link commitCar}). */
export function syncEventSpec(
  did: string,
  rev: string,
  car: Uint8Array,
): FrameEventSpec<SyncEvent> {
  return {
    type: SYNC_FRAME_TYPE,
    build: (seq, time) => ({ seq, did, rev, blocks: car, time }),
  };
}

/** The CAR of a `#sync` event: the stored commit block of `root`, alone. */
export async function commitCar(
  blocks: BlockStore,
  did: string,
  root: RepoRoot,
): Promise<Uint8Array> {
  const bytes = (await blocks.source(did).readCommit(root.rev)).get(root.commitCid);
  if (bytes === undefined) {
    throw new Error(`Commit block ${root.commitCid} of ${did} is not stored`);
  }
  const cid = parseCid(root.commitCid);
  return writeCar([cid], [{ cid, bytes }]);
}

/**
 * Sequences a `#sync` event for the current commit of `did`'s repository. Resolves to the event,
 * or null when the account has no repository.
 */
export function commitSyncEvent(
  kv: Deno.Kv,
  blocks: BlockStore,
  opts: { did: string; nowMs: number },
): Promise<SyncEvent | null> {
  let rev = "";
  let car: Uint8Array = new Uint8Array();
  return commitFrameEvent<SyncEvent>(kv, {
    type: SYNC_FRAME_TYPE,
    label: `Sync event for ${opts.did}`,
    nowMs: opts.nowMs,
    build: (seq, time) => syncEventSpec(opts.did, rev, car).build(seq, time),
    prepare: async () => {
      const root = await kv.get<RepoRoot>(repoRootKey(opts.did));
      if (root.value === null) return null;
      rev = root.value.rev;
      car = await commitCar(blocks, opts.did, root.value);
      return (op) => void op.check(root);
    },
  });
}
