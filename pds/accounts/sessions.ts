/**
 * Login sessions. A login starts a family; each refresh token (by `jti`) records its family.
 * Refreshing rotates the pair: the presented token is marked rotated (with the time and its
 * successor) and a new one is issued in one atomic operation. Presenting a rotated-out token
 * within {@link REFRESH_GRACE_MS} of its rotation yields a fresh pair for the same successor (two
 * tabs refreshing at once, a retry after a lost response); later it is treated as theft: the
 * whole family is revoked, so every refresh token descended from that login stops working.
 * Access tokens are stateless and simply expire (1 hour). A family records the account's session
 * generation when it starts; a password reset raises the generation, which ends every older
 * login at its next refresh (as the reference account host does, access tokens already issued
 * run out on their own). A login with an app password records it on the family: its tokens have
 * scope `com.atproto.appPass`, and the family ends at its next refresh once the app password is
 * revoked (`app_passwords.ts`).
 *
 * @module
 */

import type { PdsContext } from "../context.ts";
import { refreshTokenKey, sessionFamilyKey } from "../store/keys.ts";
import {
  randomId,
  REFRESH_TTL_SECONDS,
  signAccessToken,
  signRefreshToken,
  TokenError,
  verifyRefreshToken,
} from "../auth/tokens.ts";
import { getAccount } from "./accounts.ts";
import { type AppPasswordRef, isAppPasswordCurrent } from "./app_passwords.ts";

/** Stored refresh token. */
interface RefreshTokenRecord {
  did: string;
  family: string;
  rotated: boolean;
  /** When it was rotated (ms since the epoch); absent on records from before the grace window. */
  rotatedAt?: number;
  /** The `jti` of the token it was rotated to. */
  next?: string;
}

/** Stored login family. */
interface SessionFamily {
  did: string;
  revoked: boolean;
  /** The account's `sessionGeneration` at login; absent on families from before it existed. */
  generation?: number;
  /** The app password of the login; absent for a login with the account's password. */
  appPassword?: AppPasswordRef;
}

/** The tokens and identity returned by createAccount, createSession and refreshSession. */
export interface SessionTokens {
  did: string;
  handle: string;
  accessJwt: string;
  refreshJwt: string;
}

/**
 * How long a rotated-out refresh token still yields a session (its successor) instead of
 * revoking the login: covers tabs or devices refreshing at once and a retry after a lost
 * response, while a stolen token used later than this still revokes the whole login.
 */
export const REFRESH_GRACE_MS = 5 * 60 * 1000;

const RECORD_TTL_MS = REFRESH_TTL_SECONDS * 1000;
const MAX_COMMIT_ATTEMPTS = 20;

/** Starts a new login family for `did` and issues its first token pair. */
export async function startSession(
  ctx: PdsContext,
  account: { did: string; handle: string; sessionGeneration?: number },
  opts: { appPassword?: AppPasswordRef } = {},
): Promise<SessionTokens> {
  const family = randomId(16);
  const jti = randomId(32);
  const res = await ctx.kv.atomic()
    .set(
      sessionFamilyKey(family),
      {
        did: account.did,
        revoked: false,
        generation: account.sessionGeneration ?? 0,
        ...(opts.appPassword === undefined ? {} : { appPassword: opts.appPassword }),
      } satisfies SessionFamily,
      {
        expireIn: RECORD_TTL_MS,
      },
    )
    .set(
      refreshTokenKey(jti),
      { did: account.did, family, rotated: false } satisfies RefreshTokenRecord,
      { expireIn: RECORD_TTL_MS },
    )
    .commit();
  if (!res.ok) throw new Error("Session creation commit failed");
  return await issuePair(ctx, account, { jti, appPassword: opts.appPassword !== undefined });
}

/**
 * Rotates a refresh token: verifies it, checks it is current, marks it rotated and issues a new
 * pair. A token rotated out less than {@link REFRESH_GRACE_MS} ago gets a new pair for its
 * successor (nothing is rotated); one rotated out earlier revokes its family and fails.
 *
 * @throws {TokenError} `ExpiredToken` for an expired or revoked token, `InvalidToken` otherwise
 */
export async function refreshSession(ctx: PdsContext, token: string): Promise<SessionTokens> {
  const claims = await verifyRefreshToken(ctx, token);
  for (let attempt = 0; attempt < MAX_COMMIT_ATTEMPTS; attempt++) {
    const { record, family } = await readCurrent(ctx, claims.jti, claims.sub);
    const { rotatedAt, next } = record.value;
    if (record.value.rotated && isInGrace(ctx, rotatedAt) && next !== undefined) {
      const account = await getAccount(ctx.kv, claims.sub);
      if (account === null) throw new TokenError("InvalidToken", "Token subject has no account");
      if (await isOutdated(ctx, family.value, account)) throw revoked();
      return await issuePair(ctx, account, { jti: next, appPassword: isAppLogin(family.value) });
    }
    if (record.value.rotated) {
      await revokeFamily(ctx, record.value.family);
      ctx.log.warn("rotated-out refresh token presented; login revoked", { did: claims.sub });
      throw revoked();
    }
    const account = await getAccount(ctx.kv, claims.sub);
    if (account === null) throw new TokenError("InvalidToken", "Token subject has no account");
    if (await isOutdated(ctx, family.value, account)) throw revoked();
    const nextJti = randomId(32);
    const res = await ctx.kv.atomic()
      .check(record, family)
      .set(
        record.key,
        { ...record.value, rotated: true, rotatedAt: ctx.now(), next: nextJti },
        { expireIn: RECORD_TTL_MS },
      )
      .set(
        refreshTokenKey(nextJti),
        { did: claims.sub, family: record.value.family, rotated: false },
        { expireIn: RECORD_TTL_MS },
      )
      .set(family.key, family.value, { expireIn: RECORD_TTL_MS })
      .commit();
    if (res.ok) {
      return await issuePair(ctx, account, { jti: nextJti, appPassword: isAppLogin(family.value) });
    }
  }
  throw new Error("Refresh token rotation lost too many commit races");
}

/**
 * Ends the login of a refresh token (deleteSession): the family is revoked and the token record
 * deleted.
 *
 * @throws {TokenError}
 */
export async function endSession(ctx: PdsContext, token: string): Promise<void> {
  const claims = await verifyRefreshToken(ctx, token);
  const { record } = await readCurrent(ctx, claims.jti, claims.sub);
  await revokeFamily(ctx, record.value.family);
  await ctx.kv.delete(record.key);
}

/**
 * True when the login began before the account's last password reset, or its app password was
 * revoked since.
 */
async function isOutdated(
  ctx: PdsContext,
  family: SessionFamily,
  account: { did: string; sessionGeneration?: number },
): Promise<boolean> {
  if ((family.generation ?? 0) !== (account.sessionGeneration ?? 0)) return true;
  if (family.appPassword === undefined) return false;
  return !await isAppPasswordCurrent(ctx.kv, account.did, family.appPassword);
}

function isAppLogin(family: SessionFamily): boolean {
  return family.appPassword !== undefined;
}

/** True when a token rotated at `rotatedAt` is still within the grace window. */
function isInGrace(ctx: PdsContext, rotatedAt: number | undefined): boolean {
  if (rotatedAt === undefined) return false;
  const age = ctx.now() - rotatedAt;
  return age >= 0 && age <= REFRESH_GRACE_MS;
}

async function readCurrent(ctx: PdsContext, jti: string, did: string) {
  const record = await ctx.kv.get<RefreshTokenRecord>(refreshTokenKey(jti));
  if (record.value === null || record.value.did !== did) throw revoked();
  const family = await ctx.kv.get<SessionFamily>(sessionFamilyKey(record.value.family));
  if (family.value === null || family.value.revoked) throw revoked();
  return {
    record: record as Deno.KvEntry<RefreshTokenRecord>,
    family: family as Deno.KvEntry<SessionFamily>,
  };
}

async function revokeFamily(ctx: PdsContext, familyId: string): Promise<void> {
  const key = sessionFamilyKey(familyId);
  for (;;) {
    const family = await ctx.kv.get<SessionFamily>(key);
    if (family.value === null || family.value.revoked) return;
    const res = await ctx.kv.atomic()
      .check(family)
      .set(key, { ...family.value, revoked: true }, { expireIn: RECORD_TTL_MS })
      .commit();
    if (res.ok) return;
  }
}

async function issuePair(
  ctx: PdsContext,
  account: { did: string; handle: string },
  opts: { jti: string; appPassword: boolean },
): Promise<SessionTokens> {
  const [accessJwt, refreshJwt] = await Promise.all([
    signAccessToken(ctx, account.did, { appPassword: opts.appPassword }),
    signRefreshToken(ctx, account.did, opts.jti),
  ]);
  return { did: account.did, handle: account.handle, accessJwt, refreshJwt };
}

function revoked(): TokenError {
  return new TokenError("ExpiredToken", "Token has been revoked");
}
