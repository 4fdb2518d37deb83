/**
 * The blocks a push carries so the index can prove each delete (issue 36): the index refuses a
 * delete unless the pushed blocks show the key absent from the commit's tree, every node on the
 * way included. A commit event's CAR holds the nodes the commit rewrote; when a deleted key's
 * path runs through nodes it did not rewrite, those are read from the store and added here.
 * Checked with the index's own lookup (`shared/mst_lookup.ts`), so nothing is read when the event
 * already proves every delete (the usual case, and always once events carry covering proofs).
 *
 * @module
 */

import { readCar, writeCar } from "../../shared/car.ts";
import { formatCid, parseCid } from "../../shared/cid.ts";
import { lookupMstKey, MstProofError } from "../../shared/mst_lookup.ts";
import { parseSignedCommit } from "../../shared/signed_commit.ts";
import type { BlockStore } from "../repo/block_store.ts";
import { Mst } from "../repo/mst.ts";
import type { CommitEvent } from "./sequencer.ts";

/**
 * The event's CAR with the tree nodes its deletes need added, or null when it needs none.
 *
 * @throws {Error} when a needed node is not stored (the push is then not sent; the stream has it)
 */
export async function blocksProvingDeletes(
  store: BlockStore,
  event: CommitEvent,
): Promise<Uint8Array | null> {
  const deletes = event.ops.filter((op) => op.action === "delete");
  if (deletes.length === 0) return null;
  const { blocks } = readCar(event.blocks);
  const commit = parseSignedCommit(blocks.get(formatCid(event.commit))!);
  const unproven = deletes.filter((op) => {
    try {
      lookupMstKey(blocks, commit.data, op.path);
      return false;
    } catch (e) {
      if (e instanceof MstProofError) return true;
      throw e;
    }
  });
  if (unproven.length === 0) return null;
  const source = store.source(event.repo);
  const tree = await Mst.load(source, commit.data);
  const wanted = new Set<string>();
  for (const op of unproven) {
    for (const cid of await tree.pathTo(op.path)) {
      const id = formatCid(cid);
      if (!blocks.has(id)) wanted.add(id);
    }
  }
  const added = await source.getMany([...wanted]);
  for (const id of wanted) {
    if (!added.has(id)) throw new Error(`Tree node ${id} of ${event.repo} is not stored`);
  }
  const all = [...blocks, ...added].map(([id, bytes]) => ({ cid: parseCid(id), bytes }));
  return writeCar([event.commit], all);
}
