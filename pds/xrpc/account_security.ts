/**
 * A logged-in member's own credentials: `app.social.server.changePassword` (docs/behaviour.md
 * 4.1 rule 9) and the app passwords, `com.atproto.server.createAppPassword`, `listAppPasswords`,
 * `revokeAppPassword` (rule 12), none of them open to an app password's own session, and the
 * account's deletion, `com.atproto.server.requestAccountDelete` and `deleteAccount` (rule 13).
 * HTTP only: the work is done in `pds/accounts/`.
 *
 * @module
 */

import { Hono } from "hono";
import type { PdsContext, PdsEnv } from "../context.ts";
import { AccountError, getAccount, isLookupDid } from "../accounts/accounts.ts";
import { deleteAccount, requestAccountDelete } from "../accounts/account_delete.ts";
import { TokenError } from "../auth/tokens.ts";
import {
  AppPasswordError,
  createAppPassword,
  listAppPasswords,
  revokeAppPassword,
} from "../accounts/app_passwords.ts";
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

  app.post(`/xrpc/${CHANGE_PASSWORD_METHOD}`, requireAccess(ctx, full), async (c) => {
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
      if (err instanceof GateFullError) throw busy();
      throw err;
    }
    return c.json(await startSession(ctx, account));
  });

  app.post("/xrpc/com.atproto.server.createAppPassword", requireAccess(ctx, full), async (c) => {
    const { did } = c.get("auth");
    const body = await readJsonBody(c);
    const name = body.name;
    if (typeof name !== "string") {
      throw new XrpcError(400, "InvalidRequest", "Member name is required");
    }
    try {
      return c.json(await createAppPassword(ctx, { did, name }, passwords));
    } catch (err) {
      if (err instanceof AppPasswordError) throw new XrpcError(400, "InvalidRequest", err.message);
      if (err instanceof GateFullError) throw busy();
      throw err;
    }
  });

  app.get("/xrpc/com.atproto.server.listAppPasswords", requireAccess(ctx, full), async (c) => {
    return c.json({ passwords: await listAppPasswords(ctx.kv, c.get("auth").did) });
  });

  app.post("/xrpc/com.atproto.server.revokeAppPassword", requireAccess(ctx, full), async (c) => {
    const body = await readJsonBody(c);
    const name = optionalString(body, "name") ?? "";
    if (name === "") throw new XrpcError(400, "InvalidRequest", "Member name is required");
    await revokeAppPassword(ctx, c.get("auth").did, name);
    return c.body(null, 200);
  });

  app.post("/xrpc/com.atproto.server.requestAccountDelete", requireAccess(ctx, full), async (c) => {
    const { did } = c.get("auth");
    if (await getAccount(ctx.kv, did) === null) {
      throw new XrpcError(400, "InvalidToken", `Token subject has no account: ${did}`);
    }
    // No email here: the token is the answer (docs/behaviour.md 4.1 rule 13).
    const { token } = await requestAccountDelete(ctx.kv, did, ctx.now());
    return c.json({ token });
  });

  app.post("/xrpc/com.atproto.server.deleteAccount", async (c) => {
    const body = await readJsonBody(c);
    const did = optionalString(body, "did") ?? "";
    const password = optionalString(body, "password") ?? "";
    const token = optionalString(body, "token") ?? "";
    if (did === "" || password === "" || token === "") {
      throw new XrpcError(400, "InvalidRequest", "Members did, password and token are required");
    }
    if (!isLookupDid(did)) {
      throw new XrpcError(400, "InvalidRequest", `Member did is invalid: ${JSON.stringify(did)}`);
    }
    const retryAfter = attempts.take(did, ctx.now());
    if (retryAfter > 0) {
      throw new XrpcError(
        429,
        "RateLimitExceeded",
        `Too many deletion attempts for this account; retry in ${retryAfter} seconds`,
        { "Retry-After": String(retryAfter) },
      );
    }
    try {
      await deleteAccount(ctx, { did, password, token }, passwords);
    } catch (err) {
      if (err instanceof WrongPasswordError) {
        throw new XrpcError(401, "AuthenticationRequired", "Invalid did or password");
      }
      if (err instanceof TokenError) throw new XrpcError(400, err.code, err.message);
      if (err instanceof GateFullError) throw busy();
      throw err;
    }
    return c.body(null, 200);
  });

  return app;
}

/** Access with the account's password, not an app password (docs/behaviour.md 4.1 rule 12). */
const full = { full: true };

function busy(): XrpcError {
  return new XrpcError(
    503,
    "NotEnoughResources",
    "Too many password checks at once; retry in 1 second",
    { "Retry-After": "1" },
  );
}
