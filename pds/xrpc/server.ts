/**
 * `com.atproto.server.*` over XRPC: describeServer, createAccount, createSession,
 * refreshSession, getSession, deleteSession, resetPassword (docs/protocol.md 2; docs/behaviour.md
 * 10.1-10.3). HTTP only: the work is done in `pds/accounts/`.
 *
 * @module
 */

import { type Context, Hono } from "hono";
import type { PdsContext, PdsEnv } from "../context.ts";
import { AccountError, createAccount, findAccount, getAccount } from "../accounts/accounts.ts";
import { accountKey, isLoginRefusal, LoginThrottle } from "../accounts/login_throttle.ts";
import { GateFullError, PasswordGate } from "../accounts/password_gate.ts";
import { MAX_PASSWORD_LENGTH } from "../accounts/password.ts";
import { endSession, refreshSession, startSession } from "../accounts/sessions.ts";
import {
  type AppPasswordRef,
  findAppPassword,
  isAppPasswordShaped,
} from "../accounts/app_passwords.ts";
import { resetPassword } from "../accounts/password_reset.ts";
import { readBearerToken, requireAccess } from "../auth/access.ts";
import { accountStatus } from "../accounts/account_status.ts";
import { sessionStatus, takendownError } from "./account_checks.ts";
import { TokenError } from "../auth/tokens.ts";
import { RateLimiter } from "../rate_limiter.ts";
import { clientAddress, clientKey } from "./client_address.ts";
import { XrpcError } from "./errors.ts";
import { optionalString, readJsonBody } from "./json_body.ts";

export { clientAddress } from "./client_address.ts";

/** Options of {@link serverRoutes}; the defaults come from the configuration. */
export interface ServerRoutesOptions {
  /** Failed-login throttle (default: `LOGIN_THROTTLE_DEFAULTS`). */
  loginThrottle?: LoginThrottle;
  /** Bound on password hashing (default: `PDS_PASSWORD_HASH_CONCURRENCY` and `_QUEUE`). */
  passwordGate?: PasswordGate;
}

/** The uniform login failure (unknown identifier and wrong password alike). */
export const LOGIN_FAILED_MESSAGE = "Invalid identifier or password";

/** Routes of `com.atproto.server.*`. */
export function serverRoutes(ctx: PdsContext, opts: ServerRoutesOptions = {}): Hono<PdsEnv> {
  const app = new Hono<PdsEnv>();
  const throttle = opts.loginThrottle ?? new LoginThrottle();
  const passwords = opts.passwordGate ?? new PasswordGate({
    running: ctx.config.passwordHashConcurrency,
    waiting: ctx.config.passwordHashQueue,
  });
  const signups = new RateLimiter({ perHour: ctx.config.signupsPerHour });
  const logins = new RateLimiter({ perHour: ctx.config.loginsPerHour });
  // The key of per-address limits: an IPv6 /64 is one client.
  const clientOf = (c: Context) => clientKey(clientAddress(c, ctx.config.trustProxy));
  const description = Object.freeze({
    did: ctx.config.serviceDid,
    availableUserDomains: ctx.config.handleDomains,
    inviteCodeRequired: ctx.config.inviteRequired,
    invite_code_required: ctx.config.inviteRequired,
    links: {},
    contact: {},
  });

  app.get("/xrpc/com.atproto.server.describeServer", (c) => c.json(description));

  app.post("/xrpc/com.atproto.server.createAccount", async (c) => {
    limitRate(signups, clientOf(c), ctx.now(), "sign-ups");
    const body = await readJsonBody(c);
    const input = {
      handle: optionalString(body, "handle") ?? "",
      password: optionalString(body, "password") ?? "",
      inviteCode: typeof body.inviteCode === "string" ? body.inviteCode : undefined,
    };
    let account;
    try {
      account = await createAccount(ctx, input, { hashPassword: (p) => passwords.hash(p) });
    } catch (err) {
      if (err instanceof AccountError) throw new XrpcError(400, err.code, err.message);
      throw busyOr(err);
    }
    try {
      await ctx.hooks.onAccountCreated?.(account.did, account.handle);
    } catch (err) {
      ctx.log.error("onAccountCreated hook failed", { did: account.did, err });
    }
    return c.json(await startSession(ctx, account));
  });

  app.post("/xrpc/com.atproto.server.createSession", async (c) => {
    const client = clientOf(c);
    limitRate(logins, client, ctx.now(), "logins");
    const body = await readJsonBody(c);
    const identifier = optionalString(body, "identifier") ?? "";
    const password = optionalString(body, "password") ?? "";
    if (identifier === "" || password === "") {
      throw new XrpcError(400, "InvalidRequest", "Members identifier and password are required");
    }
    const account = password.length > MAX_PASSWORD_LENGTH
      ? null
      : await findAccount(ctx.kv, identifier);
    // Counted when it begins, per (client, account) and per account whatever names it: see
    // login_throttle.ts.
    const attempt = throttle.begin(client, accountKey(account?.did ?? null, identifier), ctx.now());
    if (isLoginRefusal(attempt)) {
      const who = attempt.scope === "address" ? "from this address" : "for this account";
      throw new XrpcError(
        429,
        "RateLimitExceeded",
        `Too many failed logins ${who}; retry in ${attempt.retryAfter} seconds`,
        { "Retry-After": String(attempt.retryAfter) },
      );
    }
    let ok: boolean;
    let appPassword: AppPasswordRef | null = null;
    try {
      // An unknown identifier costs the same hash: response times do not tell which exist.
      ok = account === null
        ? (await passwords.burn(password.slice(0, MAX_PASSWORD_LENGTH)), false)
        : await passwords.verify(password, account.passwordHash);
      // Then an app password (4.1 rule 12), only for one of their shape: one more hash.
      if (!ok && isAppPasswordShaped(password)) {
        appPassword = account === null
          ? (await passwords.burn(password), null)
          : await findAppPassword(ctx.kv, { did: account.did, password }, passwords);
        ok = appPassword !== null;
      }
    } catch (err) {
      attempt.refund(); // never checked
      throw busyOr(err);
    }
    if (!ok || account === null) {
      attempt.failed(ctx.now());
      throw new XrpcError(401, "AuthenticationRequired", LOGIN_FAILED_MESSAGE);
    }
    attempt.refund();
    const status = accountStatus(account);
    if (status === "takendown") throw takendownError(account.did);
    const session = await startSession(
      ctx,
      account,
      appPassword === null ? {} : { appPassword },
    );
    return c.json({ ...session, ...sessionStatus(status) });
  });

  // The token comes from `deno task admin account reset-password`; counted as a login.
  app.post("/xrpc/com.atproto.server.resetPassword", async (c) => {
    limitRate(logins, clientOf(c), ctx.now(), "logins and password resets");
    const body = await readJsonBody(c);
    const token = optionalString(body, "token") ?? "";
    const password = optionalString(body, "password") ?? "";
    if (token === "" || password === "") {
      throw new XrpcError(400, "InvalidRequest", "Members token and password are required");
    }
    try {
      await resetPassword(ctx, { token, password }, (p) => passwords.hash(p));
    } catch (err) {
      if (err instanceof AccountError) throw new XrpcError(400, err.code, err.message);
      if (err instanceof TokenError) throw new XrpcError(400, err.code, err.message);
      throw busyOr(err);
    }
    return c.body(null, 200);
  });

  app.post("/xrpc/com.atproto.server.refreshSession", async (c) => {
    const token = readBearerToken(c);
    const session = await tokenCall(() => refreshSession(ctx, token));
    const account = await getAccount(ctx.kv, session.did);
    const status = account === null ? "active" : accountStatus(account);
    if (status === "takendown") throw takendownError(session.did);
    return c.json({ ...session, ...sessionStatus(status) });
  });

  app.get("/xrpc/com.atproto.server.getSession", requireAccess(ctx), async (c) => {
    const { did } = c.get("auth");
    const account = await getAccount(ctx.kv, did);
    if (account === null) {
      throw new XrpcError(400, "InvalidToken", `Token subject has no account: ${did}`);
    }
    return c.json({
      did: account.did,
      handle: account.handle,
      ...sessionStatus(accountStatus(account)),
    });
  });

  app.post("/xrpc/com.atproto.server.deleteSession", async (c) => {
    const token = readBearerToken(c);
    await tokenCall(() => endSession(ctx, token));
    return c.body(null, 200);
  });

  return app;
}

async function tokenCall<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof TokenError) throw new XrpcError(400, err.code, err.message);
    throw err;
  }
}

/**
 * Counts one request of `client` against `limiter`.
 *
 * @throws {XrpcError} 429 `RateLimitExceeded` with `Retry-After` when the client is over its rate
 */
function limitRate(limiter: RateLimiter, client: string, nowMs: number, what: string): void {
  const retryAfter = limiter.take(client, nowMs);
  if (retryAfter === 0) return;
  throw new XrpcError(
    429,
    "RateLimitExceeded",
    `Too many ${what} from this address; retry in ${retryAfter} seconds`,
    { "Retry-After": String(retryAfter) },
  );
}

/**
 * A full password gate as 503 with `Retry-After` (the host is busy, whoever asks: not the
 * client's own rate, which is 429); anything else as it is.
 */
function busyOr(err: unknown): unknown {
  if (!(err instanceof GateFullError)) return err;
  return new XrpcError(
    503,
    "NotEnoughResources",
    "Too many password checks at once; retry in 1 second",
    { "Retry-After": "1" },
  );
}
