/**
 * The stored forms of a repository's state in KV: its root (`repoRootKey`) and its record index
 * entries (`repoRecordKey`), as the write path writes them and the readers read them.
 *
 * @module
 */

import type { CID } from "../../shared/cid.ts";

/** Stored value of a record index entry (`repoRecordKey`). */
export interface StoredRecord {
  /** The record CID string. */
  cid: string;
  /** Rev of the commit that wrote it. */
  rev: string;
  /** The record block. */
  bytes: Uint8Array;
}

/** The stored root of a repository. */
export interface RepoRoot {
  commitCid: string;
  rev: string;
  dataCid: string;
  /**
   * Unreachable blocks the commits left since the last compaction (replaced MST nodes, the
   * previous commits, replaced and deleted records), counted by each commit; absent in roots
   * written before it was counted.
   */
  garbage?: number;
  /** Blocks the last compaction kept (absent before the first). */
  kept?: number;
}

/** A root as the write path holds it: with the versionstamp it was read at. */
export interface LoadedRoot extends RepoRoot {
  versionstamp: string;
  /** `dataCid` parsed. */
  data: CID;
}
