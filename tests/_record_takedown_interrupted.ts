/**
 * Started by `record_takedown_crash_test.ts`: takes the record `uri` down (or restores it) on the
 * account host's store at `kvPath` and kills itself with SIGKILL between the two steps, after the
 * hold is stored (takedown) or after the commit (restore).
 *
 * Usage: `_record_takedown_interrupted.ts <kvPath> takedown|restore <uri>`
 *
 * @module
 */

import {
  restoreRecord,
  standaloneTakedownDeps,
  takeDownRecord,
} from "../pds/moderation/record_takedown.ts";

const [kvPath, action, uri] = Deno.args;
const kv = await Deno.openKv(kvPath);
const deps = standaloneTakedownDeps(kv);
const crash = () => {
  Deno.kill(Deno.pid, "SIGKILL");
  return new Promise<void>(() => {});
};
if (action === "takedown") await takeDownRecord(deps, uri, { reason: "spam", afterHold: crash });
else await restoreRecord(deps, uri, { afterRestoreCommit: crash });
console.error("the process was not killed");
Deno.exit(3);
