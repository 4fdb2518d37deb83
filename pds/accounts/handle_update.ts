/**
 * Handle change (`com.atproto.identity.updateHandle`, docs/behaviour.md 4.1 rule 11): the
 * account record, the handle index (old handle freed, new one taken) and an `#identity` event
 * are one atomic operation, so the stream announces exactly the changes that were made. The DID
 * document (`alsoKnownAs`) is built from the account record, so it follows at once.
 *
 * @module
 */

import type { PdsContext } from "../context.ts";
import { commitIdentityEvent, type IdentityEvent } from "../sequencer/identity_events.ts";
import { accountKey, handleKey } from "../store/keys.ts";
import { type Account, AccountError, checkHandle } from "./accounts.ts";

/**
 * Moves the account `did` to the handle `raw` (checked as createAccount checks it) and sequences
 * its `#identity` event. Setting the current handle changes nothing but still announces it.
 *
 * @throws {AccountError} `InvalidHandle`, `UnsupportedDomain`, `HandleNotAvailable`
 */
export async function updateHandle(
  ctx: PdsContext,
  did: string,
  raw: unknown,
): Promise<IdentityEvent> {
  const handle = checkHandle(ctx, raw);
  const event = await commitIdentityEvent(ctx.kv, {
    did,
    handle,
    nowMs: ctx.now(),
    prepare: async () => {
      const [account, owner] = await ctx.kv.getMany<[Account, string]>([
        accountKey(did),
        handleKey(handle),
      ]);
      if (account.value === null) throw new Error(`No account ${JSON.stringify(did)}`);
      if (owner.value !== null && owner.value !== did) {
        throw new AccountError("HandleNotAvailable", `Handle is already taken: "${handle}"`);
      }
      const old = account.value.handle;
      return (op) => {
        op.check(account, owner);
        if (old === handle) return;
        op.delete(handleKey(old))
          .set(handleKey(handle), did)
          .set(account.key, { ...account.value, handle });
      };
    },
  });
  ctx.log.info("handle updated", { did, handle, seq: event.seq });
  return event;
}
