/**
 * Repository compaction command line, working directly on the account host's KV store (the same
 * `PDS_KV_PATH` as the server, which may be running: every compaction step checks the
 * repository's root, and the server's writers and readers retry when it moved):
 *
 * ```
 * deno task compact            # every repository with garbage (or with no count yet)
 * deno task compact DID...     # these repositories, whatever their count
 * ```
 *
 * The account host compacts a repository on its own once its commits have left 5,000
 * unreachable blocks (`pds/repo/repository.ts`); this command is for reclaiming space at once,
 * for example in repositories written before the count existed. It prints one line per
 * repository compacted, then a total.
 *
 * The store must exist: a path without one fails saying where it looked (never creates one).
 *
 * Exit codes: 0 success, 1 failure (for example an unknown repository or no store), 2 bad
 * arguments.
 *
 * @module
 */

import { parseArgs } from "node:util";
import { isValidDid } from "../shared/syntax.ts";
import { silentLogger } from "../shared/log.ts";
import { loadPdsConfig } from "../pds/config.ts";
import { type CliIo, openStoreForCli, runCliMain } from "./_pds_store.ts";
import { RepoService } from "../pds/repo/repository.ts";
import type { RepoRoot } from "../pds/repo/repo_root.ts";
import { BlockStore } from "../pds/repo/block_store.ts";
import { Sequencer } from "../pds/sequencer/sequencer.ts";
import type { CompactionResult } from "../pds/repo/compaction.ts";
import { repoRootPrefix } from "../pds/store/keys.ts";

const USAGE = `Usage:
  compact            compact every repository with garbage
  compact <did>...   compact these repositories`;

/** Runs the command line; returns the exit code. Output goes to `out`/`err` (lines). */
export async function runCompactCli(
  args: string[],
  env: Record<string, string | undefined>,
  io: CliIo,
): Promise<number> {
  let dids: string[];
  try {
    dids = parseArgs({ args, options: {}, allowPositionals: true, strict: true }).positionals;
  } catch (e) {
    if (!(e instanceof TypeError)) throw e;
    io.err(`compact: ${e.message}`);
    io.err(USAGE);
    return 2;
  }
  const invalid = dids.find((did) => !isValidDid(did));
  if (invalid !== undefined) {
    io.err(`compact: not a DID: ${JSON.stringify(invalid)}`);
    io.err(USAGE);
    return 2;
  }
  const config = loadPdsConfig(env);
  const kv = await openStoreForCli("compact", io, config, {
    env,
    hint: "set DATA_DIR or PDS_KV_PATH to the account host's",
  });
  if (kv === null) return 1;
  try {
    const repo = new RepoService({
      kv,
      blocks: new BlockStore(kv),
      sequencer: new Sequencer(kv),
      log: silentLogger,
      now: Date.now,
      signingKey: () => Promise.resolve(null), // compaction signs nothing (and has no signer)
    });
    const targets = dids.length > 0 ? dids : await repositoriesWithGarbage(kv);
    let compacted = 0;
    let blocks = 0;
    let bytes = 0;
    let failed = 0;
    for (const did of targets) {
      const started = performance.now();
      let result = await repo.compact(did).catch((e: unknown) => e as Error);
      // A commit (or the server's own compaction) moved the root meanwhile: start again from it.
      for (let retry = 0; retry < MAX_RETRIES && result !== null && isIncomplete(result); retry++) {
        result = await repo.compact(did).catch((e: unknown) => e as Error);
      }
      if (result === null) {
        io.err(`compact: repository not found: ${did}`);
        failed++;
      } else if (result instanceof Error) {
        io.err(`compact: ${did}: ${result.message}`);
        failed++;
      } else if (!result.complete) {
        io.err(`compact: ${did}: the repository kept changing; run it again to finish`);
        failed++;
      } else {
        compacted++;
        blocks += result.blocksRemoved;
        bytes += result.bytesRemoved;
        const ms = Math.round(performance.now() - started);
        io.out(
          `${did}\tremoved ${result.blocksRemoved} blocks (${result.bytesRemoved} bytes)\t` +
            `kept ${result.blocksKept}\t${ms} ms`,
        );
      }
    }
    const noun = compacted === 1 ? "repository" : "repositories";
    io.out(`Compacted ${compacted} ${noun}: removed ${blocks} blocks (${bytes} bytes)`);
    return failed > 0 ? 1 : 0;
  } finally {
    kv.close();
  }
}

/** Compactions of one repository after the first, while its root keeps moving. */
const MAX_RETRIES = 2;

function isIncomplete(result: CompactionResult | Error): boolean {
  return !(result instanceof Error) && !result.complete;
}

/** DIDs of the repositories whose root counts garbage, or has no count yet (older roots). */
async function repositoriesWithGarbage(kv: Deno.Kv): Promise<string[]> {
  const out: string[] = [];
  for await (const entry of kv.list<RepoRoot>({ prefix: repoRootPrefix() })) {
    if (entry.value.garbage !== 0) out.push(String(entry.key[entry.key.length - 1]));
  }
  return out;
}

if (import.meta.main) await runCliMain("compact", runCompactCli);
