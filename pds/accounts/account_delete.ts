/**
 * Account deletion (issue 37, docs/behaviour.md 4.1 rule 13). The member asks for a token from a
 * logged-in session (`requestAccountDelete`; there is no email, so the answer carries it), then
 * calls `deleteAccount` with its DID, password and token, as on the reference host; the operator
 * deletes without either (`deno task admin account delete`). Only the token's SHA-256 is stored,
 * for {@link DELETE_TOKEN_TTL_MS}; a new request replaces it.
 *
 * {@link purgeAccount} first deletes the account record and its handle, sequences the
 * `#account` event `{active: false, status: "deleted"}` and writes a durable marker of the
 * deletion in progress ({@link AccountDeletion}: the DID, its handle and the steps left) in one
 * atomic operation, so from then on the account cannot log in, its handle is free and its
 * repository is not found. Then every other key of the DID goes, step by step
 * ({@link DELETION_STEPS}), in bounded atomic operations (Deno KV's per-operation limits, as
 * compaction pages its deletes); the marker records each finished step and goes last. A process
 * killed in between leaves the marker: {@link finishAccountDeletion} takes over where it stopped,
 * run by `deno task admin account delete <DID>` and by the account host at start and every hour
 * ({@link AccountDeletionFinisher}). The invite redemption log (`invite_use`) and the stream's
 * past events stay.
 *
 * @module
 */

import { sha256 } from "@noble/hashes/sha2.js";
import { bytesToHex } from "@noble/hashes/utils.js";
import type { PdsContext } from "../context.ts";
import type { Logger } from "../../shared/log.ts";
import { PeriodicTask } from "../periodic_task.ts";
import {
  accountDeleteTokenKey,
  accountDeletionKey,
  accountDeletionPrefix,
  accountKey,
  accountSigningKeyKey,
  appPasswordPrefix,
  handleKey,
  kvKeyBytes,
  passwordResetAccountKey,
  passwordResetKey,
  plcOpKey,
  recordTakedownBlobPrefix,
  recordTakedownCidPrefix,
  recordTakedownPrefix,
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

/** A group of keys deleted in one step after the first (in this order). */
export type DeletionStep = "credentials" | "repository" | "blobs" | "sessions";

/** Every step after the first, in order. */
export const DELETION_STEPS: readonly DeletionStep[] = Object.freeze([
  "credentials",
  "repository",
  "blobs",
  "sessions",
]);

/** An account deletion in progress (stored under `accountDeletionKey`). */
export interface AccountDeletion {
  did: string;
  /** The handle the account had (free since the first step). */
  handle: string;
  /** When the first step was committed (ISO 8601). */
  startedAt: string;
  /** The steps not finished yet, in order. */
  remaining: DeletionStep[];
}

/** Options of {@link purgeAccount} and {@link finishAccountDeletion}. */
export interface PurgeOptions {
  /**
   * Called once each step is committed, the first (`"account"`) included, with the steps left:
   * a test stops the process there to kill it at a known point.
   */
  onStep?: (done: "account" | DeletionStep, remaining: readonly DeletionStep[]) => unknown;
}

/**
 * Deletes the account `did` and every key of it (module comment). Resolves to its `#account`
 * event, or null when there is no such account (see {@link finishAccountDeletion} for one whose
 * deletion was interrupted).
 */
export async function purgeAccount(
  kv: Deno.Kv,
  did: string,
  nowMs: number,
  opts: PurgeOptions = {},
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
      const marker: AccountDeletion = {
        did,
        handle: entry.value.handle,
        startedAt: new Date(nowMs).toISOString(),
        remaining: [...DELETION_STEPS],
      };
      return (op) => {
        op.check(entry, handle).delete(entry.key).set(accountDeletionKey(did), marker);
        if (handle.value === did) op.delete(handle.key);
      };
    },
  });
  if (event === null) return null;
  await opts.onStep?.("account", DELETION_STEPS);
  await finishAccountDeletion(kv, did, opts);
  return event;
}

/**
 * Finishes the deletion of `did` if one is in progress (its first step committed, the process
 * doing the rest interrupted, or still at it): deletes the keys of the steps not done, then the
 * marker. Safe to run alongside another run for the same DID (deleting is idempotent, and the
 * marker is updated with a check). Resolves to the deletion found, null when there was none.
 */
export async function finishAccountDeletion(
  kv: Deno.Kv,
  did: string,
  opts: PurgeOptions = {},
): Promise<AccountDeletion | null> {
  let entry = await kv.get<AccountDeletion>(accountDeletionKey(did));
  const found = entry.value;
  while (entry.value !== null && entry.value.remaining.length > 0) {
    const [step, ...rest] = entry.value.remaining;
    await deleteKeys(kv, stepKeys(kv, did, step));
    const next = { ...entry.value, remaining: rest };
    const res = await kv.atomic().check(entry).set(entry.key, next).commit();
    if (res.ok) {
      entry = { ...entry, value: next, versionstamp: res.versionstamp };
      await opts.onStep?.(step, rest);
    } else {
      entry = await kv.get<AccountDeletion>(accountDeletionKey(did)); // another run moved on
    }
  }
  if (entry.value === null) return found; // another run finished it
  // A commit or an upload in flight when the account went may have landed after its step.
  await deleteKeys(kv, stepKeys(kv, did, "repository"));
  await deleteKeys(kv, stepKeys(kv, did, "blobs"));
  await kv.atomic().check(entry).delete(entry.key).commit();
  return found;
}

/** The account deletions in progress (at most `limit`, by DID). */
export async function listAccountDeletions(
  kv: Deno.Kv,
  limit = 1000,
): Promise<AccountDeletion[]> {
  const out: AccountDeletion[] = [];
  for await (const e of kv.list<AccountDeletion>({ prefix: accountDeletionPrefix() }, { limit })) {
    out.push(e.value);
  }
  return out;
}

/**
 * Finishes every account deletion in progress (the account host at start and every
 * {@link DEFAULT_FINISH_INTERVAL_MS}); resolves to how many it finished.
 */
export async function finishAccountDeletions(
  kv: Deno.Kv,
  opts: { signal?: AbortSignal; log?: Logger } = {},
): Promise<number> {
  let finished = 0;
  for (const pending of await listAccountDeletions(kv)) {
    if (opts.signal?.aborted) break;
    await finishAccountDeletion(kv, pending.did);
    opts.log?.info("finished an interrupted account deletion", {
      did: pending.did,
      startedAt: pending.startedAt,
      remaining: pending.remaining,
    });
    finished++;
  }
  return finished;
}

/** How often the account host looks for interrupted deletions by default (one hour). */
export const DEFAULT_FINISH_INTERVAL_MS = 60 * 60 * 1000;

/** Finishes interrupted account deletions at start and then periodically. */
export class AccountDeletionFinisher extends PeriodicTask {
  constructor(opts: { kv: Deno.Kv; log: Logger; intervalMs?: number }) {
    super({
      intervalMs: opts.intervalMs ?? DEFAULT_FINISH_INTERVAL_MS,
      log: opts.log,
      failure: "finishing interrupted account deletions failed",
      run: async (signal) => void await finishAccountDeletions(opts.kv, { signal, log: opts.log }),
    });
  }
}

/** The keys of one step of the deletion of `did` (the account record and handle are gone). */
function stepKeys(kv: Deno.Kv, did: string, step: DeletionStep): AsyncIterable<Deno.KvKey> {
  switch (step) {
    case "credentials":
      return credentialKeysOf(kv, did);
    case "repository":
      return repoKeysOf(kv, did);
    case "blobs":
      return blobKeysOf(kv, did);
    case "sessions":
      return sessionKeysOf(kv, did);
  }
}

async function* credentialKeysOf(kv: Deno.Kv, did: string): AsyncGenerator<Deno.KvKey> {
  yield accountSigningKeyKey(did);
  yield plcOpKey(did);
  yield accountDeleteTokenKey(did);
  const reset = await kv.get<string>(passwordResetAccountKey(did));
  if (reset.value !== null) yield passwordResetKey(reset.value);
  yield reset.key;
  yield* listKeys(kv, appPasswordPrefix(did));
}

async function* blobKeysOf(kv: Deno.Kv, did: string): AsyncGenerator<Deno.KvKey> {
  for (const table of ["blob", "blob_chunk", "blob_upload", "blob_ref"]) {
    yield* listKeys(kv, [table, did]);
  }
  // The records the operator took down, held for a restore that can no longer happen.
  yield* listKeys(kv, recordTakedownPrefix(did));
  yield* listKeys(kv, recordTakedownBlobPrefix(did));
  yield* listKeys(kv, recordTakedownCidPrefix(did));
}

/** Logins are keyed by token and family, not by account: one pass over them all. */
async function* sessionKeysOf(kv: Deno.Kv, did: string): AsyncGenerator<Deno.KvKey> {
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
