/**
 * The operator's list of accounts (`deno task admin accounts list`): ordered by handle, filtered
 * by a handle prefix, paged by the last handle shown.
 *
 * @module
 */

import { type AccountStatus, accountStatus } from "./account_status.ts";
import { handleKey, repoRecordPrefix } from "../store/keys.ts";
import { type Account, getAccount } from "./accounts.ts";

/** One row of {@link listAccounts}. */
export interface AccountRow {
  handle: string;
  did: string;
  createdAt: string;
  /** `active`, `takendown` or `deactivated` (`account_status.ts`). */
  status: AccountStatus;
  records: number;
}

/** A page of {@link listAccounts}; `cursor` is null on the last page. */
export interface AccountPage {
  accounts: AccountRow[];
  cursor: string | null;
}

/**
 * Lists up to `limit` accounts whose handle starts with `handlePrefix` (lower case), after the
 * handle `cursor` when given.
 */
export async function listAccounts(
  kv: Deno.Kv,
  opts: { handlePrefix?: string; limit: number; cursor?: string },
): Promise<AccountPage> {
  const prefix = (opts.handlePrefix ?? "").toLowerCase();
  const after = opts.cursor === undefined ? prefix : `${opts.cursor}\u0000`;
  const start = after > prefix ? after : prefix;
  const iter = kv.list<string>(
    { start: handleKey(start), end: handleKey(`${prefix}\uffff`) },
    { limit: opts.limit + 1 },
  );
  const accounts: AccountRow[] = [];
  let more = false;
  for await (const entry of iter) {
    if (accounts.length === opts.limit) {
      more = true;
      break;
    }
    const account = await getAccount(kv, entry.value);
    if (account === null) continue;
    accounts.push(await toRow(kv, account));
  }
  return { accounts, cursor: more ? accounts[accounts.length - 1].handle : null };
}

async function toRow(kv: Deno.Kv, account: Account): Promise<AccountRow> {
  let records = 0;
  for await (const _ of kv.list({ prefix: repoRecordPrefix(account.did) })) records++;
  return {
    handle: account.handle,
    did: account.did,
    createdAt: account.createdAt,
    status: accountStatus(account),
    records,
  };
}
