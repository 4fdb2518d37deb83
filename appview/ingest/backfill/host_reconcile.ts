/**
 * Comparing the index with the account host's list of repositories (`listRepos`, paged), for a
 * restored account host (docs/behaviour.md 6.2 rule 10) and `deno task backfill --all` (rule 11):
 *
 * 1. Each page's accounts are applied as known, and as active or inactive as the listing says
 *    (`active`, `status`; the ops of an `#account` frame), in one transaction per page, so that
 *    notifications to any of them are made whichever repository is backfilled first.
 * 2. Each active repository whose rev differs from the stored one (or every one, with `all`) is
 *    queued for a backfill, with the listed rev as its target.
 * 3. Each repository the index holds as the account host's (`repo_revs.local`) that the listing
 *    does not name is queued too: the backfill finds it gone and removes it.
 *
 * The listed DIDs are kept in memory for step 3 (about 100 bytes each).
 *
 * @module
 */

import type { IndexOp } from "../../../shared/ops.ts";
import type { AppviewContext } from "../../context.ts";
import type { BackfillReason } from "../../db/backfill_state.ts";
import type { RepoSource } from "./repo_source.ts";

/** What a comparison found. */
export interface HostComparison {
  /** Repositories the host lists. */
  listed: number;
  /** Of those, inactive (taken down, deactivated, ...). */
  inactive: number;
  /** Repositories queued: listed ones to fetch, plus {@link vanished}. */
  queued: number;
  /** Repositories the index holds as the host's that it no longer lists. */
  vanished: number;
  /** Listing entries left out as malformed. */
  skipped: number;
}

/** Options of {@link compareWithHost}. */
export interface CompareOptions {
  /** Queue every active repository, not only those whose rev differs (a rebuild). */
  all: boolean;
  /** Reason the rows are queued with. */
  reason: BackfillReason;
  /** Due now even when a row waits for a backoff (the operator's task). */
  immediate?: boolean;
  signal?: AbortSignal;
  /** Called after each page. */
  onPage?: (listedSoFar: number) => void;
}

/** Compares the index with the host's listing and queues what differs (module notes). */
export async function compareWithHost(
  ctx: AppviewContext,
  source: RepoSource,
  opts: CompareOptions,
): Promise<HostComparison> {
  const { writer, state } = ctx.store;
  const queue = state.backfillQueue;
  const enqueue = (did: string, rev: string | null, at: string) =>
    opts.immediate
      ? queue.requestNow(did, opts.reason, rev, at)
      : queue.enqueue(did, opts.reason, rev, at);
  const listed = new Set<string>();
  const found: HostComparison = { listed: 0, inactive: 0, queued: 0, vanished: 0, skipped: 0 };
  let cursor: string | null = null;
  do {
    const page = await source.listRepos(cursor, opts.signal);
    found.skipped += page.skipped;
    const ops: IndexOp[] = [];
    for (const repo of page.repos) {
      listed.add(repo.did);
      ops.push({ kind: "account", did: repo.did });
      ops.push({ kind: "account_status", did: repo.did, active: repo.active, status: repo.status });
      if (!repo.active) found.inactive++;
    }
    await writer.applyOps(ops);
    const at = ctx.now().toISOString();
    for (const repo of page.repos) {
      if (!repo.active) continue;
      if (!opts.all && await writer.storedRev(repo.did) === repo.rev) continue;
      await enqueue(repo.did, opts.all ? null : repo.rev, at);
      found.queued++;
    }
    found.listed += page.repos.length;
    opts.onPage?.(found.listed);
    // A cursor that does not move would list the same page for good.
    cursor = page.cursor !== null && page.cursor !== cursor && page.repos.length > 0
      ? page.cursor
      : null;
  } while (cursor !== null);
  const at = ctx.now().toISOString();
  for await (const did of state.localRepoDids()) {
    if (listed.has(did)) continue;
    await enqueue(did, null, at);
    found.vanished++;
    found.queued++;
  }
  return found;
}
