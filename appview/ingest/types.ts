/**
 * What the per-collection indexers share with the write path (`apply_ops.ts`).
 *
 * @module
 */

import type { RecordOp } from "../../shared/ops.ts";

/** A record op with its validated record (lex JSON form) and the indexing time. */
export interface PutInput {
  readonly op: RecordOp;
  /** `at://<did>/<collection>/<rkey>` of the record. */
  readonly uri: string;
  /** Record CID (present for creates and updates). */
  readonly cid: string;
  readonly value: Readonly<Record<string, unknown>>;
  /** Indexing time, ISO 8601. */
  readonly now: string;
}

/** A delete op with the URI of the record it removes. */
export interface RemoveInput {
  readonly op: RecordOp;
  readonly uri: string;
  readonly now: string;
}

/** The indexer of one collection. Runs inside the write path's transaction. */
export interface CollectionIndexer {
  /**
   * Creates or updates the record's rows. Returns null when applied, or the reason the record
   * cannot be indexed (counted as `invalid_record`).
   */
  put(input: PutInput): string | null;
  /** Removes the record's rows; a record that is not indexed is a no-op. */
  remove(input: RemoveInput): void;
}

/** Reads `value[key]` when it is a string. */
export function stringField(value: Readonly<Record<string, unknown>>, key: string): string | null {
  const v = value[key];
  return typeof v === "string" ? v : null;
}

/** Reads `value[key].uri` and `.cid` of a strong reference (validated by `validateRecord`). */
export function strongRef(
  value: unknown,
): { uri: string; cid: string } | null {
  if (typeof value !== "object" || value === null) return null;
  const ref = value as { uri?: unknown; cid?: unknown };
  return typeof ref.uri === "string" && typeof ref.cid === "string"
    ? { uri: ref.uri, cid: ref.cid }
    : null;
}
