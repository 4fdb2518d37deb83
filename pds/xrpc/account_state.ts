/**
 * Account status over XRPC (issue 37): the member's `com.atproto.server.deactivateAccount` and
 * `activateAccount`, `com.atproto.sync.getRepoStatus`, and the checks the other routers make:
 * a taken-down account cannot use its tokens (401 `AccountTakedown`), a deactivated one only to
 * reactivate or look at its session (401 `AccountDeactivated`), and the sync endpoints refuse
 * an inactive repository (400 `RepoTakendown`, `RepoDeactivated`), as the reference host does.
 * The checks themselves live in `account_checks.ts` (no routes), which `auth/access.ts` uses
 * without importing this router.
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
import { sessionStatus, takendownError } from "./account_checks.ts";

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
