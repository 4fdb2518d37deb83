/**
 * App passwords (docs/behaviour.md 4.1 rule 12): passwords a member gives third-party clients.
 * Each is 16 random base32 characters in four groups (`abcd-efgh-ijkl-mnop`, 80 bits, as the
 * reference host makes them), shown once and stored as a scrypt hash with a salt derived from the
 * DID (`hashAppPassword`), so a login hashes once and compares with each of the account's at most
 * {@link MAX_APP_PASSWORDS}. A login with one starts a session that remembers the app password's
 * name and id (`sessions.ts`); revoking it deletes the record, and the sessions end at their next
 * refresh because the id they carry is gone (a new one under the same name has another id).
 *
 * @module
 */

import type { PdsContext } from "../context.ts";
import { appPasswordKey, appPasswordPrefix } from "../store/keys.ts";
import { isSameHash } from "./password.ts";
import { randomId } from "../auth/tokens.ts";

/** Most app passwords one account may have. */
export const MAX_APP_PASSWORDS = 25;
/** Longest app password name. */
export const MAX_APP_PASSWORD_NAME = 64;

/** Stored app password. */
export interface AppPassword {
  /** Random; sessions started with it carry it, so a revoked one is not revived by its name. */
  id: string;
  name: string;
  /** `hashAppPassword` stored form. */
  passwordHash: string;
  /** ISO 8601. */
  createdAt: string;
}

/** What a session started with an app password remembers of it. */
export interface AppPasswordRef {
  id: string;
  name: string;
}

/** A refused app password operation (answered 400 `InvalidRequest`). */
export class AppPasswordError extends Error {
  override readonly name = "AppPasswordError";
}

/** The hashing {@link createAppPassword} and {@link findAppPassword} use (the bounded gate). */
export interface AppPasswordHasher {
  hashAppPassword(did: string, password: string): Promise<string>;
}

const BASE32 = "abcdefghijklmnopqrstuvwxyz234567";
const APP_PASSWORD_SHAPE = /^[a-z2-7]{4}-[a-z2-7]{4}-[a-z2-7]{4}-[a-z2-7]{4}$/;

/** True when `password` has the shape of an app password (only those are tried as one). */
export function isAppPasswordShaped(password: string): boolean {
  return APP_PASSWORD_SHAPE.test(password);
}

/**
 * Creates an app password named `name` for `did`; answers it with the plain password (the only
 * time it is shown).
 *
 * @throws {AppPasswordError} for a bad or taken name, or an account at the limit
 */
export async function createAppPassword(
  ctx: PdsContext,
  input: { did: string; name: string },
  hasher: AppPasswordHasher,
): Promise<{ name: string; password: string; createdAt: string }> {
  const { did, name } = input;
  if (name.length < 1 || name.length > MAX_APP_PASSWORD_NAME) {
    throw new AppPasswordError(
      `App password name must be 1 to ${MAX_APP_PASSWORD_NAME} characters: ${JSON.stringify(name)}`,
    );
  }
  const existing = await readAll(ctx.kv, did);
  checkRoom(existing, name);
  const password = generateAppPassword();
  const record: AppPassword = {
    id: randomId(16),
    name,
    passwordHash: await hasher.hashAppPassword(did, password),
    createdAt: new Date(ctx.now()).toISOString(),
  };
  // The listing is checked as a whole: two creations at once cannot pass the limit together.
  const res = await ctx.kv.atomic()
    .check(...existing)
    .check({ key: appPasswordKey(did, name), versionstamp: null })
    .set(appPasswordKey(did, name), record)
    .commit();
  if (!res.ok) {
    checkRoom(await readAll(ctx.kv, did), name);
    throw new AppPasswordError("App passwords changed meanwhile; retry");
  }
  ctx.log.info("app password created", { did, name });
  return { name, password, createdAt: record.createdAt };
}

/** The account's app passwords, newest first, without their hashes. */
export async function listAppPasswords(
  kv: Deno.Kv,
  did: string,
): Promise<{ name: string; createdAt: string }[]> {
  const all = (await readAll(kv, did)).map((e) => e.value);
  all.sort((a, b) => b.createdAt.localeCompare(a.createdAt) || a.name.localeCompare(b.name));
  return all.map(({ name, createdAt }) => ({ name, createdAt }));
}

/** Deletes the app password `name` of `did` (nothing when there is none). */
export async function revokeAppPassword(ctx: PdsContext, did: string, name: string): Promise<void> {
  if (name.length > MAX_APP_PASSWORD_NAME) return;
  await ctx.kv.delete(appPasswordKey(did, name));
  ctx.log.info("app password revoked", { did, name });
}

/** The app password of `did` that `password` is, or null. One hash, whatever the count. */
export async function findAppPassword(
  kv: Deno.Kv,
  input: { did: string; password: string },
  hasher: AppPasswordHasher,
): Promise<AppPasswordRef | null> {
  const hash = await hasher.hashAppPassword(input.did, input.password);
  let found: AppPasswordRef | null = null;
  for (const { value } of await readAll(kv, input.did)) {
    if (isSameHash(hash, value.passwordHash)) found = { id: value.id, name: value.name };
  }
  return found;
}

/** True while the app password a session was started with still exists (not revoked). */
export async function isAppPasswordCurrent(
  kv: Deno.Kv,
  did: string,
  ref: AppPasswordRef,
): Promise<boolean> {
  const entry = await kv.get<AppPassword>(appPasswordKey(did, ref.name));
  return entry.value !== null && entry.value.id === ref.id;
}

async function readAll(kv: Deno.Kv, did: string): Promise<Deno.KvEntry<AppPassword>[]> {
  const out: Deno.KvEntry<AppPassword>[] = [];
  for await (const e of kv.list<AppPassword>({ prefix: appPasswordPrefix(did) })) out.push(e);
  return out;
}

function checkRoom(existing: Deno.KvEntry<AppPassword>[], name: string): void {
  if (existing.some((e) => e.value.name === name)) {
    throw new AppPasswordError(`App password name is already in use: ${JSON.stringify(name)}`);
  }
  if (existing.length >= MAX_APP_PASSWORDS) {
    throw new AppPasswordError(`Account already has ${MAX_APP_PASSWORDS} app passwords`);
  }
}

function generateAppPassword(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  const chars = Array.from(bytes, (b) => BASE32[b & 31]).join("");
  return chars.match(/.{4}/g)!.join("-");
}
