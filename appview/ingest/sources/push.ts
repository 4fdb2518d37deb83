/**
 * Push ingest (spec 6.4; docs/behaviour.md 10.7 "Push ingest"): the account host POSTs each commit
 * as JSON `{did, handle, rev, since, commit, blocks, ops: [{action, collection, rkey, cid,
 * record}]}` where `commit` is the commit block's CID and `blocks` the CAR of the `#commit`
 * stream frame (root = the commit; the commit, the new tree nodes and the new records) as lex
 * JSON bytes `{"$bytes": "<base64>"}`.
 *
 * A push is trusted no more than the holder of the ingest secret, so it is verified as a stream
 * frame's content would be ({@link verifyPush}), and nothing of it is applied unless all of it
 * checks out:
 *
 * - the commit block is in `blocks` under `commit`, names the pushed `did` and `rev`, and its
 *   signature verifies against the account's key, which the configured account host's DID
 *   document gives (`account_directory.ts`; an account it does not host cannot be pushed);
 * - each op is what the signed tree says: a create or update's key maps to the op's `cid` in the
 *   commit's tree, a delete's key is absent from it, every node on the way read from `blocks`
 *   (hash-checked), so a key whose path the blocks do not cover is refused, never assumed;
 * - the records are decoded from `blocks` by the stream's own converter (`opsFromCommitEvent`, on
 *   the frame body the push describes); the pushed JSON `record`s are not read (they stay in the
 *   body for indexes that predate `blocks`);
 * - the pushed `handle` must be the one that document lists; it is then applied as the account
 *   host's word (a `HandleOp` that may move a handle, as handle sync does with the host's
 *   answer). A push naming another handle is refused: it cannot move a handle.
 *
 * What a verified push does not prove: that its op list is the commit's whole change, nor that
 * `since` is the commit before it (neither is signed; proving them means undoing the ops on the
 * previous tree). A secret holder replaying a real commit could leave ops out or skip a commit;
 * the rev gate then passes the stream's copy over. It can withhold, not invent.
 *
 * Order: a push may arrive late (after the stream applied that commit and newer ones) or early
 * (before the stream delivered the commit before it). Its record ops are applied only when it is
 * exactly the repository's next commit: `since` (the previous commit's rev, null for the first)
 * equals the latest rev the index applied for that repository (`RevGate` `"next"`). Otherwise the
 * commit is passed over (`stale: 1`) and left to the local stream. A body without `since` (an
 * account host from before it was sent) is applied only when its `rev` is newer than the stored
 * rev. The pushed handle is applied either way (the account host's current handle, not history).
 *
 * @module
 */

import { CarError, readCar } from "../../../shared/car.ts";
import { asCid, type CID, formatCid } from "../../../shared/cid.ts";
import { fromLexJson } from "../../../shared/lex_json.ts";
import { lookupMstKey, MstProofError } from "../../../shared/mst_lookup.ts";
import { type IndexOp, OpsError, opsFromCommitEvent, opsFromPush } from "../../../shared/ops.ts";
import {
  CommitError,
  parseSignedCommit,
  type SignedCommit,
  verifyCommitSignature,
} from "../../../shared/signed_commit.ts";
import { isValidTid } from "../../../shared/tid.ts";
import type { AppviewContext } from "../../context.ts";
import {
  type AccountDirectory,
  AccountLookupError,
  type HostedAccount,
} from "./account_directory.ts";
import type { ApplyResult } from "../apply_ops.ts";

/** Largest CAR a push may carry (the frame's limit). */
const MAX_PUSH_CAR_BYTES = 5 * 1024 * 1024;
/** Most blocks read from a pushed CAR. */
const MAX_PUSH_CAR_BLOCKS = 10_000;

/** Error name: the commit does not prove the push (signature, did, rev or an op). */
export const PUSH_INVALID_COMMIT = "InvalidCommit";
/** Error name: the configured account host does not host the pushed account. */
export const PUSH_ACCOUNT_NOT_HOSTED = "AccountNotHosted";
/** Error name: the account host could not be asked for the account's key. */
export const PUSH_ACCOUNT_UNAVAILABLE = "AccountUnavailable";
/** Error name: the pushed handle is not the one the account host lists for the account. */
export const PUSH_HANDLE_MISMATCH = "HandleMismatch";

/** A push refused after its shape was accepted: `error` is one of the `PUSH_*` names. */
export class PushRefusedError extends Error {
  override readonly name = "PushRefusedError";
  constructor(readonly error: string, message: string) {
    super(message);
  }
}

/**
 * Verifies one parsed push body and applies it. `stale` in the result is 1 when the commit was
 * passed over (already applied, or not the next one): its record ops were not applied.
 *
 * @throws {OpsError} when the payload is malformed (nothing applied)
 * @throws {PushRefusedError} when it does not verify (nothing applied)
 */
export async function applyPush(
  ctx: AppviewContext,
  accounts: AccountDirectory,
  payload: unknown,
): Promise<ApplyResult> {
  const { ops, since } = await verifyPush(accounts, payload);
  const { did, rev } = payload as { did: string; rev: string };
  return await ctx.store.writer.applyOps(ops, { commit: { did, rev, since, mode: "next" } });
}

/**
 * Checks a push body against its commit (see the module notes) and returns its ops in the
 * single-operation form, records decoded from the pushed blocks.
 *
 * @throws {OpsError} when the payload is malformed
 * @throws {PushRefusedError} when it does not verify
 */
export async function verifyPush(
  accounts: AccountDirectory,
  payload: unknown,
): Promise<{ ops: IndexOp[]; since: string | null | undefined }> {
  // The shape of every member an older index read (did, rev, commit, handle, ops).
  const claimed = opsFromPush(payload);
  const body = payload as Record<string, unknown>;
  const did = body.did as string;
  const since = body.since;
  if (since !== undefined && since !== null && (typeof since !== "string" || !isValidTid(since))) {
    throw new OpsError(`Invalid since: ${JSON.stringify(since)}`);
  }
  const car = carBytes(body.blocks);
  const commitCid = asCid(body.commit)!;
  const blocks = readPushedCar(car, commitCid);
  const commit = commitOf(blocks, commitCid);
  if (commit.did !== did) refuse(`Commit is signed for ${commit.did}, not ${did}`);
  if (commit.rev !== body.rev) refuse(`Commit rev is ${commit.rev}, not ${String(body.rev)}`);
  const account = await verifiedAccount(accounts, did, (a) => verifyCommitSignature(commit, a.key));
  if (account === null) refuse(`Commit signature does not verify against the key of ${did}`);
  const records = claimed.filter((op) => op.kind === "record");
  const frameOps = records.map((op) => {
    const path = `${op.collection}/${op.rkey}`;
    const inTree = treeValue(blocks, commit.data, path);
    if (op.action === "delete") {
      if (inTree !== null) refuse(`Commit does not delete ${path}: the tree still holds it`);
      return { action: op.action, path, cid: null };
    }
    if (inTree === null || formatCid(inTree) !== op.cid) {
      refuse(`Commit does not hold ${path} at ${op.cid}: the tree has ${inTree ?? "no record"}`);
    }
    return { action: op.action, path, cid: inTree };
  });
  // The stream's converter over the frame body this push describes. Its leading account op (for
  // a first commit) is left out, as the push never gave one.
  const ops = opsFromCommitEvent({ repo: did, ops: frameOps, blocks: car, since: since ?? null })
    .filter((op) => op.kind === "record");
  const handleOp = claimed.find((op) => op.kind === "handle");
  if (handleOp === undefined) return { ops, since };
  if (handleOp.handle !== account.handle) {
    const fresh = await verifiedAccount(accounts, did, (a) => a.handle === handleOp.handle);
    if (fresh === null) {
      throw new PushRefusedError(
        PUSH_HANDLE_MISMATCH,
        `Handle ${handleOp.handle} is not the handle the account host lists for ${did}`,
      );
    }
  }
  return { ops: [handleOp, ...ops], since };
}

/** `blocks` of the body: lex JSON bytes. */
function carBytes(value: unknown): Uint8Array {
  if (value === undefined || value === null) refuse("Push carries no commit blocks");
  let bytes: unknown;
  try {
    bytes = fromLexJson(value);
  } catch {
    bytes = null;
  }
  if (!(bytes instanceof Uint8Array)) throw new OpsError('Invalid blocks: not {"$bytes": base64}');
  return bytes;
}

function readPushedCar(car: Uint8Array, commit: CID): Map<string, Uint8Array> {
  let read;
  try {
    read = readCar(car, {
      maxSize: MAX_PUSH_CAR_BYTES,
      maxBlocks: MAX_PUSH_CAR_BLOCKS,
      verify: "lazy",
    });
  } catch (e) {
    if (e instanceof CarError) throw new OpsError(`Invalid blocks: ${e.message}`, { cause: e });
    throw e;
  }
  if (read.roots.length !== 1 || !read.roots[0].equals(commit)) {
    refuse(`Blocks are not rooted at the commit ${formatCid(commit)}`);
  }
  return read.blocks;
}

function commitOf(blocks: Map<string, Uint8Array>, cid: CID): SignedCommit {
  try {
    const bytes = blocks.get(formatCid(cid));
    if (bytes === undefined) refuse(`Blocks lack the commit ${formatCid(cid)}`);
    return parseSignedCommit(bytes);
  } catch (e) {
    if (e instanceof CarError || e instanceof CommitError) refuse(e.message);
    throw e;
  }
}

function treeValue(blocks: Map<string, Uint8Array>, root: CID, path: string): CID | null {
  try {
    return lookupMstKey(blocks, root, path);
  } catch (e) {
    if (e instanceof MstProofError || e instanceof CarError) {
      refuse(`Commit does not prove ${path}: ${e.message}`);
    }
    throw e;
  }
}

/**
 * The account when `check` passes on it: the cached entry first, then (once) a fresh one, for a
 * rotated key or a changed handle. Null when neither passes.
 */
async function verifiedAccount(
  accounts: AccountDirectory,
  did: string,
  check: (account: HostedAccount) => boolean | Promise<boolean>,
): Promise<HostedAccount | null> {
  try {
    const cached = await accounts.lookup(did);
    if (await check(cached)) return cached;
    const fresh = await accounts.lookup(did, { refresh: true });
    return fresh !== cached && await check(fresh) ? fresh : null;
  } catch (e) {
    if (!(e instanceof AccountLookupError)) throw e;
    throw new PushRefusedError(
      e.reason === "not-hosted" ? PUSH_ACCOUNT_NOT_HOSTED : PUSH_ACCOUNT_UNAVAILABLE,
      e.message,
    );
  }
}

function refuse(message: string): never {
  throw new PushRefusedError(PUSH_INVALID_COMMIT, message);
}
