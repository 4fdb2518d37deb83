/**
 * Password reset by a one-time token the operator hands to the member (`deno task admin account
 * reset-password`; there is no email). Only the token's SHA-256 is stored, with its expiry; a new
 * token replaces the account's previous one. Using it (`com.atproto.server.resetPassword`) sets
 * the new password, deletes the token and raises the account's session generation in one atomic
 * operation, so every existing login ends (`sessions.ts`).
 *
 * @module
 */

import { sha256 } from "@noble/hashes/sha2.js";
import { bytesToHex } from "@noble/hashes/utils.js";
import type { PdsContext } from "../context.ts";
import { accountKey, passwordResetAccountKey, passwordResetKey } from "../store/keys.ts";
import { type Account, checkPassword } from "./accounts.ts";
import { TokenError } from "../auth/tokens.ts";

/** How long a reset token can be used. */
export const RESET_TOKEN_TTL_MS = 60 * 60 * 1000;

/** Longest token looked up (generated ones have 23 characters). */
const MAX_TOKEN_LENGTH = 64;
const MAX_COMMIT_ATTEMPTS = 20;
const ALPHABET = "abcdefghijklmnopqrstuvwxyz234567";

/** Stored reset token. */
interface ResetTokenRecord {
  did: string;
  /** ms since the epoch. */
  expiresAt: number;
}

/**
 * Issues a reset token for the account `did` (which must exist), valid {@link RESET_TOKEN_TTL_MS}
 * from `nowMs`; the account's previous token stops working. Returns the token and its expiry.
 */
export async function createResetToken(
  kv: Deno.Kv,
  did: string,
  nowMs: number,
): Promise<{ token: string; expiresAt: number }> {
  const token = generateResetToken();
  const hash = hashToken(token);
  const expiresAt = nowMs + RESET_TOKEN_TTL_MS;
  for (let attempt = 0; attempt < MAX_COMMIT_ATTEMPTS; attempt++) {
    const [account, previous] = await kv.getMany<[Account, string]>([
      accountKey(did),
      passwordResetAccountKey(did),
    ]);
    if (account.value === null) throw new Error(`No account ${JSON.stringify(did)}`);
    const op = kv.atomic().check(account, previous);
    if (previous.value !== null) op.delete(passwordResetKey(previous.value));
    const res = await op
      .set(passwordResetKey(hash), { did, expiresAt } satisfies ResetTokenRecord, {
        expireIn: RESET_TOKEN_TTL_MS,
      })
      .set(passwordResetAccountKey(did), hash, { expireIn: RESET_TOKEN_TTL_MS })
      .commit();
    if (res.ok) return { token, expiresAt };
  }
  throw new Error("Reset token creation lost too many commit races");
}

/**
 * Sets the password of the account of a reset token and ends its sessions. `hash` hashes the new
 * password (the server passes its bounded one).
 *
 * @throws {TokenError} `InvalidToken` for an unknown or used token, `ExpiredToken` for an expired one
 * @throws {AccountError} `InvalidPassword`
 */
export async function resetPassword(
  ctx: PdsContext,
  input: { token: string; password: string },
  hash: (password: string) => Promise<string>,
): Promise<Account> {
  checkPassword(input.password);
  const token = input.token.trim();
  if (token === "" || token.length > MAX_TOKEN_LENGTH) throw invalid();
  const key = passwordResetKey(hashToken(token));
  const found = await ctx.kv.get<ResetTokenRecord>(key);
  checkUsable(ctx, found.value);
  const passwordHash = await hash(input.password);
  for (let attempt = 0; attempt < MAX_COMMIT_ATTEMPTS; attempt++) {
    const record = await ctx.kv.get<ResetTokenRecord>(key);
    const usable = checkUsable(ctx, record.value);
    const account = await ctx.kv.get<Account>(accountKey(usable.did));
    if (account.value === null) throw invalid();
    const updated: Account = {
      ...account.value,
      passwordHash,
      sessionGeneration: (account.value.sessionGeneration ?? 0) + 1,
    };
    const res = await ctx.kv.atomic()
      .check(record, account)
      .delete(key)
      .delete(passwordResetAccountKey(usable.did))
      .set(account.key, updated)
      .commit();
    if (res.ok) {
      ctx.log.info("password reset", { did: usable.did });
      return updated;
    }
  }
  throw new Error("Password reset lost too many commit races");
}

function checkUsable(ctx: PdsContext, record: ResetTokenRecord | null): ResetTokenRecord {
  if (record === null) throw invalid();
  if (ctx.now() >= record.expiresAt) {
    throw new TokenError("ExpiredToken", "Reset token has expired");
  }
  return record;
}

function invalid(): TokenError {
  return new TokenError("InvalidToken", "Reset token is invalid or was already used");
}

function generateResetToken(): string {
  // 20 characters of 5 bits: 100 bits, in groups of five.
  const bytes = crypto.getRandomValues(new Uint8Array(20));
  const chars = Array.from(bytes, (b) => ALPHABET[b & 31]).join("");
  return chars.match(/.{5}/g)!.join("-");
}

function hashToken(token: string): string {
  return bytesToHex(sha256(new TextEncoder().encode(token.toLowerCase())));
}
