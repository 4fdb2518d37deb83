/**
 * Account deletion (issue 37, docs/behaviour.md 4.1 rule 13). The member asks for a token from a
 * logged-in session (`requestAccountDelete`; there is no email, so the answer carries it), then
 * calls `deleteAccount` with its DID, password and token, as on the reference host; the operator
 * deletes without either (`deno task admin account delete`). Only the token's SHA-256 is stored,
 * for {@link DELETE_TOKEN_TTL_MS}; a new request replaces it.
 *
 * {@link purgeAccount} first deletes the account record and its handle and sequences the
 * `#account` event `{active: false, status: "deleted"}` in one atomic operation, so from then on
 * the account cannot log in, its handle is free and its repository is not found; then every other
 * key of the DID goes in bounded atomic operations (Deno KV's per-operation limits, as compaction
 * pages its deletes). The invite redemption log (`invite_use`) and the stream's past events stay.
 *
 * @module
 */

import { sha256 } from "@noble/hashes/sha2.js";
import { bytesToHex } from "@noble/hashes/utils.js";
import type { PdsContext } from "../context.ts";
import {
  accountDeleteTokenKey,
  accountKey,
  accountSigningKeyKey,
  appPasswordPrefix,
  handleKey,
  kvKeyBytes,
  passwordResetAccountKey,
  passwordResetKey,
  plcOpKey,
  refreshTokenKey,
  repoBlocksPrefix,
  repoRecordPrefix,
  repoRootKey,
  sessionFamilyKey,
} from "../store/keys.ts";
import { type AccountEvent, commitAccountEvent } from "../sequencer/account_events.ts";
import { TokenError } from "../auth/tokens.ts";
import type { Account } from "./accounts.ts";
import type { PasswordHasher } from "./password_change.ts";
import { WrongPasswordError } from "./password_change.ts";

/** How long a deletion token can be used (as on the reference host). */
export const DELETE_TOKEN_TTL_MS = 15 * 60 * 1000;

/** Longest token looked at (generated ones have 11 characters). */
const MAX_TOKEN_LENGTH = 64;
const ALPHABET = "abcdefghijklmnopqrstuvwxyz234567";
/** Most deletes and key bytes per atomic operation (Deno KV allows 1,000 and 81,920). */
const OP_MAX_MUTATIONS = 500;
const OP_MAX_KEY_BYTES = 60_000;

/** Stored deletion token. */
interface DeleteTokenRecord {
  hash: string;
  /** ms since the epoch. */
  expiresAt: number;
}

/** Issues a deletion token for `did` (a new one replaces the previous); answers the token. */
export async function requestAccountDelete(
  kv: Deno.Kv,
  did: string,
  nowMs: number,
): Promise<{ token: string; expiresAt: number }> {
  // 10 characters of 5 bits: 50 bits, single use, 15 minutes, behind the login rate.
  const bytes = crypto.getRandomValues(new Uint8Array(10));
  const chars = Array.from(bytes, (b) => ALPHABET[b & 31]).join("");
  const token = `${chars.slice(0, 5)}-${chars.slice(5)}`;
  const expiresAt = nowMs + DELETE_TOKEN_TTL_MS;
  const record: DeleteTokenRecord = { hash: hashToken(token), expiresAt };
  await kv.set(accountDeleteTokenKey(did), record, { expireIn: DELETE_TOKEN_TTL_MS });
  return { token, expiresAt };
}

/**
 * The member's deletion: checks the password (the account's own, not an app password), then the
 * token, then {@link purgeAccount}.
 *
 * @throws {WrongPasswordError} for an unknown DID or a wrong password
 * @throws {TokenError} `InvalidToken` for a wrong or used token, `ExpiredToken` for an expired one
 */
export async function deleteAccount(
  ctx: PdsContext,
  input: { did: string; password: string; token: string },
  hasher: Pick<PasswordHasher, "verify">,
): Promise<AccountEvent> {
  const account = (await ctx.kv.get<Account>(accountKey(input.did))).value;
  if (account === null || !await hasher.verify(input.password, account.passwordHash)) {
    throw new WrongPasswordError();
  }
  const stored = (await ctx.kv.get<DeleteTokenRecord>(accountDeleteTokenKey(input.did))).value;
  const token = input.token.trim();
  if (
    stored === null || token.length > MAX_TOKEN_LENGTH || stored.hash !== hashToken(token)
  ) {
    throw new TokenError("InvalidToken", "Token is invalid");
  }
  if (ctx.now() >= stored.expiresAt) throw new TokenError("ExpiredToken", "Token is expired");
  const event = await purgeAccount(ctx.kv, input.did, ctx.now());
  ctx.accountStatuses.invalidate(input.did);
  if (event === null) throw new TokenError("InvalidToken", "Token is invalid");
  ctx.log.info("account deleted", { did: input.did, by: "member" });
  return event;
}

/**
 * Deletes the account `did` and every key of it (module comment). Resolves to its `#account`
 * event, or null when there is no such account.
 */
export async function purgeAccount(
  kv: Deno.Kv,
  did: string,
  nowMs: number,
): Promise<AccountEvent | null> {
  const event = await commitAccountEvent(kv, {
    did,
    active: false,
    status: "deleted",
    nowMs,
    prepare: async () => {
      const entry = await kv.get<Account>(accountKey(did));
      if (entry.value === null) return null;
      const handle = await kv.get<string>(handleKey(entry.value.handle));
      return (op) => {
        op.check(entry, handle).delete(entry.key);
        if (handle.value === did) op.delete(handle.key);
      };
    },
  });
  if (event === null) return null;
  await deleteKeys(kv, keysOf(kv, did));
  // A commit in flight when the account went may have landed after the first pass.
  await deleteKeys(kv, repoKeysOf(kv, did));
  return event;
}

/** Every remaining key of `did` (the account record and handle are gone by now). */
async function* keysOf(kv: Deno.Kv, did: string): AsyncGenerator<Deno.KvKey> {
  yield accountSigningKeyKey(did);
  yield plcOpKey(did);
  yield accountDeleteTokenKey(did);
  const reset = await kv.get<string>(passwordResetAccountKey(did));
  if (reset.value !== null) yield passwordResetKey(reset.value);
  yield reset.key;
  yield* listKeys(kv, appPasswordPrefix(did));
  yield* repoKeysOf(kv, did);
  for (const table of ["blob", "blob_chunk", "blob_upload", "blob_ref"]) {
    yield* listKeys(kv, [table, did]);
  }
  // Logins are keyed by token and family, not by account: one pass over them all.
  for (const table of [refreshTokenKey("")[0], sessionFamilyKey("")[0]]) {
    for await (const e of kv.list<{ did?: string }>({ prefix: [table] })) {
      if (e.value?.did === did) yield e.key;
    }
  }
}

async function* repoKeysOf(kv: Deno.Kv, did: string): AsyncGenerator<Deno.KvKey> {
  yield repoRootKey(did);
  yield* listKeys(kv, repoBlocksPrefix(did));
  yield* listKeys(kv, repoRecordPrefix(did));
}

async function* listKeys(kv: Deno.Kv, prefix: Deno.KvKey): AsyncGenerator<Deno.KvKey> {
  for await (const e of kv.list({ prefix })) yield e.key;
}

/** Deletes `keys` in atomic operations of bounded size. */
async function deleteKeys(kv: Deno.Kv, keys: AsyncIterable<Deno.KvKey>): Promise<void> {
  let op = kv.atomic();
  let count = 0;
  let bytes = 0;
  const flush = async () => {
    if (count === 0) return;
    const res = await op.commit();
    if (!res.ok) throw new Error("Account key deletion commit failed");
    op = kv.atomic();
    count = 0;
    bytes = 0;
  };
  for await (const key of keys) {
    const size = kvKeyBytes(key);
    if (count + 1 > OP_MAX_MUTATIONS || bytes + size > OP_MAX_KEY_BYTES) await flush();
    op.delete(key);
    count++;
    bytes += size;
  }
  await flush();
}

function hashToken(token: string): string {
  return bytesToHex(sha256(new TextEncoder().encode(token.toLowerCase())));
}
