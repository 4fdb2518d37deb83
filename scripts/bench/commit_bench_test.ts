/**
 * The commit benchmark's reading of the machine's busy time (docs/behaviour.md 12: the p99 budget
 * of createRecord assumes the host has the box's cores).
 */

import assert from "node:assert/strict";
import { procStatBusyMs } from "./commit_bench.ts";

Deno.test("the machine's busy time is user, nice, system, irq, softirq and steal of the cpu line", () => {
  const stat = [
    "cpu  1198293 7 321594 3116901 57090 11 42676 948 5 0",
    "cpu0 599146 3 160797 1558450 28545 5 21338 474 0 0",
    "intr 1 2 3",
  ].join("\n");
  // (1198293 + 7 + 321594 + 11 + 42676 + 948) ticks of 10 ms; idle, iowait and guest are not.
  assert.equal(procStatBusyMs(stat), 15_635_290);
});

Deno.test("text without a whole cpu line gives no busy time", () => {
  assert.equal(procStatBusyMs(""), null);
  assert.equal(procStatBusyMs("cpu0 1 2 3 4 5 6 7 8 9 10\n"), null);
  assert.equal(procStatBusyMs("cpu  1 2 3 4\n"), null);
  assert.equal(procStatBusyMs("cpu  1 2 3 4 5 6 x 8\n"), null);
});
