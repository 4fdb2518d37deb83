/**
 * Accounts: creation (handle checks, password hash, signing key, did:plc published to the PLC
 * directory when one is configured, invite redemption and the `#identity` and `#account` events,
 * all committed in one Deno KV atomic operation) and lookups by DID, handle or login identifier.
 *
 * @module
 */

import { generateP256KeyPair } from "../../shared/keys.ts";
import { isValidDid, isValidHandle, normalizeHandle } from "../../shared/syntax.ts";
import type { PdsContext } from "../context.ts";
import { accountKey, handleKey, inviteKey, plcOpKey } from "../store/keys.ts";
import { setAccountKeyPair } from "./account_keys.ts";
import { type InviteCode, isInviteAvailable, redeemInvite } from "./invites.ts";
import { hashPassword, MAX_PASSWORD_LENGTH, MIN_PASSWORD_LENGTH } from "./password.ts";
import { loadPlcRotationKey, mintPlcDid, newPlcLog } from "./plc.ts";
import { submitPlcOperation } from "./plc_directory.ts";
import { commitFrameEvents } from "../sequencer/frame_events.ts";
import { identityEventSpec } from "../sequencer/identity_events.ts";
import { accountEventSpec } from "../sequencer/account_events.ts";

/** Stored account. */
export interface Account {
  did: string;
  /** Lower-case handle. */
  handle: string;
  /** `password.ts` stored form; never leaves the account host. */
  passwordHash: string;
  /** ISO 8601. */
  createdAt: string;
  /**
   * Raised by every password reset; logins started under an older value are revoked at their
   * next refresh (`sessions.ts`). Absent: 0.
   */
  sessionGeneration?: number;
}

/** Wire names of account failures (all answered with 400). */
export type AccountErrorCode =
  | "InvalidHandle"
  | "UnsupportedDomain"
  | "HandleNotAvailable"
  | "InvalidPassword"
  | "InvalidInviteCode";

/** A rejected account operation; `code` is the XRPC error name. */
export class AccountError extends Error {
  override readonly name = "AccountError";
  constructor(readonly code: AccountErrorCode, message: string) {
    super(message);
  }
}

/**
 * The one message for every unusable invite code (missing, empty, unknown, disabled, exhausted),
 * so that responses do not reveal which codes exist (spec 4.1 rule 5).
 */
export const INVALID_INVITE_MESSAGE = "Invite code is invalid or has no uses left";

/**
 * Longest DID looked up. DID syntax allows 2,048 characters but a Deno KV key holds at most 2,048
 * bytes in all (a record key adds a collection and an rkey); hosted DIDs are far shorter.
 */
export const MAX_LOOKUP_DID_LENGTH = 1024;

/** Longest invite code looked up (generated codes have 17 characters). */
export const MAX_INVITE_CODE_LENGTH = 64;

/** Shortest handle label in front of the domain. */
export const MIN_HANDLE_LABEL = 3;

/** Input of {@link createAccount}. */
export interface CreateAccountInput {
  handle: string;
  password: string;
  inviteCode?: string;
}

/** Options of {@link createAccount}. */
export interface CreateAccountOptions {
  /** Hashes the password (default `hashPassword`; the server passes its bounded one). */
  hashPassword?: (password: string) => Promise<string>;
}

/**
 * Creates an account. When invites are required, the code is first read and an unusable one
 * refused before any costly work (key, signature, password hash). With a PLC directory
 * (`PDS_PLC_URL`) the signed genesis operation is then submitted to it; a refusal fails the
 * creation before anything is written. Then the redemption (conditional on the code existing,
 * not disabled and `usedCount < maxUses`), the account, the handle index, the signing key, the
 * operation log, the redemption log and the `#identity` and `#account` events are one atomic
 * operation, which alone decides; on a failed check everything is re-read and retried, so a lost
 * race either wins later or fails with nothing consumed (a DID the directory accepted for a
 * handle lost in that race stays unused there).
 *
 * @throws {AccountError}
 * @throws {PlcDirectoryError} the directory refused the genesis operation or did not answer
 */
export async function createAccount(
  ctx: PdsContext,
  input: CreateAccountInput,
  opts: CreateAccountOptions = {},
): Promise<Account> {
  const handle = checkHandle(ctx, input.handle);
  checkPassword(input.password);
  const code = input.inviteCode ?? "";
  // Empty and oversized codes (too long for a KV key) fail exactly like unknown ones. A code
  // that cannot be redeemed now fails before the work below: a guess at a code costs one read.
  if (
    ctx.config.inviteRequired &&
    (code === "" || code.length > MAX_INVITE_CODE_LENGTH ||
      !isInviteAvailable((await ctx.kv.get<InviteCode>(inviteKey(code))).value))
  ) {
    throw new AccountError("InvalidInviteCode", INVALID_INVITE_MESSAGE);
  }

  const keyPair = generateP256KeyPair();
  const { did, op: genesis } = mintPlcDid({
    rotationKey: await loadPlcRotationKey(ctx.kv),
    signingPublicKey: keyPair.publicKey,
    handle,
    pdsUrl: ctx.config.publicUrl,
  });
  const createdAt = new Date(ctx.now()).toISOString();
  const account: Account = {
    did,
    handle,
    passwordHash: await (opts.hashPassword ?? hashPassword)(input.password),
    createdAt,
  };
  const directory = ctx.config.plcUrl;
  if (directory !== null) {
    // A taken handle fails here, before a DID is published for it. The directory's refusal
    // (or silence) fails the creation with nothing written (docs/behaviour.md 10.4).
    if ((await ctx.kv.get<string>(handleKey(handle))).value !== null) throw handleTaken(handle);
    await submitPlcOperation(directory, did, genesis);
  }
  const plcLog = newPlcLog(genesis, directory);

  // The account, its handle, key and operation log, the invite's redemption and the #identity
  // and #account events announcing the account (docs/behaviour.md 6.1 rules 8-9) are one atomic
  // operation at the next two seqs.
  await commitFrameEvents<unknown>(ctx.kv, {
    label: `Account creation for ${q(handle)}`,
    nowMs: ctx.now(),
    events: [identityEventSpec(did, handle), accountEventSpec(did, true)],
    prepare: async () => {
      const [invite, owner] = ctx.config.inviteRequired
        ? await ctx.kv.getMany<[InviteCode, string]>([inviteKey(code), handleKey(handle)])
        : [null, await ctx.kv.get<string>(handleKey(handle))];
      // Redemption first: the conditional increment of spec 4.1 rule 5.
      if (invite !== null && !isInviteAvailable(invite.value)) {
        throw new AccountError("InvalidInviteCode", INVALID_INVITE_MESSAGE);
      }
      if (owner.value !== null) throw handleTaken(handle);
      return (op) => {
        if (invite !== null) redeemInvite(op, invite as Deno.KvEntry<InviteCode>, did, createdAt);
        op.check(owner).set(owner.key, did)
          .check({ key: accountKey(did), versionstamp: null }).set(accountKey(did), account)
          .set(plcOpKey(did), plcLog);
        setAccountKeyPair(op, did, keyPair);
      };
    },
  });
  ctx.log.info("account created", { did, handle, plcDirectory: directory });
  return account;
}

function handleTaken(handle: string): AccountError {
  return new AccountError("HandleNotAvailable", `Handle is already taken: ${q(handle)}`);
}

/** Normalises and checks a requested handle; returns the lower-case handle. */
export function checkHandle(ctx: PdsContext, raw: unknown): string {
  if (typeof raw !== "string" || raw.trim() === "") {
    throw new AccountError("InvalidHandle", "Handle is required");
  }
  const handle = normalizeHandle(raw.trim());
  if (!isValidHandle(handle)) {
    throw new AccountError("InvalidHandle", `Handle is invalid: ${q(raw)}`);
  }
  const domain = ctx.config.handleDomains.find((d) => handle.endsWith(d));
  if (domain === undefined) {
    throw new AccountError(
      "UnsupportedDomain",
      `Handle must end with ${ctx.config.handleDomains.join(" or ")}: ${q(raw)}`,
    );
  }
  const label = handle.slice(0, -domain.length);
  if (label.length < MIN_HANDLE_LABEL || label.includes(".")) {
    throw new AccountError(
      "InvalidHandle",
      `Handle must be one label of at least ${MIN_HANDLE_LABEL} characters before ${domain}: ${
        q(raw)
      }`,
    );
  }
  return handle;
}

/**
 * Checks a new password's length (createAccount, resetPassword).
 *
 * @throws {AccountError} `InvalidPassword`
 */
export function checkPassword(password: unknown): void {
  if (
    typeof password !== "string" || password.length < MIN_PASSWORD_LENGTH ||
    password.length > MAX_PASSWORD_LENGTH
  ) {
    throw new AccountError(
      "InvalidPassword",
      `Password must be between ${MIN_PASSWORD_LENGTH} and ${MAX_PASSWORD_LENGTH} characters`,
    );
  }
}

/** True when `did` is DID syntax short enough to be looked up. */
export function isLookupDid(did: string): boolean {
  return did.length <= MAX_LOOKUP_DID_LENGTH && isValidDid(did);
}

/** Reads an account by DID (null for DIDs too long to be a key). */
export async function getAccount(kv: Deno.Kv, did: string): Promise<Account | null> {
  if (did.length > MAX_LOOKUP_DID_LENGTH) return null;
  return (await kv.get<Account>(accountKey(did))).value;
}

/** The DID of a (case-insensitive) handle, or null (also for anything not handle syntax). */
export async function getDidForHandle(kv: Deno.Kv, handle: string): Promise<string | null> {
  const normalized = normalizeHandle(handle.trim());
  if (!isValidHandle(normalized)) return null;
  return (await kv.get<string>(handleKey(normalized))).value;
}

/** Finds an account by login identifier: a DID, or a handle (case-insensitive). */
export async function findAccount(kv: Deno.Kv, identifier: string): Promise<Account | null> {
  const id = identifier.trim();
  if (id.startsWith("did:")) return isLookupDid(id) ? await getAccount(kv, id) : null;
  if (!isValidHandle(id)) return null;
  const did = await getDidForHandle(kv, id);
  return did === null ? null : await getAccount(kv, did);
}

function q(value: unknown): string {
  const s = String(value);
  return JSON.stringify(s.length > 100 ? s.slice(0, 100) + "..." : s);
}
