/**
 * `com.atproto.moderation.createReport` (docs/behaviour.md 4.1 rule 8): an authenticated member
 * reports an account or a record; the report is kept for the operator (`deno task admin reports`).
 * Rate limited per reporting account (`PDS_REPORTS_PER_HOUR`). HTTP only: the work is in
 * `pds/moderation/`.
 *
 * @module
 */

import { Hono } from "hono";
import type { PdsContext, PdsEnv } from "../context.ts";
import { requireAccess } from "../auth/access.ts";
import {
  checkReportSubject,
  createReport,
  parseReportInput,
  ReportError,
} from "../moderation/reports.ts";
import { RateLimiter } from "../rate_limiter.ts";
import { XrpcError } from "./errors.ts";
import { readJsonBody } from "./json_body.ts";

/** Routes of `com.atproto.moderation.*`. */
export function moderationRoutes(ctx: PdsContext): Hono<PdsEnv> {
  const app = new Hono<PdsEnv>();
  const reports = new RateLimiter({ perHour: ctx.config.reportsPerHour });

  app.post("/xrpc/com.atproto.moderation.createReport", requireAccess(ctx), async (c) => {
    const { did } = c.get("auth");
    const body = await readJsonBody(c);
    let input;
    try {
      input = parseReportInput(body);
      // Before the rate limit: a report of nothing does not use up one of the member's.
      await checkReportSubject(ctx.kv, input.subject);
    } catch (err) {
      if (err instanceof ReportError) throw new XrpcError(400, "InvalidRequest", err.message);
      throw err;
    }
    const retryAfter = reports.take(did, ctx.now());
    if (retryAfter > 0) {
      throw new XrpcError(
        429,
        "RateLimitExceeded",
        `Too many reports from this account; retry in ${retryAfter} seconds`,
        { "Retry-After": String(retryAfter) },
      );
    }
    const report = await createReport(ctx.kv, { ...input, reportedBy: did }, ctx.now());
    ctx.log.info("report created", { id: report.id, reportedBy: did });
    const { id, reasonType, reason, subject, reportedBy, createdAt } = report;
    return c.json({ id, reasonType, reason, subject, reportedBy, createdAt });
  });

  return app;
}
