/**
 * Preparing the writes of one commit (docs/architecture.md 6.9): checks their shape, resolves
 * record keys, checks swaps, overlays profile updates (spec 4.1 rule 3), validates and encodes
 * the records, and finds the blobs they reference and the uploads they newly reference.
 *
 * A record of a collection with a schema (`app.social.*`, `hasRecordSchema`) is always validated
 * against it, whatever the `validate` flag says: the index relies on it. Any other collection
 * under a valid NSID is stored without it, as on the reference account host (docs/behaviour.md
 * 4.1 rule 14): `validationStatus` `"unknown"`, nothing with `validate: false`, and 400
 * `InvalidRequest` with `validate: true`. The data-model checks apply to every record: `$type`
 * equal to the collection, lex JSON the codec can encode (nesting, integers, links, bytes,
 * blobs), the size limit, and blob references that exist as uploaded.
 *
 * @module
 */

import { type CID, encodeBlock, formatCid } from "../../shared/cid.ts";
import type { TidGenerator } from "../../shared/tid.ts";
import { COLLECTION_PROFILE, PROFILE_RKEY } from "../../shared/nsid.ts";
import { checkRecordType, hasRecordSchema, validateRecord } from "../../shared/records.ts";
import { isValidNsid, isValidRecordKey } from "../../shared/syntax.ts";
import { formatAtUri } from "../../shared/at_uri.ts";
import { fromLexJsonObject, LexJsonError, toLexJson } from "../../shared/lex_json.ts";
import { decodeCbor } from "../../shared/cbor.ts";
import { repoRecordKey } from "../store/keys.ts";
import {
  checkBlobRefs,
  type CheckedBlob,
  findBlobRefs,
  type FoundBlob,
} from "../blobs/blob_refs.ts";
import type { KvBlockSource } from "./block_store.ts";
import type { Block, Mst } from "./mst.ts";
import { RepoError } from "./errors.ts";
import { MAX_BLOBS_PER_COMMIT, MAX_RECORD_BYTES } from "./commit_limits.ts";
import type { StoredRecord } from "./repo_root.ts";

/**
 * The caller's `validate` flag (lexicon validation): absent validates what has a schema here and
 * stores the rest as `"unknown"`; true refuses a collection without one; false asks for none
 * (records with a schema are validated all the same).
 */
export type ValidateFlag = boolean | undefined;

/** What a write's record was validated as; absent when the caller asked for no validation. */
export type ValidationStatus = "valid" | "unknown";

/** One write of {@link RepoService.applyWrites}; records are in lex JSON form. */
export type RepoWrite =
  | { action: "create"; collection: string; rkey?: string; record: unknown; validate?: boolean }
  | {
    action: "update";
    collection: string;
    rkey: string;
    record: unknown;
    /** Absent: no check; null: the record must not exist; a CID: the current record CID. */
    swapRecord?: string | null;
    validate?: boolean;
  }
  | { action: "delete"; collection: string; rkey: string; swapRecord?: string | null };

/** Outcome of one write. */
export interface WriteResult {
  action: "create" | "update" | "delete";
  uri: string;
  /** The record CID; null for deletes. */
  cid: string | null;
  /** Creates and updates: what the record was validated as (absent for `validate: false`). */
  validationStatus?: ValidationStatus;
}

/** One write as the commit applies it: its record encoded, its blob references resolved. */
export interface PreparedOp {
  action: "create" | "update" | "delete";
  collection: string;
  rkey: string;
  path: string;
  block: Block | null;
  prev: CID | null;
  /** The record as encoded (IPLD form), for in-process listeners of the commit (the push). */
  value: unknown;
  /** `block.cid` as a string (null for deletes), formatted once. */
  cid: string | null;
  /** Blobs the record references (empty for deletes). */
  blobs: FoundBlob[];
  /** Of those, the ones its previous version did not reference: checked against the uploads. */
  newBlobs: FoundBlob[];
  /** Blob CIDs whose reference by this record path the write adds and removes. */
  refs: BlobRefChanges;
}

/** The blob references (by CID) a write adds and removes for its record path. */
export interface BlobRefChanges {
  added: string[];
  removed: string[];
}

/** What {@link prepareWrites} reads: the repository's store, its current tree and record keys. */
export interface PrepareContext {
  kv: Deno.Kv;
  did: string;
  /** The repository's tree at the root the commit builds on. */
  tree: Mst;
  /** Its blocks (the previous version of a record when the index no longer holds it). */
  source: KvBlockSource;
  /** Record keys of creates without one. */
  tids: TidGenerator;
}

/** Resolves rkeys, checks swaps, overlays profiles, validates and encodes the records. */
export async function prepareWrites(
  writes: RepoWrite[],
  { kv, did, tree, source, tids }: PrepareContext,
): Promise<{ ops: PreparedOp[]; results: WriteResult[] }> {
  const ops: PreparedOp[] = [];
  const results: WriteResult[] = [];
  const seen = new Set<string>();
  for (const w of writes) {
    const isProfile = w.collection === COLLECTION_PROFILE;
    const rkey = w.rkey ?? (isProfile ? PROFILE_RKEY : tids.next());
    const path = `${w.collection}/${rkey}`;
    const uri = formatAtUri(did, w.collection, rkey);
    if (seen.has(path)) throw new RepoError("InvalidRequest", `Duplicate write to ${path}`);
    seen.add(path);
    const prev = await tree.get(path);
    if ("swapRecord" in w && w.swapRecord !== undefined) {
      const current = prev ? formatCid(prev) : null;
      if (current !== w.swapRecord) {
        throw new RepoError(
          "InvalidSwap",
          `Record ${path} was at ${current ?? "nothing"}, not ${w.swapRecord ?? "nothing"}`,
        );
      }
    }
    const stored = prev ? await readRecordValue(kv, did, source, w.collection, rkey, prev) : null;
    const storedBlobs = findBlobRefs(w.collection, stored);
    if (w.action === "delete") {
      results.push({ action: "delete", uri, cid: null });
      if (prev) {
        ops.push({
          action: "delete",
          collection: w.collection,
          rkey,
          path,
          block: null,
          prev,
          value: null,
          cid: null,
          blobs: [],
          newBlobs: [],
          refs: blobRefChanges([], storedBlobs),
        });
      }
      continue;
    }
    if (w.action === "create" && prev && !isProfile) {
      throw new RepoError("InvalidRequest", `Record already exists: ${uri}`);
    }
    let record = w.record as Record<string, unknown>;
    if (isProfile) {
      const current = stored === null ? null : toLexJson(stored) as Record<string, unknown>;
      record = overlayProfile(current, record);
    }
    const { block, value, validationStatus } = encodeRecord(w.collection, record, w.validate);
    const cid = formatCid(block.cid);
    results.push({
      action: prev ? "update" : "create",
      uri,
      cid,
      ...(validationStatus === undefined ? {} : { validationStatus }),
    });
    if (prev && prev.equals(block.cid)) continue;
    const blobs = findBlobRefs(w.collection, value);
    // A blob the previous version referenced alike is not checked again: the update of a
    // profile's description must not fail on the avatar it keeps.
    const kept = new Set(storedBlobs.map(blobIdentity));
    ops.push({
      action: prev ? "update" : "create",
      collection: w.collection,
      rkey,
      path,
      block,
      prev,
      value,
      cid,
      blobs,
      newBlobs: blobs.filter((b) => !kept.has(blobIdentity(b))),
      refs: blobRefChanges(blobs, storedBlobs),
    });
  }
  return { ops, results };
}

/** The uploads the commit's records newly reference, checked (`blob_refs.ts`). */
export async function checkNewBlobs(
  ops: PreparedOp[],
  { kv, did }: { kv: Deno.Kv; did: string },
): Promise<CheckedBlob[]> {
  const fresh = ops.flatMap((op) => op.newBlobs);
  if (fresh.length === 0) return [];
  const checked = await checkBlobRefs(kv, did, fresh);
  if (checked.size > MAX_BLOBS_PER_COMMIT) {
    throw new RepoError(
      "InvalidRequest",
      `Commit references ${checked.size} new blobs (at most ${MAX_BLOBS_PER_COMMIT})`,
    );
  }
  return [...checked.values()];
}

/** Refuses a write of the wrong shape (`InvalidRequest`, `InvalidRecord`) before it is queued. */
export function checkWriteShape(w: RepoWrite): void {
  if (w === null || typeof w !== "object") {
    throw new RepoError("InvalidRequest", "Write is not an object");
  }
  const action = (w as { action: unknown }).action;
  if (action !== "create" && action !== "update" && action !== "delete") {
    throw new RepoError("InvalidRequest", `Unknown write action: ${JSON.stringify(action)}`);
  }
  if (typeof w.collection !== "string" || !isValidNsid(w.collection)) {
    throw new RepoError("InvalidRequest", `Invalid collection: ${JSON.stringify(w.collection)}`);
  }
  if (w.action !== "create" || w.rkey !== undefined) {
    if (typeof w.rkey !== "string" || !isValidRecordKey(w.rkey)) {
      throw new RepoError("InvalidRequest", `Invalid record key: ${JSON.stringify(w.rkey)}`);
    }
  }
  if (w.collection === COLLECTION_PROFILE && w.rkey !== undefined && w.rkey !== PROFILE_RKEY) {
    throw new RepoError("InvalidRequest", `Profile record key must be self: ${w.rkey}`);
  }
  if (w.action !== "delete") {
    const r = w.record;
    if (r === null || typeof r !== "object" || Array.isArray(r)) {
      throw new RepoError("InvalidRecord", "Record is not an object");
    }
    if (w.validate !== undefined && typeof w.validate !== "boolean") {
      throw new RepoError("InvalidRequest", `Invalid validate: ${JSON.stringify(w.validate)}`);
    }
  }
}

/** The current version `prev` of a record (IPLD form); null when its block is gone. */
async function readRecordValue(
  kv: Deno.Kv,
  did: string,
  source: KvBlockSource,
  collection: string,
  rkey: string,
  prev: CID,
): Promise<unknown> {
  const stored = (await kv.get<StoredRecord>(repoRecordKey(did, collection, rkey))).value;
  const bytes = stored?.cid === formatCid(prev) ? stored.bytes : await source.getBlock(prev);
  return bytes ? decodeCbor(bytes) : null;
}

/**
 * Spec 4.1 rule 3: supplied fields replace the stored ones, omitted fields are kept, a field
 * sent as null is removed.
 */
function overlayProfile(
  stored: Record<string, unknown> | null,
  supplied: Record<string, unknown>,
): Record<string, unknown> {
  const merged: Record<string, unknown> = { ...stored };
  for (const [k, v] of Object.entries(supplied)) {
    if (v === null) delete merged[k];
    else merged[k] = v;
  }
  return merged;
}

/** What makes two references of a blob alike (the field too: moving it rechecks it). */
function blobIdentity(b: FoundBlob): string {
  return `${b.cid} ${b.mimeType} ${b.size} ${b.path}`;
}

/** The blob references a write adds and removes for its record path. */
function blobRefChanges(blobs: FoundBlob[], previous: FoundBlob[]): BlobRefChanges {
  const now = new Set(blobs.map((b) => b.cid));
  const before = new Set(previous.map((b) => b.cid));
  return {
    added: [...now].filter((cid) => !before.has(cid)),
    removed: [...before].filter((cid) => !now.has(cid)),
  };
}

/**
 * Validates a lex JSON record (against its schema when it has one), fills `$type`, and encodes
 * it as a block (with its value and what it was validated as).
 */
function encodeRecord(
  collection: string,
  record: Record<string, unknown>,
  validate: ValidateFlag,
): { block: Block; value: Record<string, unknown>; validationStatus?: ValidationStatus } {
  const validationStatus = validateLexicon(collection, record, validate);
  let value: Record<string, unknown>;
  try {
    value = fromLexJsonObject({ ...record, $type: collection });
  } catch (e) {
    if (e instanceof LexJsonError) throw new RepoError("InvalidRecord", e.message);
    throw e;
  }
  let block: Block;
  try {
    block = encodeBlock(value);
  } catch (e) {
    throw new RepoError("InvalidRecord", `Record cannot be encoded: ${(e as Error).message}`);
  }
  if (block.bytes.length > MAX_RECORD_BYTES) {
    throw new RepoError(
      "InvalidRecord",
      `Record is ${block.bytes.length} bytes, over the ${MAX_RECORD_BYTES} byte limit`,
    );
  }
  return { block, value, ...(validationStatus === undefined ? {} : { validationStatus }) };
}

/** The lexicon validation of one record as the `validate` flag asks (module comment). */
function validateLexicon(
  collection: string,
  record: Record<string, unknown>,
  validate: ValidateFlag,
): ValidationStatus | undefined {
  if (hasRecordSchema(collection)) {
    const checked = validateRecord(collection, record);
    if (!checked.ok) throw new RepoError("InvalidRecord", checked.reason);
    return "valid";
  }
  const wrongType = checkRecordType(collection, record);
  if (wrongType !== null) throw new RepoError("InvalidRecord", wrongType);
  // The reference host's words and error (InvalidRecordError answered as InvalidRequest).
  if (validate === true) {
    throw new RepoError("InvalidRequest", `Unknown lexicon type: ${collection}`);
  }
  return validate === false ? undefined : "unknown";
}
