/**
 * Push ingest (spec 6.4; DESIGN.md section 4 "Push ingest"): the account host POSTs each commit
 * as JSON `{did, handle, rev, commit, ops: [{action, collection, rkey, cid, record}]}`. The body is
 * converted to the single-operation form (`opsFromPush`; a `handle` gives a leading `HandleOp`,
 * the handle the account host supplied) and applied through the one write path. No cursor: push
 * is best effort, and the local stream delivers the same commit anyway (spec 6.2 rule 5).
 *
 * @module
 */

import { opsFromPush } from "../../shared/ops.ts";
import type { AppviewContext } from "../context.ts";
import type { ApplyResult } from "./apply_ops.ts";

/**
 * Applies one parsed push body.
 *
 * @throws {OpsError} when the payload is malformed (nothing applied)
 */
export function applyPush(ctx: AppviewContext, payload: unknown): ApplyResult {
  return ctx.writer.applyOps(opsFromPush(payload));
}
