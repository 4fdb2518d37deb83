/**
 * The member's view of the operator's record takedowns (docs/behaviour.md 4.1 rule 15):
 * `app.social.server.listRecordTakedowns` lists the member's own records the operator took down,
 * with what they said; `repo.getRecord` answers {@link RECORD_TAKENDOWN} for such a record
 * (`repo.ts`). HTTP only: the work is in `pds/moderation/record_takedown.ts`.
 *
 * @module
 */

import { Hono } from "hono";
import { AtUriError } from "../../shared/at_uri.ts";
import { decodeCbor } from "../../shared/cbor.ts";
import { toLexJson } from "../../shared/lex_json.ts";
import type { PdsContext, PdsEnv } from "../context.ts";
import { requireAccess } from "../auth/access.ts";
import { listRecordTakedowns } from "../moderation/record_takedown.ts";
import { XrpcError } from "./errors.ts";

/** The method listing the member's records the operator took down (no reference method exists). */
export const LIST_RECORD_TAKEDOWNS_METHOD = "app.social.server.listRecordTakedowns";
/** Error name of `repo.getRecord` for a record the operator took down. */
export const RECORD_TAKENDOWN = "RecordTakendown";
const DEFAULT_LIMIT = 50;
const MAX_LIMIT = 100;

/** The message of {@link RECORD_TAKENDOWN}, naming the record. */
export function recordTakendownMessage(uri: string): string {
  return `Record was removed by the server's operator: ${uri}`;
}

/** Routes: listRecordTakedowns. */
export function recordTakedownRoutes(ctx: PdsContext): Hono<PdsEnv> {
  const app = new Hono<PdsEnv>();

  app.get(`/xrpc/${LIST_RECORD_TAKEDOWNS_METHOD}`, requireAccess(ctx), async (c) => {
    const limit = parseLimit(c.req.query("limit"));
    const cursor = c.req.query("cursor") || undefined;
    let page;
    try {
      page = await listRecordTakedowns(ctx.kv, {
        did: c.get("auth").did,
        limit,
        cursor,
        inForce: true,
      });
    } catch (err) {
      if (!(err instanceof AtUriError)) throw err;
      throw new XrpcError(400, "InvalidRequest", `Invalid cursor: ${show(cursor ?? "")}`);
    }
    return c.json({
      takedowns: page.takedowns.map((t) => ({
        uri: t.uri,
        cid: t.cid,
        value: toLexJson(decodeCbor(t.bytes)),
        ...(t.reason === undefined ? {} : { reason: t.reason }),
        takenDownAt: t.createdAt,
      })),
      ...(page.cursor === null ? {} : { cursor: page.cursor }),
    });
  });

  return app;
}

function parseLimit(raw: string | undefined): number {
  if (raw === undefined || raw === "") return DEFAULT_LIMIT;
  if (!/^\d+$/.test(raw) || Number(raw) < 1 || Number(raw) > MAX_LIMIT) {
    throw new XrpcError(
      400,
      "InvalidRequest",
      `Parameter limit must be between 1 and ${MAX_LIMIT}: ${show(raw)}`,
    );
  }
  return Number(raw);
}

function show(value: string): string {
  return JSON.stringify(value.length > 100 ? value.slice(0, 100) + "..." : value);
}
