/**
 * Push ingest (spec 6.4; DESIGN.md section 4 "Push ingest"): the account host POSTs each commit
 * as JSON `{did, handle, rev, since, commit, ops: [{action, collection, rkey, cid, record}]}`. The
 * body is converted to the single-operation form (`opsFromPush`; a `handle` gives a leading
 * `HandleOp`, the handle the account host supplied) and applied through the one write path. No
 * cursor: push is best effort, and the local stream delivers the same commit anyway (spec 6.2
 * rule 5).
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

import { OpsError, opsFromPush } from "../../shared/ops.ts";
import { isValidTid } from "../../shared/tid.ts";
import type { AppviewContext } from "../context.ts";
import type { ApplyResult } from "./apply_ops.ts";

/**
 * Applies one parsed push body. `stale` in the result is 1 when the commit was passed over
 * (already applied, or not the next one): its record ops were not applied.
 *
 * @throws {OpsError} when the payload is malformed (nothing applied)
 */
export function applyPush(ctx: AppviewContext, payload: unknown): ApplyResult {
  const ops = opsFromPush(payload);
  // opsFromPush checked `did` and `rev`.
  const { did, rev, since } = payload as { did: string; rev: string; since?: unknown };
  if (since !== undefined && since !== null && (typeof since !== "string" || !isValidTid(since))) {
    throw new OpsError(`Invalid since: ${JSON.stringify(since)}`);
  }
  return ctx.writer.applyOps(ops, { commit: { did, rev, since, mode: "next" } });
}
