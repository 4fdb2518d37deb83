/**
 * Handle change (`com.atproto.identity.updateHandle`, docs/behaviour.md 4.1 rule 11): the
 * account record, the handle index (old handle freed, new one taken) and an `#identity` event
 * are one atomic operation, so the stream announces exactly the changes that were made. The DID
 * document (`alsoKnownAs`) is built from the account record, so it follows at once.
 *
 * With a PLC directory (`PDS_PLC_URL`, docs/behaviour.md 10.4) the new handle is first published:
 * an update operation (`prev` = the CID of the last one) signed with the host's rotation key is
 * submitted, and only once the directory accepted it is the change made here, with the
 * operation appended to the account's log in the same atomic operation. A refusal changes
 * nothing. An account never published (created without a directory) has its stored genesis
 * operation submitted first.
 *
 * @module
 */

import type { PdsContext } from "../context.ts";
import { commitIdentityEvent, type IdentityEvent } from "../sequencer/identity_events.ts";
import { accountKey, handleKey, plcOpKey } from "../store/keys.ts";
import { type Account, AccountError, checkHandle } from "./accounts.ts";
import {
  appendPlcLog,
  loadPlcRotationKey,
  nextPlcOperation,
  type PlcLog,
  readPlcLog,
} from "./plc.ts";
import { submitPlcOperation } from "./plc_directory.ts";

/**
 * Moves the account `did` to the handle `raw` (checked as createAccount checks it) and sequences
 * its `#identity` event. Setting the current handle changes nothing but still announces it.
 *
 * @throws {AccountError} `InvalidHandle`, `UnsupportedDomain`, `HandleNotAvailable`
 * @throws {PlcDirectoryError} the directory refused the operation or did not answer
 */
export async function updateHandle(
  ctx: PdsContext,
  did: string,
  raw: unknown,
): Promise<IdentityEvent> {
  const handle = checkHandle(ctx, raw);
  const published = ctx.config.plcUrl === null ? null : await publishHandle(ctx, did, handle);
  const event = await commitIdentityEvent(ctx.kv, {
    did,
    handle,
    nowMs: ctx.now(),
    prepare: async () => {
      const [account, owner, plc] = await ctx.kv.getMany<[Account, string, unknown]>([
        accountKey(did),
        handleKey(handle),
        plcOpKey(did),
      ]);
      if (account.value === null) throw new Error(`No account ${JSON.stringify(did)}`);
      if (owner.value !== null && owner.value !== did) {
        throw new AccountError("HandleNotAvailable", `Handle is already taken: "${handle}"`);
      }
      if (published !== null && plc.versionstamp !== published.versionstamp) {
        // Cannot happen while the directory orders the operations (the same `prev` is accepted
        // once); said loudly if it does, as the directory then names a handle the host does not.
        throw new Error(`The PLC operation log of ${did} changed during the handle update`);
      }
      const old = account.value.handle;
      return (op) => {
        op.check(account, owner, plc);
        if (published !== null && published.log !== null) op.set(plcOpKey(did), published.log);
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

/**
 * Publishes `handle` for `did` to the configured directory, before the change is made here.
 * Resolves to the log to store (null: the directory already names this handle, host and key)
 * and the versionstamp of the log it follows.
 */
async function publishHandle(
  ctx: PdsContext,
  did: string,
  handle: string,
): Promise<{ log: PlcLog | null; versionstamp: string | null }> {
  const directory = ctx.config.plcUrl!;
  const owner = (await ctx.kv.get<string>(handleKey(handle))).value;
  if (owner !== null && owner !== did) {
    // Refused before anything is published for a handle that is not free.
    throw new AccountError("HandleNotAvailable", `Handle is already taken: "${handle}"`);
  }
  const [stored, keyPair] = await Promise.all([readPlcLog(ctx.kv, did), ctx.accountKeys.get(did)]);
  if (stored === null || keyPair === null) {
    throw new Error(`Account ${did} has no PLC operation log or signing key`);
  }
  let { log, entry } = stored;
  if (log.publishedTo === null) {
    // Created without a directory: the genesis goes first, and is recorded at once, so that
    // a refused update does not leave the host believing it unpublished.
    await submitPlcOperation(directory, did, log.genesis);
    log = { ...log, publishedTo: directory };
    const res = await ctx.kv.atomic().check(entry).set(plcOpKey(did), log).commit();
    if (!res.ok) throw new Error(`The PLC operation log of ${did} changed during its publication`);
    entry = await ctx.kv.get(plcOpKey(did));
  }
  const state = { signingPublicKey: keyPair.publicKey, handle, pdsUrl: ctx.config.publicUrl };
  const op = nextPlcOperation(log, state, {
    rotation: await loadPlcRotationKey(ctx.kv),
    service: ctx.serviceKeys.keyPair,
  });
  const unchanged = JSON.stringify([op.alsoKnownAs, op.services, op.verificationMethods]) ===
      JSON.stringify([log.last.alsoKnownAs, log.last.services, log.last.verificationMethods]) &&
    JSON.stringify(op.rotationKeys) === JSON.stringify(log.last.rotationKeys);
  if (unchanged) return { log: null, versionstamp: entry.versionstamp };
  await submitPlcOperation(directory, did, op);
  ctx.log.info("PLC operation accepted", { did, handle, directory, ops: log.ops + 1 });
  return { log: appendPlcLog(log, op, directory), versionstamp: entry.versionstamp };
}
