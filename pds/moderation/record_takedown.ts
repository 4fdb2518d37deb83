/**
 * Record takedown by the operator (docs/behaviour.md 4.1 rule 15, 10.5): `deno task admin record
 * takedown <at-uri>` deletes the record by an ordinary commit of its repository (the one write
 * path, signed with the account's key), so the index, the sync endpoints and every other consumer
 * see it go as they see any delete, and keeps a hold on the account host with the record's exact
 * bytes, for `record restore` to write them back by a commit at the same path (same CID, same
 * URI) and for the author to see what was removed (`app.social.server.listRecordTakedowns`).
 *
 * Order, crash-safe without a shared atomic operation (the write path owns the commit's): the
 * hold is stored first, then the commit deletes the record. A crash in between leaves a hold
 * whose record is still live with the held CID: a *pending* hold. It changes nothing anyone sees
 * (the record is served, its blobs are referenced, the author's list leaves it out), and running
 * either command again finishes it: `takedown` commits the delete, `restore` drops the hold.
 * Restore runs the other way round (commit, then drop the hold), so a crash there leaves the same
 * pending state. A commit that fails because the record changed meanwhile (the author edited or
 * deleted it) drops the hold again and says so.
 *
 * The record's block leaves the store with the repository's compaction that follows the commit;
 * as a running host may still have it in a cache of the commit that wrote it, `sync.getBlocks`
 * also refuses the CIDs of held records (`recordTakedownCidKey`).
 *
 * Reading the holds (listings, `getBlocks`' check) is in `record_takedown_reads.ts`.
 *
 * Blobs: the hold stores a key per blob the record references (`recordTakedownBlobKey`), which
 * the blob garbage collection treats as a reason to keep the blob (`blob_gc.ts`) but `getBlob`
 * does not (it serves blobs a live record references). Storing the hold also rewrites each blob's
 * metadata, so a collection that read the metadata before the hold existed fails its
 * versionstamp check instead of deleting the blob.
 *
 * @module
 */

import { decodeCbor } from "../../shared/cbor.ts";
import { formatAtUri } from "../../shared/at_uri.ts";
import { toLexJson } from "../../shared/lex_json.ts";
import { silentLogger } from "../../shared/log.ts";
import { getAccount, getDidForHandle } from "../accounts/accounts.ts";
import { AccountKeys } from "../accounts/account_keys.ts";
import { accountStatus } from "../accounts/account_status.ts";
import {
  blobMetaKey,
  recordTakedownBlobKey,
  recordTakedownBlobPrefix,
  recordTakedownCidKey,
  recordTakedownKey,
  repoRecordKey,
} from "../store/keys.ts";
import { blobRefIndexBuilt, deleteBlobIfUnreferenced } from "../blobs/blob_gc.ts";
import { findBlobRefs } from "../blobs/blob_refs.ts";
import type { BlobMeta } from "../blobs/blob_store.ts";
import { BlockStore } from "../repo/block_store.ts";
import { RepoError } from "../repo/errors.ts";
import { RepoService } from "../repo/repository.ts";
import type { StoredRecord } from "../repo/repo_root.ts";
import { commitSigner } from "../repo/signer.ts";
import { Sequencer } from "../sequencer/sequencer.ts";
import { parseRecordUri, type RecordTakedown } from "./record_takedown_reads.ts";

export {
  getRecordTakedown,
  heldRecordCids,
  type ListedTakedown,
  listRecordTakedowns,
  MAX_TAKEDOWN_PAGE,
  parseRecordUri,
  type RecordTakedown,
} from "./record_takedown_reads.ts";

/** Longest takedown reason, in UTF-16 code units (the hold is one KV value of at most 64 KiB). */
export const MAX_TAKEDOWN_REASON = 1000;
const MAX_ATTEMPTS = 20;

/** Why a takedown or restore was refused; the message names the record. */
export type RecordTakedownErrorCode =
  | "AccountNotFound"
  | "AccountTakendown"
  | "RecordNotFound"
  | "NotTakenDown"
  | "RecordExists"
  | "RecordChanged"
  | "RestoreFailed";

/** A takedown or restore that could not be done (nothing changed unless the message says so). */
export class RecordTakedownError extends Error {
  override readonly name = "RecordTakedownError";
  constructor(readonly code: RecordTakedownErrorCode, message: string) {
    super(message);
  }
}

/** What the takedown and restore write through: the store and its repository write path. */
export interface RecordTakedownDeps {
  kv: Deno.Kv;
  repos: Pick<RepoService, "applyWrites" | "compact">;
  /** Milliseconds since the epoch. */
  now(): number;
}

/**
 * The dependencies for a process of its own on the account host's store (`deno task admin`): a
 * repository write path signing with the accounts' keys, like the host's. A running host sees its
 * commits through the store (its stream, and the root check of its next write). `close` lets a
 * compaction the commit queued stop.
 */
export function standaloneTakedownDeps(kv: Deno.Kv): RecordTakedownDeps & {
  close(): Promise<void>;
} {
  const accountKeys = new AccountKeys(kv);
  const repos = new RepoService({
    kv,
    blocks: new BlockStore(kv),
    sequencer: new Sequencer(kv),
    signer: commitSigner(),
    log: silentLogger,
    now: Date.now,
    signingKey: (did) => accountKeys.get(did),
  });
  return { kv, repos, now: Date.now, close: () => repos.compactionsSettled({ stop: true }) };
}

/** A commit of a takedown or restore. */
export interface CommitRef {
  rev: string;
  seq: number;
}

/** The outcome of {@link takeDownRecord}. */
export type TakedownResult =
  | {
    status: "takendown";
    uri: string;
    cid: string;
    commit: CommitRef;
    /** The CID of an earlier version held at the same path, which this hold replaced. */
    replaced?: string;
    /** Whether the repository's compaction removed the record's block (false: it did not finish). */
    compacted: boolean;
  }
  | { status: "already"; uri: string; hold: RecordTakedown };

/** The outcome of {@link restoreRecord}; `commit` is null when it finished a pending hold. */
export interface RestoreResult {
  uri: string;
  cid: string;
  commit: CommitRef | null;
}

/** Test hooks: run between the two steps (a crash test kills the process there). */
export interface StepHooks {
  /** After the hold is stored, before the takedown's commit. */
  afterHold?: () => Promise<void>;
  /** After the restore's commit, before the hold is dropped. */
  afterRestoreCommit?: () => Promise<void>;
}

/** A record AT-URI's parts with its authority resolved to an existing account's DID. */
interface Target {
  did: string;
  collection: string;
  rkey: string;
  uri: string;
  path: string;
}

/**
 * Takes the record `uri` down: stores its hold (bytes, CID, reason, time), then deletes it by a
 * commit (module comment), then compacts the repository so that no sync endpoint finds the block.
 *
 * @throws {RecordTakedownError} `AccountNotFound`, `AccountTakendown`, `RecordNotFound`,
 *   `RecordChanged`
 * @throws {AtUriError} for a malformed URI
 */
export async function takeDownRecord(
  deps: RecordTakedownDeps,
  uri: string,
  opts: { reason?: string } & StepHooks = {},
): Promise<TakedownResult> {
  if (opts.reason !== undefined && opts.reason.length > MAX_TAKEDOWN_REASON) {
    throw new RangeError(`Reason is longer than ${MAX_TAKEDOWN_REASON} characters`);
  }
  const { kv } = deps;
  const t = await resolveTarget(kv, uri, "take down");
  let hold: Deno.KvEntry<RecordTakedown> | null = null;
  let replaced: RecordTakedown | undefined;
  for (let attempt = 0; hold === null; attempt++) {
    if (attempt === MAX_ATTEMPTS) throw new Error(`Record ${t.uri} kept changing; try again`);
    replaced = undefined;
    const [record, held] = await kv.getMany<[StoredRecord, RecordTakedown]>([
      repoRecordKey(t.did, t.collection, t.rkey),
      recordTakedownKey(t.did, t.collection, t.rkey),
    ]);
    if (record.value === null) {
      if (held.value !== null) return { status: "already", uri: t.uri, hold: held.value };
      throw new RecordTakedownError("RecordNotFound", `No record at ${t.uri}`);
    }
    if (held.value !== null && held.value.cid === record.value.cid) {
      hold = held as Deno.KvEntry<RecordTakedown>; // pending: a takedown stopped before its commit
      break;
    }
    // A version held earlier at this path (a record key the author wrote again, like a
    // profile's `self`) is replaced by the one live now.
    replaced = held.value ?? undefined;
    const value: RecordTakedown = {
      uri: t.uri,
      cid: record.value.cid,
      bytes: record.value.bytes,
      ...(opts.reason === undefined ? {} : { reason: opts.reason }),
      createdAt: new Date(deps.now()).toISOString(),
      blobs: blobsOf(t.collection, record.value.bytes),
    };
    hold = await storeHold(kv, t, { record, held, value });
  }
  await opts.afterHold?.();
  let commit: CommitRef;
  try {
    const res = await deps.repos.applyWrites(t.did, [
      { action: "delete", collection: t.collection, rkey: t.rkey, swapRecord: hold.value.cid },
    ]);
    commit = { rev: res.commit!.rev, seq: res.commit!.seq };
  } catch (err) {
    if (!(err instanceof RepoError) || !["InvalidSwap", "RepoNotFound"].includes(err.code)) {
      throw err; // the hold stays pending: running the command again finishes it
    }
    await undoHold(kv, t, hold, replaced);
    throw new RecordTakedownError(
      "RecordChanged",
      `Record ${t.uri} changed or went while it was being taken down; nothing was taken down`,
    );
  }
  const compacted = await deps.repos.compact(t.did).then((r) => r?.complete ?? false, () => false);
  // The blobs only a replaced version (or one of an interrupted replacement) was held with.
  await pruneBlobKeys(kv, t, hold.value.blobs);
  return {
    status: "takendown",
    uri: t.uri,
    cid: hold.value.cid,
    commit,
    ...(replaced === undefined ? {} : { replaced: replaced.cid }),
    compacted,
  };
}

/**
 * Restores the held record `uri`: writes its held bytes back at the same path by a commit (same
 * CID), then drops the hold.
 *
 * @throws {RecordTakedownError} `AccountNotFound`, `AccountTakendown`, `NotTakenDown`,
 *   `RecordExists`, `RestoreFailed`
 * @throws {AtUriError} for a malformed URI
 */
export async function restoreRecord(
  deps: RecordTakedownDeps,
  uri: string,
  opts: StepHooks = {},
): Promise<RestoreResult> {
  const { kv } = deps;
  const t = await resolveTarget(kv, uri, "restore");
  const [record, held] = await kv.getMany<[StoredRecord, RecordTakedown]>([
    repoRecordKey(t.did, t.collection, t.rkey),
    recordTakedownKey(t.did, t.collection, t.rkey),
  ]);
  if (held.value === null) {
    throw new RecordTakedownError("NotTakenDown", `No record taken down at ${t.uri}`);
  }
  const hold = held as Deno.KvEntry<RecordTakedown>;
  if (record.value !== null) {
    if (record.value.cid !== hold.value.cid) throw recordExists(t.uri, record.value.cid);
    // Pending: the record is live with the held bytes already; only the hold is left.
    await dropHold(kv, t, hold, { collectBlobs: false });
    return { uri: t.uri, cid: hold.value.cid, commit: null };
  }
  let commit: CommitRef | null;
  let cid: string | null;
  try {
    const res = await deps.repos.applyWrites(t.did, [{
      action: "update",
      collection: t.collection,
      rkey: t.rkey,
      record: toLexJson(decodeCbor(hold.value.bytes)),
      swapRecord: null,
    }]);
    commit = res.commit && { rev: res.commit.rev, seq: res.commit.seq };
    cid = res.results[0].cid;
  } catch (err) {
    if (err instanceof RepoError && err.code === "InvalidSwap") {
      const now = (await kv.get<StoredRecord>(record.key)).value;
      throw recordExists(t.uri, now?.cid ?? "another version");
    }
    if (err instanceof RepoError) {
      throw new RecordTakedownError(
        "RestoreFailed",
        `Record ${t.uri} could not be written back (${err.code}: ${err.message}); it stays held`,
      );
    }
    throw err;
  }
  if (cid !== hold.value.cid) {
    // Never expected (the bytes are written back as they were): keep the hold, say so.
    throw new RecordTakedownError(
      "RestoreFailed",
      `Record ${t.uri} was written back as ${cid}, not the held ${hold.value.cid}; the hold is kept`,
    );
  }
  await opts.afterRestoreCommit?.();
  await dropHold(kv, t, hold, { collectBlobs: false });
  return { uri: t.uri, cid, commit };
}

/** Resolves the URI's account (DID or handle) and refuses one that is gone or taken down. */
async function resolveTarget(kv: Deno.Kv, uri: string, verb: string): Promise<Target> {
  const { authority, collection, rkey } = parseRecordUri(uri);
  const did = authority.startsWith("did:") ? authority : await getDidForHandle(kv, authority);
  const account = did === null ? null : await getAccount(kv, did);
  if (did === null || account === null) {
    throw new RecordTakedownError("AccountNotFound", `No account ${JSON.stringify(authority)}`);
  }
  const full = formatAtUri(did, collection, rkey);
  if (accountStatus(account) === "takendown") {
    throw new RecordTakedownError(
      "AccountTakendown",
      `Account ${did} is taken down; restore the account before you ${verb} ${full}`,
    );
  }
  return { did, collection, rkey, uri: full, path: `${collection}/${rkey}` };
}

/**
 * Stores `value` as the hold of `t` if neither the record nor the hold changed since they were
 * read, with its blob keys and each blob's metadata rewritten (module comment). Null when
 * something changed (read again).
 */
async function storeHold(
  kv: Deno.Kv,
  t: Target,
  read: {
    record: Deno.KvEntryMaybe<StoredRecord>;
    held: Deno.KvEntryMaybe<RecordTakedown>;
    value: RecordTakedown;
  },
): Promise<Deno.KvEntry<RecordTakedown> | null> {
  const { record, held, value } = read;
  const op = kv.atomic().check(record, held).set(held.key, value)
    .set(recordTakedownCidKey(t.did, value.cid, t.path), true);
  if (held.value !== null && held.value.cid !== value.cid) {
    op.delete(recordTakedownCidKey(t.did, held.value.cid, t.path));
  }
  // The blob keys of a replaced version stay until the commit (`pruneBlobKeys`), so that a
  // takedown undone meanwhile can put that version back with its blobs.
  for (const cid of value.blobs) {
    op.set(recordTakedownBlobKey(t.did, cid, t.path), true);
    const meta = await kv.get<BlobMeta>(blobMetaKey(t.did, cid));
    if (meta.value !== null) op.check(meta).set(meta.key, meta.value);
  }
  const res = await op.commit();
  return res.ok ? { key: held.key, value, versionstamp: res.versionstamp } : null;
}

/**
 * Deletes the hold `hold` and its blob keys (unless it changed meanwhile); with `collectBlobs`,
 * then deletes the blobs nothing references any more, as a delete commit would have.
 */
async function dropHold(
  kv: Deno.Kv,
  t: Target,
  hold: Deno.KvEntry<RecordTakedown>,
  opts: { collectBlobs: boolean },
): Promise<void> {
  const op = kv.atomic().check(hold).delete(hold.key)
    .delete(recordTakedownCidKey(t.did, hold.value.cid, t.path));
  for (const cid of hold.value.blobs) op.delete(recordTakedownBlobKey(t.did, cid, t.path));
  await op.commit();
  if (opts.collectBlobs) await collectBlobs(kv, t.did, hold.value.blobs);
}

/**
 * Undoes a hold whose commit failed: puts back the version it replaced, if any, or drops it; then
 * deletes the blobs only it was held with and nothing else references.
 */
async function undoHold(
  kv: Deno.Kv,
  t: Target,
  hold: Deno.KvEntry<RecordTakedown>,
  replaced: RecordTakedown | undefined,
): Promise<void> {
  if (replaced === undefined) return await dropHold(kv, t, hold, { collectBlobs: true });
  const own = hold.value.blobs.filter((cid) => !replaced.blobs.includes(cid));
  const op = kv.atomic().check(hold).set(hold.key, replaced)
    .delete(recordTakedownCidKey(t.did, hold.value.cid, t.path))
    .set(recordTakedownCidKey(t.did, replaced.cid, t.path), true);
  for (const cid of own) op.delete(recordTakedownBlobKey(t.did, cid, t.path));
  await op.commit();
  await collectBlobs(kv, t.did, own);
}

/**
 * Deletes the blob keys at `t`'s path of blobs not in `keep` (a replaced version's), then the
 * blobs nothing references any more. One listing of the account's held blob keys.
 */
async function pruneBlobKeys(kv: Deno.Kv, t: Target, keep: string[]): Promise<void> {
  const gone: string[] = [];
  for await (const e of kv.list({ prefix: recordTakedownBlobPrefix(t.did) })) {
    const [, , cid, path] = e.key as string[];
    if (path === t.path && !keep.includes(cid)) gone.push(cid);
  }
  if (gone.length === 0) return;
  const op = kv.atomic();
  for (const cid of gone) op.delete(recordTakedownBlobKey(t.did, cid, t.path));
  await op.commit();
  await collectBlobs(kv, t.did, gone);
}

/** Deletes the blobs of `cids` that no record and no hold references (blob_gc.ts). */
async function collectBlobs(kv: Deno.Kv, did: string, cids: string[]): Promise<void> {
  if (cids.length === 0 || !await blobRefIndexBuilt(kv)) return;
  for (const cid of cids) await deleteBlobIfUnreferenced(kv, did, cid);
}

function recordExists(uri: string, cid: string): RecordTakedownError {
  return new RecordTakedownError(
    "RecordExists",
    `A record now exists at ${uri} (${cid}); delete it before restoring the held one`,
  );
}

/** The distinct blob CIDs a record block references. */
function blobsOf(collection: string, bytes: Uint8Array): string[] {
  try {
    return [...new Set(findBlobRefs(collection, decodeCbor(bytes)).map((b) => b.cid))];
  } catch {
    return [];
  }
}
