/**
 * The tasks' permissions (docs/operations.md, "Task permissions"): written once, as the permission
 * sets of `deno.json`, and named by each task with `-P=<set>`.
 */

import assert from "node:assert/strict";
import { baseEnv, makeTempDir, REPO_ROOT, taskCommand, taskPermissionSet } from "./_util.ts";

const CONFIG_PATH = new URL("deno.json", REPO_ROOT).pathname;
const config = JSON.parse(await Deno.readTextFile(CONFIG_PATH));
const ENV = ["DATA_DIR", "LOG_LEVEL", "PDS_*", "APPVIEW_*"];

Deno.test("every task that runs deno names a permission set and repeats no permission flag", () => {
  const used = new Set<string>();
  for (const name of Object.keys(config.tasks)) {
    if (name === "check") continue; // fmt, lint and check need no permissions
    for (const step of taskCommand(config.tasks, name).split(" && ")) {
      if (step.startsWith("deno bundle ")) continue; // web:build's first step runs no program
      const words = step.split(" ");
      assert.deepEqual(words.filter((w) => w.startsWith("--allow-") || w === "-A"), [], step);
    }
    used.add(taskPermissionSet(config, name).name);
  }
  // No set is left over.
  assert.deepEqual([...used].sort(), Object.keys(config.permissions).sort());
});

Deno.test("the server and store tasks read only their variables and write only ./data", () => {
  for (const task of ["pds", "invite", "admin", "compact"]) {
    const { grants } = taskPermissionSet(config, task);
    assert.deepEqual(grants.env, ENV, task);
    assert.deepEqual(grants.write, ["./data"], task);
  }
  // The tasks that open the index also read the libpq variables (PGPASSWORD, PGHOST, ...): the
  // PostgreSQL driver reads them for what APPVIEW_DATABASE_URL leaves out (docs/operations.md,
  // "Running the index on PostgreSQL"). demo shares the consumers' set.
  for (const task of ["consumer:local", "consumer:public", "demo"]) {
    const { grants } = taskPermissionSet(config, task);
    assert.deepEqual(grants.env, [...ENV, "PG*"], task);
    assert.deepEqual(grants.write, ["./data"], task);
  }
  // The index's outbound TLS reads NODE_USE_SYSTEM_CA and the system's certificate settings.
  // backfill fetches repositories as handle sync fetches documents (docs/behaviour.md 6.2 rule 11).
  for (const task of ["dev", "appview", "handle-sync", "backfill"]) {
    const { grants } = taskPermissionSet(config, task);
    assert.deepEqual(grants.env, ["NODE_USE_SYSTEM_CA", ...ENV, "PG*"], task);
    assert.deepEqual(grants.write, ["./data"], task);
    assert.equal(grants.sys, true, task);
  }
  assert.deepEqual(taskPermissionSet(config, "web:build").grants, {
    read: ["web"],
    write: ["web/dist"],
  });
});

Deno.test("under a task's set, a variable the set does not name is refused (NotCapable)", async () => {
  await using dir = await makeTempDir();
  const script = `${dir.path}/probe.ts`;
  await Deno.writeTextFile(
    script,
    `const read = (name: string) => { try { Deno.env.get(name); return "ok"; } catch (e) { return (e as Error).name; } };
console.log(JSON.stringify([read("PDS_PORT"), read("DATA_DIR"), read("HOME")]));
`,
  );
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--quiet",
      `--config=${CONFIG_PATH}`,
      taskPermissionSet(config, "pds").flag,
      script,
    ],
    env: { ...baseEnv(), PDS_PORT: "1", DATA_DIR: dir.path },
    clearEnv: true,
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
  assert.deepEqual(JSON.parse(new TextDecoder().decode(out.stdout)), ["ok", "ok", "NotCapable"]);
});
