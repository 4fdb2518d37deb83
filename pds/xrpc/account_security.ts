/**
 * A logged-in member's own credentials: `app.social.server.changePassword` (docs/behaviour.md
 * 4.1 rule 9). HTTP only: the work is done in `pds/accounts/`.
 *
 * @module
 */

import { Hono } from "hono";
import type { PdsContext, PdsEnv } from "../context.ts";
import { AccountError, getAccount } from "../accounts/accounts.ts";
import { changePassword, WrongPasswordError } from "../accounts/password_change.ts";
import { GateFullError, PasswordGate } from "../accounts/password_gate.ts";
import { startSession } from "../accounts/sessions.ts";
import { requireAccess } from "../auth/access.ts";
import { RateLimiter } from "../rate_limiter.ts";
import { XrpcError } from "./errors.ts";
import { optionalString, readJsonBody } from "./json_body.ts";

/** The method name of the password change (no reference method exists). */
export const CHANGE_PASSWORD_METHOD = "app.social.server.changePassword";

/** Options of {@link accountSecurityRoutes}. */
export interface AccountSecurityRoutesOptions {
  /** Bound on password hashing (default: `PDS_PASSWORD_HASH_CONCURRENCY` and `_QUEUE`). */
  passwordGate?: PasswordGate;
}

/** Routes of a member's own credentials. */
export function accountSecurityRoutes(
  ctx: PdsContext,
  opts: AccountSecurityRoutesOptions = {},
): Hono<PdsEnv> {
  const app = new Hono<PdsEnv>();
  const passwords = opts.passwordGate ?? new PasswordGate({
    running: ctx.config.passwordHashConcurrency,
    waiting: ctx.config.passwordHashQueue,
  });
  // Each attempt checks a password: counted per account like logins per address.
  const attempts = new RateLimiter({ perHour: ctx.config.loginsPerHour });

  app.post(`/xrpc/${CHANGE_PASSWORD_METHOD}`, requireAccess(ctx), async (c) => {
    const { did } = c.get("auth");
    const body = await readJsonBody(c);
    const currentPassword = optionalString(body, "currentPassword") ?? "";
    const newPassword = optionalString(body, "newPassword") ?? "";
    if (currentPassword === "" || newPassword === "") {
      throw new XrpcError(
        400,
        "InvalidRequest",
        "Members currentPassword and newPassword are required",
      );
    }
    const retryAfter = attempts.take(did, ctx.now());
    if (retryAfter > 0) {
      throw new XrpcError(
        429,
        "RateLimitExceeded",
        `Too many password changes for this account; retry in ${retryAfter} seconds`,
        { "Retry-After": String(retryAfter) },
      );
    }
    if (await getAccount(ctx.kv, did) === null) {
      throw new XrpcError(400, "InvalidToken", `Token subject has no account: ${did}`);
    }
    let account;
    try {
      account = await changePassword(ctx, { did, currentPassword, newPassword }, passwords);
    } catch (err) {
      if (err instanceof AccountError) throw new XrpcError(400, err.code, err.message);
      if (err instanceof WrongPasswordError) {
        throw new XrpcError(401, "AuthenticationRequired", err.message);
      }
      if (err instanceof GateFullError) {
        throw new XrpcError(
          503,
          "NotEnoughResources",
          "Too many password checks at once; retry in 1 second",
          { "Retry-After": "1" },
        );
      }
      throw err;
    }
    return c.json(await startSession(ctx, account));
  });

  return app;
}
