/**
 * Checking a fetched repository before anything of it is applied (docs/behaviour.md 6.2 rule 9):
 * the CAR is read strictly and bounded (`readCar`; every block the walk reads is hashed against
 * its CID), it has one root, the commit block at that root is a v3 commit of the account whose
 * signature verifies against the key of its DID document (`signed_commit.ts`), and the records
 * are what the signed tree holds (`walkMst`: every node read from the CAR, keys in strict
 * order). Only the collections the index indexes are decoded; each record is validated here, off
 * the write transaction (`RecordOp.checked`).
 *
 * @module
 */

import { CarError, readCar } from "../../../shared/car.ts";
import { decodeCbor } from "../../../shared/cbor.ts";
import { CODEC_DAG_CBOR, formatCid } from "../../../shared/cid.ts";
import { toLexJson } from "../../../shared/lex_json.ts";
import { MstProofError, walkMst } from "../../../shared/mst_lookup.ts";
import { SOCIAL_COLLECTIONS } from "../../../shared/nsid.ts";
import type { RecordOp } from "../../../shared/ops.ts";
import { validateRecord } from "../../../shared/records.ts";
import {
  CommitError,
  parseSignedCommit,
  verifyCommitSignature,
} from "../../../shared/signed_commit.ts";
import { isValidNsid, isValidRecordKey } from "../../../shared/syntax.ts";
import { RepoFetchError, type RepoLocation } from "./repo_source.ts";

/** Most records (of every collection) a repository may hold to be backfilled. */
export const MAX_REPO_RECORDS = 1_000_000;

const INDEXED: ReadonlySet<string> = new Set(SOCIAL_COLLECTIONS);

/** A repository that verified, with the records the index indexes. */
export interface VerifiedRepo {
  readonly did: string;
  readonly rev: string;
  /** CID of the signed commit. */
  readonly commit: string;
  /** Create ops of the indexed collections' records, in key order (collection, then rkey). */
  readonly records: readonly RecordOp[];
  /** Records of other collections (not indexed). */
  readonly otherRecords: number;
  /** Indexed records that fail validation (the write path skips and counts them). */
  readonly invalidRecords: number;
}

/**
 * Verifies `car` as the repository of `location.did` (module notes).
 *
 * @throws {RepoFetchError} (`invalid`) naming what does not verify
 */
export async function verifyRepo(
  car: Uint8Array,
  location: RepoLocation,
  opts: { maxBytes: number; maxRecords?: number },
): Promise<VerifiedRepo> {
  const { did } = location;
  const maxRecords = opts.maxRecords ?? MAX_REPO_RECORDS;
  let read;
  try {
    // Blocks: the records, their tree nodes, and the commit (about 2 per record).
    read = readCar(car, { maxSize: opts.maxBytes, maxBlocks: 3 * maxRecords + 16, verify: "lazy" });
  } catch (e) {
    throw invalid(`Repository of ${did} is not a readable CAR: ${messageOf(e)}`, e);
  }
  const { roots, blocks } = read;
  if (roots.length !== 1) invalidThrow(`Repository of ${did} has ${roots.length} roots, not 1`);
  const commitCid = formatCid(roots[0]);
  let commit;
  try {
    const bytes = blocks.get(commitCid);
    if (bytes === undefined) invalidThrow(`Repository of ${did} lacks its commit ${commitCid}`);
    commit = parseSignedCommit(bytes);
  } catch (e) {
    if (e instanceof CarError || e instanceof CommitError) {
      throw invalid(`Commit of ${did} is unusable: ${e.message}`, e);
    }
    throw e;
  }
  if (commit.did !== did) invalidThrow(`Commit is signed for ${commit.did}, not ${did}`);
  if (!await verifyCommitSignature(commit, location.key)) {
    invalidThrow(`Commit signature of ${did} does not verify against its DID document's key`);
  }
  const records: RecordOp[] = [];
  let otherRecords = 0;
  let invalidRecords = 0;
  try {
    for (const { key, value } of walkMst(blocks, commit.data, { maxEntries: maxRecords })) {
      const slash = key.indexOf("/");
      const collection = key.slice(0, slash);
      const rkey = key.slice(slash + 1);
      if (slash < 1 || !isValidNsid(collection) || !isValidRecordKey(rkey)) {
        invalidThrow(`Repository of ${did} holds an invalid key: ${key.slice(0, 100)}`);
      }
      if (!INDEXED.has(collection)) {
        otherRecords++;
        continue;
      }
      if (value.code !== CODEC_DAG_CBOR) invalidThrow(`Record ${key} of ${did} is not DAG-CBOR`);
      const cid = formatCid(value);
      const bytes = blocks.get(cid);
      if (bytes === undefined) invalidThrow(`Repository of ${did} lacks the record ${key}`);
      let record: unknown;
      try {
        record = toLexJson(decodeCbor(bytes));
      } catch (e) {
        throw invalid(`Record ${key} of ${did} is not valid DAG-CBOR: ${messageOf(e)}`, e);
      }
      if (typeof record !== "object" || record === null || Array.isArray(record)) {
        invalidThrow(`Record ${key} of ${did} is not a map`);
      }
      const checked = validateRecord(collection, record).ok;
      if (!checked) invalidRecords++;
      const op: RecordOp = {
        kind: "record",
        action: "create",
        did,
        collection,
        rkey,
        cid,
        record: record as Record<string, unknown>,
      };
      records.push(checked ? { ...op, checked: true } : op);
    }
  } catch (e) {
    if (e instanceof MstProofError || e instanceof CarError) {
      throw invalid(`Tree of ${did} does not verify: ${e.message}`, e);
    }
    throw e;
  }
  return { did, rev: commit.rev, commit: commitCid, records, otherRecords, invalidRecords };
}

function invalid(message: string, cause?: unknown): RepoFetchError {
  return new RepoFetchError("invalid", message, null, cause === undefined ? undefined : { cause });
}

function invalidThrow(message: string): never {
  throw invalid(message);
}

function messageOf(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
