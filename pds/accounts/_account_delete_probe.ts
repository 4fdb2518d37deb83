/**
 * Test probe of `tests/account_delete_resume_test.ts`: deletes account `<did>` of the KV file
 * `<kv-path>` with {@link purgeAccount}, prints `done <step>` as each step is committed, and after
 * step `<stop-after>` prints `stopped` and waits for ever, so the test kills it (SIGKILL) at that
 * exact point.
 *
 * ```
 * deno run --allow-read --allow-write=<dir> _account_delete_probe.ts <kv-path> <did> <stop-after>
 * ```
 *
 * @module
 */

import { purgeAccount } from "./account_delete.ts";

const [kvPath, did, stopAfter] = Deno.args;
const kv = await Deno.openKv(kvPath);
await purgeAccount(kv, did, Date.now(), {
  onStep: async (done) => {
    console.log(`done ${done}`);
    if (done !== stopAfter) return;
    console.log("stopped");
    await new Promise(() => {}); // until killed
  },
});
console.log("finished");
kv.close();
