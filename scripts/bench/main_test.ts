/**
 * The benchmark processes run as the server tasks do (spec 4.1 and 6.3 budgets, docs/behaviour.md
 * 12): with the same V8 flags, and with the bench task's permissions.
 */

import assert from "node:assert/strict";
import { CHILD_PERMISSIONS, childArgs, SERVER_V8_FLAGS } from "./main.ts";
import { taskCommand, taskPermissionSet } from "../../tests/_util.ts";

const config = JSON.parse(await Deno.readTextFile(new URL("../../deno.json", import.meta.url)));
const SERVER_TASKS = ["dev", "pds", "appview", "consumer:local", "consumer:public", "handle-sync"];

Deno.test("every server task runs V8 with the flags the benchmarks run with", () => {
  assert.deepEqual(SERVER_V8_FLAGS, [
    "--v8-flags=--no-concurrent-marking,--initial-old-space-size=256",
  ]);
  for (const task of [...SERVER_TASKS, "compile:pds"]) {
    const words: string[] = taskCommand(config.tasks, task).split(" ");
    const script = words.findIndex((w) => w.endsWith(".ts"));
    for (const flag of SERVER_V8_FLAGS) {
      const at = words.indexOf(flag);
      assert.ok(at > 0 && at < script, `task ${task} has ${flag} before its script`);
    }
  }
});

Deno.test("a benchmark process gets the server V8 flags and the bench task's permissions", () => {
  const args = childArgs("commits");
  // Before the script: after it, deno would hand the flag to the script instead of V8.
  const script = args.findIndex((a) => a.endsWith("/scripts/bench/main.ts"));
  assert.ok(script > 0);
  for (const flag of SERVER_V8_FLAGS) {
    const at = args.indexOf(flag);
    assert.ok(at > 0 && at < script, `${flag} comes before the script`);
  }
  const benchTask: string[] = taskCommand(config.tasks, "bench").split(" ");
  const taskPermissions = benchTask.filter((w) => w.startsWith("--allow-") || w.startsWith("-P="));
  assert.deepEqual([...CHILD_PERMISSIONS], taskPermissions);
  // The set is defined (deno would stop the benchmark process otherwise).
  assert.equal(taskPermissionSet(config, "bench").flag, CHILD_PERMISSIONS[0]);
  for (const flag of CHILD_PERMISSIONS) {
    const at = args.indexOf(flag);
    assert.ok(at > 0 && at < script, `${flag} comes before the script`);
  }
  assert.deepEqual(args.slice(-2), ["--child", "commits"]);
});

Deno.test("V8 accepts the server flags (a misspelt flag stops deno before the program)", async () => {
  const probe = await Deno.makeTempFile({ suffix: ".ts" });
  try {
    await Deno.writeTextFile(probe, 'console.log("started");\n');
    const run = (flags: readonly string[]) =>
      new Deno.Command(Deno.execPath(), {
        args: ["run", "--no-config", ...flags, probe],
        stdout: "piped",
        stderr: "piped",
      }).output();
    const ok = await run(SERVER_V8_FLAGS);
    assert.equal(ok.code, 0, new TextDecoder().decode(ok.stderr));
    assert.equal(new TextDecoder().decode(ok.stdout), "started\n");
    const bad = await run(["--v8-flags=--no-concurrent-markingg"]);
    assert.equal(bad.code, 1);
    assert.match(new TextDecoder().decode(bad.stderr), /did not recognize flag/);
  } finally {
    await Deno.remove(probe);
  }
});
