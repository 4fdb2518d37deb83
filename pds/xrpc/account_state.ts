/**
 * Account status over XRPC (issue 37): the member's `com.atproto.server.deactivateAccount` and
 * `activateAccount`, `com.atproto.sync.getRepoStatus`, and the checks the other routers make:
 * a taken-down account cannot use its tokens (401 `AccountTakedown`), a deactivated one only to
 * reactivate or look at its session (401 `AccountDeactivated`), and the sync endpoints refuse
 * an inactive repository (400 `RepoTakendown`, `RepoDeactivated`), as the reference host does.
 * Kept apart from `server.ts` and `sync.ts` so the status rules live in one place.
 *
 * @module
 */

import { Hono } from "hono";
import type { PdsContext, PdsEnv } from "../context.ts";
import { getAccount, isLookupDid } from "../accounts/accounts.ts";
import { type AccountStatus, accountStatus, setAccountStatus } from "../accounts/account_status.ts";
import { requireAccess } from "../auth/access.ts";
import { readRepoRoot } from "../repo/reader.ts";
import { XrpcError } from "./errors.ts";

/** Methods a deactivated account's access token may still call. */
const DEACTIVATED_ALLOWED = new Set([
  "/xrpc/com.atproto.server.activateAccount",
  "/xrpc/com.atproto.server.deactivateAccount",
  "/xrpc/com.atproto.server.getSession",
  "/xrpc/com.atproto.server.requestAccountDelete",
]);

/**
 * Refuses a token of an account that may not use it on `path`: 401 `AccountTakedown` (any
 * method), 401 `AccountDeactivated` (all but {@link DEACTIVATED_ALLOWED}). One KV read.
 */
export async function refuseInactiveAccount(
  ctx: PdsContext,
  did: string,
  path: string,
): Promise<void> {
  const status = await ctx.accountStatuses.get(did);
  if (status === null) return; // the route answers for a missing account
  if (status === "takendown") throw takendownError(did);
  if (status === "deactivated" && !DEACTIVATED_ALLOWED.has(path)) {
    throw new XrpcError(401, "AccountDeactivated", `Account is deactivated: ${did}`);
  }
}

/** 401 `AccountTakedown` naming the account. */
export function takendownError(did: string): XrpcError {
  return new XrpcError(401, "AccountTakedown", `Account has been taken down: ${did}`);
}

/** Refuses the repository of an inactive account on the sync endpoints (400). */
export async function refuseInactiveRepo(ctx: PdsContext, did: string): Promise<void> {
  const status = await ctx.accountStatuses.get(did);
  if (status === null) return; // the endpoint answers RepoNotFound as before
  if (status === "takendown") {
    throw new XrpcError(400, "RepoTakendown", `Repo has been taken down: ${did}`);
  }
  if (status === "deactivated") {
    throw new XrpcError(400, "RepoDeactivated", `Repo has been deactivated: ${did}`);
  }
}

/** The session answer's `active`/`status` members for an account status. */
export function sessionStatus(status: AccountStatus): { active: boolean; status?: string } {
  return status === "active" ? { active: true } : { active: false, status };
}

/** Routes: deactivateAccount, activateAccount, getRepoStatus. */
export function accountStateRoutes(ctx: PdsContext): Hono<PdsEnv> {
  const app = new Hono<PdsEnv>();

  const change = (status: AccountStatus) => async (c: { get(k: "auth"): { did: string } }) => {
    const { did } = c.get("auth");
    const result = await setAccountStatus(ctx.kv, did, {
      status,
      by: "member",
      nowMs: ctx.now(),
      blocks: ctx.blocks,
    });
    ctx.accountStatuses.invalidate(did);
    if (!result.changed && result.reason === "takendown") throw takendownError(did);
    if (!result.changed && result.reason === "unknown") {
      throw new XrpcError(400, "InvalidToken", `Token subject has no account: ${did}`);
    }
    if (result.changed) ctx.log.info("account status changed", { did, status, by: "member" });
  };

  app.post(
    "/xrpc/com.atproto.server.deactivateAccount",
    requireAccess(ctx, { full: true }),
    async (c) => {
      await change("deactivated")(c);
      return c.body(null, 200);
    },
  );

  app.post("/xrpc/com.atproto.server.activateAccount", requireAccess(ctx), async (c) => {
    await change("active")(c);
    return c.body(null, 200);
  });

  app.get("/xrpc/com.atproto.sync.getRepoStatus", async (c) => {
    const did = c.req.query("did") ?? "";
    if (did === "") throw new XrpcError(400, "InvalidRequest", "Parameter did is required");
    if (!isLookupDid(did)) {
      throw new XrpcError(
        400,
        "InvalidRequest",
        `Parameter did is invalid: ${JSON.stringify(did)}`,
      );
    }
    const account = await getAccount(ctx.kv, did);
    if (account === null) throw new XrpcError(400, "RepoNotFound", `Could not find repo: ${did}`);
    const status = accountStatus(account);
    const root = status === "active" ? await readRepoRoot(ctx.kv, did) : null;
    return c.json({
      did,
      ...sessionStatus(status),
      ...(root === null ? {} : { rev: root.rev }),
    });
  });

  return app;
}
