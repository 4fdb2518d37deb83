/**
 * Password change by a logged-in member (`app.social.server.changePassword`, docs/behaviour.md
 * 4.1 rule 9; the reference account host has no such call). The current password is checked,
 * then the new hash and a raised session generation are written in one atomic operation, so
 * every login of the account ends at its next refresh (`sessions.ts`), the caller's included;
 * the handler starts the caller a new login under the new generation.
 *
 * @module
 */

import type { PdsContext } from "../context.ts";
import { accountKey } from "../store/keys.ts";
import { type Account, checkPassword } from "./accounts.ts";

const MAX_COMMIT_ATTEMPTS = 20;

/** The current password did not match (answered 401 `AuthenticationRequired`). */
export class WrongPasswordError extends Error {
  override readonly name = "WrongPasswordError";
  constructor() {
    super("Current password is wrong");
  }
}

/** The password operations {@link changePassword} needs (the server's bounded gate). */
export interface PasswordHasher {
  hash(password: string): Promise<string>;
  verify(password: string, stored: string): Promise<boolean>;
}

/**
 * Sets the password of `did` to `newPassword` when `currentPassword` matches, and raises its
 * session generation. Returns the updated account.
 *
 * @throws {AccountError} `InvalidPassword` for a new password outside the length rules
 * @throws {WrongPasswordError} when the current password does not match
 */
export async function changePassword(
  ctx: PdsContext,
  input: { did: string; currentPassword: string; newPassword: string },
  hasher: PasswordHasher,
): Promise<Account> {
  checkPassword(input.newPassword);
  const first = await ctx.kv.get<Account>(accountKey(input.did));
  if (first.value === null) throw new Error(`No account ${JSON.stringify(input.did)}`);
  if (!await hasher.verify(input.currentPassword, first.value.passwordHash)) {
    throw new WrongPasswordError();
  }
  const passwordHash = await hasher.hash(input.newPassword);
  for (let attempt = 0; attempt < MAX_COMMIT_ATTEMPTS; attempt++) {
    const account = attempt === 0 ? first : await ctx.kv.get<Account>(accountKey(input.did));
    if (account.value === null) throw new Error(`No account ${JSON.stringify(input.did)}`);
    // A password set in between (a reset, another change) was not the one checked above.
    if (account.value.passwordHash !== first.value.passwordHash) throw new WrongPasswordError();
    const updated: Account = {
      ...account.value,
      passwordHash,
      sessionGeneration: (account.value.sessionGeneration ?? 0) + 1,
    };
    const res = await ctx.kv.atomic().check(account).set(account.key, updated).commit();
    if (res.ok) {
      ctx.log.info("password changed", { did: input.did });
      return updated;
    }
  }
  throw new Error("Password change lost too many commit races");
}
