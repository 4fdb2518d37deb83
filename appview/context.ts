/**
 * What every part of the index receives: configuration, the database, the one write path, the
 * logger and the clock. Built by `appview/server.ts` (or a test) and passed down; nothing opens
 * a store at import time.
 *
 * @module
 */

import type { DatabaseSync } from "node:sqlite";
import type { Logger } from "../shared/log.ts";
import type { AppviewConfig } from "./config.ts";
import type { AccountDirectory } from "./ingest/sources/account_directory.ts";
import type { IndexWriter } from "./ingest/apply_ops.ts";

/** Shared state of one index process. */
export interface AppviewContext {
  readonly config: AppviewConfig;
  readonly db: DatabaseSync;
  /** The single write path of spec 6.2 rule 3; every ingest source calls it. */
  readonly writer: IndexWriter;
  readonly log: Logger;
  /**
   * Keys and handles of the account host's accounts, against which pushes are verified. Absent:
   * the push endpoint asks the configured account host (tests give a table).
   */
  readonly accounts?: AccountDirectory;
  /** Clock (tests inject one). */
  now(): Date;
}
