/**
 * Every Deno KV key of the account host, built by small functions so that the key layout lives
 * in one place (docs/architecture.md 6.10). Keys are arrays; the first part names the table.
 *
 * @module
 */

import { utf8Length } from "../../shared/bytes.ts";

// ---------------------------------------------------------------------------------------------
// Accounts, handles, account signing keys (owner: accounts)
// ---------------------------------------------------------------------------------------------

/** `Account` record of a DID. */
export function accountKey(did: string): Deno.KvKey {
  return ["account", did];
}

/** Prefix of all accounts (listing). */
export function accountPrefix(): Deno.KvKey {
  return ["account"];
}

/** Handle index: normalised (lower-case) handle -> DID. */
export function handleKey(handle: string): Deno.KvKey {
  return ["handle", handle];
}

/** The account's own P-256 signing key pair (signs its repository commits). */
export function accountSigningKeyKey(did: string): Deno.KvKey {
  return ["account_key", did];
}

/**
 * The account's did:plc operation log (`PlcLog` of `accounts/plc.ts`: genesis, last operation
 * and its CID, whether a directory accepted it); accounts created before it was kept hold their
 * signed genesis operation alone.
 */
export function plcOpKey(did: string): Deno.KvKey {
  return ["plc_op", did];
}

/** The account host's did:plc rotation key pair (generated once, `accounts/plc.ts`). */
export function plcRotationKeyKey(): Deno.KvKey {
  return ["plc_rotation_key"];
}

// ---------------------------------------------------------------------------------------------
// Invite codes (owner: accounts)
// ---------------------------------------------------------------------------------------------

/** `InviteCode` record. */
export function inviteKey(code: string): Deno.KvKey {
  return ["invite", code];
}

/** Prefix of all invite codes (listing). */
export function invitePrefix(): Deno.KvKey {
  return ["invite"];
}

/** Redemption log entry: code -> DID (kept when the account goes away). */
export function inviteUseKey(code: string, did: string): Deno.KvKey {
  return ["invite_use", code, did];
}

/** Prefix of the redemption log of one code. */
export function inviteUsePrefix(code: string): Deno.KvKey {
  return ["invite_use", code];
}

// ---------------------------------------------------------------------------------------------
// Sessions (owner: accounts)
// ---------------------------------------------------------------------------------------------

/** Refresh token record by its `jti`. */
export function refreshTokenKey(jti: string): Deno.KvKey {
  return ["refresh_token", jti];
}

/** Login family (one login and every refresh token rotated from it). */
export function sessionFamilyKey(familyId: string): Deno.KvKey {
  return ["session_family", familyId];
}

/**
 * A password reset token by the SHA-256 (hex) of the token: `{did, expiresAt}`; deleted when
 * used (single use).
 */
export function passwordResetKey(tokenHash: string): Deno.KvKey {
  return ["password_reset", tokenHash];
}

/** The hash of an account's current password reset token (a new token replaces the old). */
export function passwordResetAccountKey(did: string): Deno.KvKey {
  return ["password_reset_account", did];
}

/**
 * The account's current deletion token (`requestAccountDelete`): `{hash, expiresAt}`, the token's
 * SHA-256 (hex); a new request replaces it, `deleteAccount` uses it up with the account.
 */
export function accountDeleteTokenKey(did: string): Deno.KvKey {
  return ["account_delete_token", did];
}

/**
 * An account deletion in progress (`accounts/account_delete.ts`): `{did, handle, startedAt,
 * remaining}`, written with the deletion's first atomic operation and deleted with its last key.
 */
export function accountDeletionKey(did: string): Deno.KvKey {
  return ["account_deletion", did];
}

/** Prefix of every account deletion in progress. */
export function accountDeletionPrefix(): Deno.KvKey {
  return ["account_deletion"];
}

/** An app password of an account by its name: `{id, name, passwordHash, createdAt}`. */
export function appPasswordKey(did: string, name: string): Deno.KvKey {
  return ["app_password", did, name];
}

/** Prefix of every app password of one account (listing, login). */
export function appPasswordPrefix(did: string): Deno.KvKey {
  return ["app_password", did];
}

// ---------------------------------------------------------------------------------------------
// Moderation reports (owner: moderation)
// ---------------------------------------------------------------------------------------------

/** A moderation report by its id (a number from {@link reportSeqKey}). */
export function reportKey(id: number): Deno.KvKey {
  return ["report", id];
}

/** Prefix of every report (listing, by id). */
export function reportPrefix(): Deno.KvKey {
  return ["report"];
}

/** The last report id given out (a number; checked by versionstamp). */
export function reportSeqKey(): Deno.KvKey {
  return ["report_seq"];
}

// ---------------------------------------------------------------------------------------------
// Record takedowns (owner: moderation)
// ---------------------------------------------------------------------------------------------

/**
 * A record the operator took down, held for its restore: `{uri, cid, bytes, reason?, createdAt,
 * blobs}` (`moderation/record_takedown.ts`).
 */
export function recordTakedownKey(did: string, collection: string, rkey: string): Deno.KvKey {
  return ["record_takedown", did, collection, rkey];
}

/** Prefix of the held records of one account, or of every account (listing). */
export function recordTakedownPrefix(did?: string): Deno.KvKey {
  return did === undefined ? ["record_takedown"] : ["record_takedown", did];
}

/**
 * Blob `cid` of `did` is referenced by the held record at `path` (`collection/rkey`): the blob
 * garbage collection keeps it (value `true`); `getBlob` does not count it as a reference.
 */
export function recordTakedownBlobKey(did: string, cid: string, path: string): Deno.KvKey {
  return ["record_takedown_blob", did, cid, path];
}

/**
 * The held record at `path` has CID `cid` (value `true`): `sync.getBlocks` does not serve that
 * block (a running host may hold it in a cache of the commit that wrote it).
 */
export function recordTakedownCidKey(did: string, cid: string, path: string): Deno.KvKey {
  return ["record_takedown_cid", did, cid, path];
}

/** Prefix of the CIDs of every held record of `did`. */
export function recordTakedownCidPrefix(did: string): Deno.KvKey {
  return ["record_takedown_cid", did];
}

/** Prefix of the held references of one blob, or (without `cid`) of every blob of `did`. */
export function recordTakedownBlobPrefix(did: string, cid?: string): Deno.KvKey {
  return cid === undefined ? ["record_takedown_blob", did] : ["record_takedown_blob", did, cid];
}

// ---------------------------------------------------------------------------------------------
// Repository, sequencer, blobs (owner: repository helper). Append keys below this line.
// ---------------------------------------------------------------------------------------------

// --- repository, sequencer, blobs ---

/** Repository root of an account: `{commitCid, rev, dataCid}` (checked by versionstamp). */
export function repoRootKey(did: string): Deno.KvKey {
  return ["repo_root", did];
}

/** Prefix of every repository root (`sync.listRepos`, ordered by DID). */
export function repoRootPrefix(): Deno.KvKey {
  return ["repo_root"];
}

/**
 * Chunk `chunk` of the blocks one commit wrote (the commit, its new MST nodes and records), as
 * CAR sections (`varint(len) || cid || bytes`) without a header, keyed by the commit's rev so
 * that a commit appends one value after the repository's previous ones.
 */
export function repoBlocksKey(did: string, rev: string, chunk: number): Deno.KvKey {
  return ["repo_blocks", did, rev, chunk];
}

/** Prefix of every chunk of the blocks of one commit. */
export function repoBlocksRevPrefix(did: string, rev: string): Deno.KvKey {
  return ["repo_blocks", did, rev];
}

/** Prefix of the blocks of every commit of one repository (ordered by rev). */
export function repoBlocksPrefix(did: string): Deno.KvKey {
  return ["repo_blocks", did];
}

/**
 * Record index entry: `collection/rkey` -> `{cid, rev, bytes}` (the record's CID string, the
 * rev of the commit that wrote it, and its block bytes).
 */
export function repoRecordKey(did: string, collection: string, rkey: string): Deno.KvKey {
  return ["repo_record", did, collection, rkey];
}

/** Prefix of the record index of one collection (`repo.listRecords`). */
export function repoRecordCollectionPrefix(did: string, collection: string): Deno.KvKey {
  return ["repo_record", did, collection];
}

/** Prefix of the whole record index of one repository. */
export function repoRecordPrefix(did: string): Deno.KvKey {
  return ["repo_record", did];
}

/** The last allocated stream sequence number (a number; checked by versionstamp). */
export function seqHeadKey(): Deno.KvKey {
  return ["seq_head"];
}

/** Chunk `chunk` of the stored event with sequence number `seq` (CBOR `#commit` body bytes). */
export function seqEventChunkKey(seq: number, chunk: number): Deno.KvKey {
  return ["seq_event", seq, chunk];
}

/** Prefix of every chunk of one stored event. */
export function seqEventKey(seq: number): Deno.KvKey {
  return ["seq_event", seq];
}

/** Prefix of every stored event (range reads by seq). */
export function seqEventPrefix(): Deno.KvKey {
  return ["seq_event"];
}

/** Blob metadata `{mimeType, size, chunks, createdAt}`; written after every chunk is stored. */
export function blobMetaKey(did: string, cid: string): Deno.KvKey {
  return ["blob", did, cid];
}

/** Chunk `index` of a blob's bytes. */
export function blobChunkKey(did: string, cid: string, index: number): Deno.KvKey {
  return ["blob_chunk", did, cid, index];
}

/** Prefix of every chunk of one blob. */
export function blobChunkPrefix(did: string, cid: string): Deno.KvKey {
  return ["blob_chunk", did, cid];
}

/**
 * Marker of an upload whose chunks take more than one atomic operation (`{createdAt}`): set with
 * the first chunks, deleted with the metadata, so the chunks of an upload interrupted in between
 * can be found and swept.
 */
export function blobUploadKey(did: string, cid: string): Deno.KvKey {
  return ["blob_upload", did, cid];
}

/** Prefix of every upload marker (the interrupted-upload sweep). */
export function blobUploadPrefix(): Deno.KvKey {
  return ["blob_upload"];
}

/** Prefix of the metadata of every blob of every account (the unreferenced-upload sweep). */
export function blobMetaPrefix(): Deno.KvKey {
  return ["blob"];
}

/**
 * One reference of a blob by a record (`collection/rkey` path) of its account: the blob is
 * deleted once its last reference goes (value `true`).
 */
export function blobRefKey(did: string, cid: string, path: string): Deno.KvKey {
  return ["blob_ref", did, cid, path];
}

/** Prefix of every reference of one blob. */
export function blobRefPrefix(did: string, cid: string): Deno.KvKey {
  return ["blob_ref", did, cid];
}

/**
 * Set once every record written before blob references were indexed has been indexed
 * (`{version, builtAt}`); until then no blob is deleted.
 */
export function blobRefIndexKey(): Deno.KvKey {
  return ["blob_ref_index"];
}

/** Prefix of the record index of every repository (the blob reference backfill). */
export function repoRecordAllPrefix(): Deno.KvKey {
  return ["repo_record"];
}

/**
 * About the encoded size of a KV key (strings' UTF-8 bytes plus two, numbers nine), for Deno
 * KV's limit on the key bytes of one atomic operation (81,920).
 */
export function kvKeyBytes(key: Deno.KvKey): number {
  let n = 0;
  for (const part of key) n += typeof part === "string" ? utf8Length(part) + 2 : 9;
  return n;
}
