// The container health check (issue 36 item 13): the Dockerfile's HEALTHCHECK command run as a
// real subprocess against a real account host and a real index health route on port 0, and the
// build context the .dockerignore leaves.

import assert from "node:assert/strict";
import { healthRoutes } from "../appview/api/health.ts";
import { CONSUMER_LOCAL, writeConsumerStatus } from "../appview/db/state.ts";
import { openTestContext } from "../appview/_test_helpers.ts";
import { startTestServer } from "../pds/_test_helpers.ts";
import { REPO_ROOT } from "../tests/_util.ts";
import { healthUrls, taskFromCmdline } from "./healthcheck.ts";

/** The exec form of the Dockerfile's `HEALTHCHECK ... CMD [...]`. */
async function dockerHealthcheck(): Promise<string[]> {
  const dockerfile = await Deno.readTextFile(new URL("Dockerfile", REPO_ROOT));
  const joined = dockerfile.replace(/\\\n\s*/g, " ");
  const line = joined.split("\n").find((l) => l.startsWith("HEALTHCHECK "));
  assert.ok(line, "the Dockerfile has a HEALTHCHECK");
  return JSON.parse(line.slice(line.indexOf(" CMD ") + 5));
}

async function runHealthcheck(component: string, env: Record<string, string>) {
  const [command, ...args] = await dockerHealthcheck();
  assert.equal(command, "deno");
  const out = await new Deno.Command(Deno.execPath(), {
    args: [...args, component],
    cwd: REPO_ROOT.pathname,
    env,
    clearEnv: true,
    stdout: "piped",
    stderr: "piped",
  }).output();
  return { code: out.code, stderr: new TextDecoder().decode(out.stderr) };
}

Deno.test("the Dockerfile HEALTHCHECK passes while both servers answer 200 and fails naming the one that does not (issue 36)", async () => {
  await using pds = await startTestServer();
  const now = Date.parse("2024-06-01T00:00:00.000Z");
  using ctx = openTestContext({ now: () => new Date(now) });
  await using index = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    healthRoutes(ctx).fetch,
  );
  const env = {
    PDS_HOSTNAME: "0.0.0.0",
    PDS_PORT: new URL(pds.url).port,
    APPVIEW_HOSTNAME: "127.0.0.1",
    APPVIEW_PORT: String(index.addr.port),
  };
  const indexUrl = `http://127.0.0.1:${index.addr.port}/healthz`;
  for (const component of ["dev", "pds", "appview"]) {
    assert.deepEqual(await runHealthcheck(component, env), { code: 0, stderr: "" }, component);
  }
  // A consumer whose status row stopped updating: the index answers 503.
  writeConsumerStatus(ctx.db, {
    name: CONSUMER_LOCAL,
    state: "live",
    cursor: 1,
    lastEventAt: null,
    lastError: null,
    updatedAt: new Date(now - 60_000).toISOString(),
  });
  assert.deepEqual(await runHealthcheck("dev", env), {
    code: 1,
    stderr: `healthcheck: ${indexUrl} answered 503\n`,
  });
  assert.deepEqual(await runHealthcheck("pds", env), { code: 0, stderr: "" });
  const closed = await runHealthcheck("pds", { ...env, PDS_PORT: "1" });
  assert.equal(closed.code, 1);
  assert.match(
    closed.stderr,
    /^healthcheck: http:\/\/127\.0\.0\.1:1\/xrpc\/_health did not answer: /,
  );
  assert.deepEqual(await runHealthcheck("consumer:local", env), { code: 0, stderr: "" });
  assert.deepEqual(await runHealthcheck("nonsense", env), {
    code: 1,
    stderr: 'healthcheck: unknown component "nonsense"\n',
  });
});

Deno.test("healthcheck finds the task of process 1 and the servers it runs", () => {
  assert.equal(taskFromCmdline("deno\0task\0pds\0"), "pds");
  assert.equal(
    taskFromCmdline("/sbin/docker-init\0--\0deno\0task\0consumer:local\0"),
    "consumer:local",
  );
  assert.equal(taskFromCmdline("deno\0run\0pds/main.ts\0"), null);
  assert.equal(taskFromCmdline("deno\0task\0"), null);
  assert.deepEqual(healthUrls("dev", {}), [
    "http://127.0.0.1:2583/xrpc/_health",
    "http://127.0.0.1:3000/healthz",
  ]);
  assert.deepEqual(healthUrls("appview", { APPVIEW_HOSTNAME: "::", APPVIEW_PORT: "8080" }), [
    "http://[::1]:8080/healthz",
  ]);
  assert.deepEqual(healthUrls("pds", { PDS_HOSTNAME: "10.0.0.5" }), [
    "http://10.0.0.5:2583/xrpc/_health",
  ]);
  assert.deepEqual(healthUrls("handle-sync", {}), []);
  assert.equal(healthUrls("toString", {}), null);
});

Deno.test(".dockerignore keeps data and secrets, history and build output out of the build context, and none of what the image copies (issue 36)", async () => {
  const ignore = await Deno.readTextFile(new URL(".dockerignore", REPO_ROOT));
  const patterns = ignore.split("\n").map((l) => l.trim()).filter((l) => l && !l.startsWith("#"));
  for (const required of ["data", ".git", "web/dist", "screenshots", ".ci/.deno"]) {
    assert.ok(patterns.includes(required), `.dockerignore lists ${required}`);
  }
  const dockerfile = await Deno.readTextFile(new URL("Dockerfile", REPO_ROOT));
  const copied = [...dockerfile.matchAll(/^COPY (.+) \S+$/gm)].flatMap((m) => m[1].split(" "));
  assert.ok(copied.includes("shared/"));
  for (const source of copied) {
    const path = source.replace(/\/$/, "");
    for (const pattern of patterns) {
      assert.ok(path !== pattern && !path.startsWith(`${pattern}/`), `${pattern} hides ${source}`);
    }
  }
});
