/**
 * Counting skipped ops by reason: in memory per transaction, flushed to `ingest_skips` inside the
 * same transaction (so a rolled-back batch counts nothing), and added to the writer's totals
 * after COMMIT.
 *
 * @module
 */

import type { DatabaseSync, StatementSync } from "node:sqlite";
import type { IndexOp } from "../../shared/ops.ts";

/** Why an op was skipped. */
export type SkipReason =
  | "invalid_op"
  | "invalid_record"
  | "unsupported_collection"
  | "apply_error"
  | "handle_conflict";

/** `ingest_skips.collection` of ops whose collection the index does not handle. */
export const OTHER_COLLECTION = "*";
/** `ingest_skips.collection` of handle ops. */
export const HANDLE_COLLECTION = "#handle";
const MAX_DETAIL_LENGTH = 500;

interface Entry {
  reason: SkipReason;
  collection: string;
  count: number;
  detail: string;
  uri: string | null;
}

/** Per-transaction skip counts. */
export class SkipTally {
  readonly #upsert: StatementSync;
  readonly #known: ReadonlyMap<string, unknown>;
  #entries = new Map<string, Entry>();
  #flushed: Entry[] = [];

  constructor(db: DatabaseSync, knownCollections: ReadonlyMap<string, unknown>) {
    this.#upsert = db.prepare(
      `INSERT INTO ingest_skips (reason, collection, count, last_detail, last_uri, updated_at)
       VALUES (?, ?, ?, ?, ?, ?)
       ON CONFLICT (reason, collection) DO UPDATE SET count = count + excluded.count,
         last_detail = excluded.last_detail, last_uri = excluded.last_uri,
         updated_at = excluded.updated_at`,
    );
    this.#known = knownCollections;
  }

  /** Counts one skipped op. */
  add(reason: SkipReason, op: IndexOp, detail: string): void {
    const collection = op.kind !== "record"
      ? HANDLE_COLLECTION
      : this.#known.has(op.collection)
      ? op.collection
      : OTHER_COLLECTION;
    const key = `${reason} ${collection}`;
    const uri = op.kind !== "record" ? null : `at://${op.did}/${op.collection}/${op.rkey}`;
    const entry = this.#entries.get(key);
    const shortDetail = detail.slice(0, MAX_DETAIL_LENGTH);
    if (entry === undefined) {
      this.#entries.set(key, { reason, collection, count: 1, detail: shortDetail, uri });
    } else {
      entry.count++;
      entry.detail = shortDetail;
      entry.uri = uri;
    }
  }

  /** Writes the counts of this transaction to `ingest_skips` (call inside the transaction). */
  flush(now: string): void {
    for (const e of this.#entries.values()) {
      this.#upsert.run(
        e.reason,
        e.collection,
        e.count,
        e.detail,
        e.uri === null ? null : e.uri.slice(0, 1000),
        now,
      );
    }
    this.#flushed = [...this.#entries.values()];
    this.#entries.clear();
  }

  /** Forgets the counts of a rolled-back transaction. */
  discard(): void {
    this.#entries.clear();
    this.#flushed = [];
  }

  /** Adds the counts of the committed transaction to `totals`. */
  addTo(totals: Record<SkipReason, number>): void {
    for (const e of this.#flushed) totals[e.reason] += e.count;
    this.#flushed = [];
  }
}
