/**
 * Invite codes (spec 2.12, 3.2): a use counter, a maximum and a disabled flag, plus a redemption
 * log (code -> DID) that keeps no link to the account and outlives it. Codes are made by the
 * command line (`scripts/invite.ts`), never over HTTP. Redemption itself is part of the
 * account-creation atomic operation (`accounts.ts`).
 *
 * @module
 */

import { inviteKey, invitePrefix, inviteUseKey, inviteUsePrefix } from "../store/keys.ts";

/** Stored invite code. */
export interface InviteCode {
  code: string;
  maxUses: number;
  usedCount: number;
  disabled: boolean;
  /** ISO 8601. */
  createdAt: string;
}

/** One redemption log entry. */
export interface InviteUse {
  did: string;
  /** ISO 8601. */
  usedAt: string;
}

/** An invite code with its redemptions (listing). */
export interface InviteCodeListing extends InviteCode {
  redeemedBy: InviteUse[];
}

const CODE_ALPHABET = "abcdefghijklmnopqrstuvwxyz234567";

/** True when the code can be redeemed once more (state "available" of spec 3.2). */
export function isInviteAvailable(invite: InviteCode | null): invite is InviteCode {
  return invite !== null && !invite.disabled && invite.usedCount < invite.maxUses;
}

/** A fresh random code such as `k3f7q-x2mbz-a9w4t` (75 bits). */
export function generateInviteCode(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(15));
  const chars = Array.from(bytes, (b) => CODE_ALPHABET[b & 31]).join("");
  return `${chars.slice(0, 5)}-${chars.slice(5, 10)}-${chars.slice(10, 15)}`;
}

/** Creates `count` new codes of `uses` uses each. */
export async function createInviteCodes(
  kv: Deno.Kv,
  opts: { count: number; uses: number; now?: number },
): Promise<InviteCode[]> {
  const createdAt = new Date(opts.now ?? Date.now()).toISOString();
  const created: InviteCode[] = [];
  while (created.length < opts.count) {
    const invite: InviteCode = {
      code: generateInviteCode(),
      maxUses: opts.uses,
      usedCount: 0,
      disabled: false,
      createdAt,
    };
    const key = inviteKey(invite.code);
    const res = await kv.atomic().check({ key, versionstamp: null }).set(key, invite).commit();
    if (res.ok) created.push(invite); // else a collision of 75 random bits: draw again
  }
  return created;
}

/** Reads one code, or null when unknown. */
export async function getInviteCode(kv: Deno.Kv, code: string): Promise<InviteCode | null> {
  return (await kv.get<InviteCode>(inviteKey(code))).value;
}

/** Lists every code with its redemption log, oldest first. */
export async function listInviteCodes(kv: Deno.Kv): Promise<InviteCodeListing[]> {
  const out: InviteCodeListing[] = [];
  for await (const entry of kv.list<InviteCode>({ prefix: invitePrefix() })) {
    const redeemedBy: InviteUse[] = [];
    for await (const use of kv.list<InviteUse>({ prefix: inviteUsePrefix(entry.value.code) })) {
      redeemedBy.push(use.value);
    }
    out.push({ ...entry.value, redeemedBy });
  }
  return out.sort((a, b) => a.createdAt.localeCompare(b.createdAt) || a.code.localeCompare(b.code));
}

/** Disables a code; returns false when it does not exist. Retries on concurrent redemption. */
export async function disableInviteCode(kv: Deno.Kv, code: string): Promise<boolean> {
  for (;;) {
    const entry = await kv.get<InviteCode>(inviteKey(code));
    if (entry.value === null) return false;
    const res = await kv.atomic()
      .check(entry)
      .set(entry.key, { ...entry.value, disabled: true })
      .commit();
    if (res.ok) return true;
  }
}

/** Adds one redemption of `invite` by `did` to an atomic operation (caller checks the entry). */
export function redeemInvite(
  op: Deno.AtomicOperation,
  entry: Deno.KvEntry<InviteCode>,
  did: string,
  usedAt: string,
): Deno.AtomicOperation {
  const use: InviteUse = { did, usedAt };
  return op
    .check(entry)
    .set(entry.key, { ...entry.value, usedCount: entry.value.usedCount + 1 })
    .set(inviteUseKey(entry.value.code, did), use);
}
