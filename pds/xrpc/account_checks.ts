/**
 * The account-status checks the routers and the access middleware make (issue 37; docs/behaviour.md
 * 4.1 rule 10): a taken-down account cannot use its tokens (401 `AccountTakedown`), a deactivated
 * one only to reactivate or look at its session (401 `AccountDeactivated`), and the sync endpoints
 * refuse an inactive repository (400 `RepoTakendown`, `RepoDeactivated`), as the reference host
 * does. Apart from the routes of `account_state.ts`, so `auth/access.ts` can use them without an
 * import cycle.
 *
 * @module
 */

import type { PdsContext } from "../context.ts";
import type { AccountStatus } from "../accounts/account_status.ts";
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
