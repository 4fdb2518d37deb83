/**
 * The newcomer's first minute: `deno task dev` with zero configuration (fresh data directory,
 * generated secrets) and `deno task demo` against it, both as real subprocesses; the demo's
 * output shows the timeline, the thread and the notifications, and Ctrl-C (SIGINT) stops dev
 * cleanly.
 */

import assert from "node:assert/strict";
import { baseEnv, freePort, REPO_ROOT, waitFor } from "./_util.ts";

async function readAll(stream: ReadableStream<Uint8Array>, sink: string[]): Promise<void> {
  const decoder = new TextDecoderStream();
  for await (const chunk of stream.pipeThrough(decoder)) sink.push(chunk);
}

/** What deno prints (stderr) when a program runs with a permission set from deno.json. */
const PERMISSION_SETS_NOTICE =
  "Warning Permissions in the config file is an experimental feature and may change in the future.";

/** `deno task <task>` in the repository with only `env` (and the pass-through variables). */
function task(name: string, env: Record<string, string>): Deno.Command {
  return new Deno.Command(Deno.execPath(), {
    args: ["task", name],
    cwd: REPO_ROOT.pathname,
    clearEnv: true,
    env: { ...baseEnv(), ...env },
    stdout: "piped",
    stderr: "piped",
  });
}

/** Spawns `deno task dev` and waits until it runs; `out` collects stdout and stderr. */
async function startDev(env: Record<string, string>) {
  const dev = task("dev", env).spawn();
  const out: string[] = [];
  const reading = Promise.all([readAll(dev.stdout, out), readAll(dev.stderr, out)]);
  try {
    await waitFor(() => out.join("").includes('"msg":"dev is running"'), {
      timeoutMs: 30_000,
      message: "dev started",
    });
  } catch (err) {
    dev.kill("SIGKILL");
    await dev.status;
    await reading;
    throw err;
  }
  return { dev, out, reading };
}

Deno.test("deno task demo runs against deno task dev started with zero configuration", async () => {
  const dataDir = `./data/test-dev-${crypto.randomUUID().slice(0, 8)}`;
  const pdsPort = freePort();
  const appviewPort = freePort();
  // Only the ports differ from the defaults (the common way to dodge a busy port): dev wires
  // the two halves to each other and demo finds them from the same two variables.
  const ports = { PDS_PORT: String(pdsPort), APPVIEW_PORT: String(appviewPort) };
  const cwd = REPO_ROOT.pathname;
  const { dev, out: devOut, reading } = await startDev({ ...ports, DATA_DIR: dataDir });
  try {
    const log = devOut.join("");
    // Zero configuration: development secrets generated into DATA_DIR, with warnings.
    assert.match(log, /PDS_JWT_SECRET is not set: using a generated development secret/);
    assert.match(log, /APPVIEW_INGEST_SECRET is not set: using a generated development secret/);
    assert.ok((await Deno.stat(`${cwd}${dataDir.slice(2)}/pds_jwt_secret`)).isFile);

    const demo = await task("demo", ports).output();
    const out = new TextDecoder().decode(demo.stdout);
    assert.equal(demo.code, 0, `demo failed:\n${out}\n${new TextDecoder().decode(demo.stderr)}`);
    const lines = out.trim().split("\n");
    const handle = (name: string) => lines[0].match(new RegExp(`@(${name}-[a-z0-9]+\\.test)`))![1];
    const [alice, bob, carol] = [handle("alice"), handle("bob"), handle("carol")];
    assert.match(lines[0], /^created accounts: /);
    const timelineAt = lines.indexOf(`home timeline of @${bob}:`);
    assert.ok(timelineAt > 0, out);
    assert.match(lines[timelineAt + 1], new RegExp(`^  @${alice}: Hello from the demo `));
    const threadAt = lines.indexOf("thread:");
    assert.match(lines[threadAt + 1], new RegExp(`^  @${alice}: Hello from the demo `));
    assert.equal(lines[threadAt + 2], "    likes 1, reposts 1");
    assert.equal(lines[threadAt + 3], `    reply: @${bob}: Welcome, Alice!`);
    const notesAt = lines.findIndex((l) => l.startsWith(`notifications of @${alice} (`));
    assert.equal(lines[notesAt], `notifications of @${alice} (5 unread):`);
    const notes = lines.slice(notesAt + 1, notesAt + 6).sort();
    assert.deepEqual(
      notes,
      [
        `  follow from @${bob}`,
        `  follow from @${carol}`,
        `  like from @${carol}: "${lines[timelineAt + 1].split(": ")[1]}"`,
        `  reply from @${bob}: "Welcome, Alice!"`,
        `  repost from @${bob}: "${lines[timelineAt + 1].split(": ")[1]}"`,
      ].sort(),
    );
    assert.equal(lines.at(-1), "marked 5 notifications read");

    // A chunked body (no Content-Length) on the query API: once, Deno printed a plain-text
    // "request.signal ... legacy behavior" warning into the JSON log when it was re-wrapped.
    const chunked = await fetch(`http://localhost:${appviewPort}/api/notifications/seen`, {
      method: "POST",
      body: ReadableStream.from([new TextEncoder().encode("{}")]),
    });
    assert.equal(chunked.status, 401);
    await chunked.body?.cancel();
  } finally {
    dev.kill("SIGINT");
    const status = await dev.status;
    await reading;
    await Deno.remove(`${cwd}${dataDir.slice(2)}`, { recursive: true }).catch(() => {});
    assert.equal(status.code, 0, `dev exit:\n${devOut.join("").slice(-2000)}`);
  }
  assert.match(devOut.join(""), /"msg":"shutting down"/);
  // Before the log: `deno task`'s banners, deno's notice that permission sets (deno.json
  // `permissions`, `-P`) are experimental, and the web app's build line; in it, one plain line
  // with the address to open; every other line is one JSON log record.
  const text = devOut.join("");
  assert.match(text, new RegExp(`\n {2}Open http://localhost:${appviewPort} and sign up\\.\n`));
  assert.match(
    text,
    /^web: built web\/dist \(app-[0-9a-f]{12}\.js \d+ bytes, app-[0-9a-f]{12}\.css \d+ bytes\)$/m,
  );
  const logLines = text.split("\n").filter((l) =>
    l !== "" && !l.startsWith("Task ") && l !== PERMISSION_SETS_NOTICE &&
    !l.startsWith("web: built ") && !l.startsWith("  Open ")
  );
  for (const line of logLines) assert.doesNotThrow(() => JSON.parse(line), line);
});

Deno.test("deno task dev names a bad APPVIEW_PORT; with APPVIEW_PORT=0 it turns the push off", async () => {
  const cwd = REPO_ROOT.pathname;
  const dataDir = `./data/test-dev-${crypto.randomUUID().slice(0, 8)}`;
  try {
    const bad = await task("dev", { DATA_DIR: dataDir, PDS_PORT: "0", APPVIEW_PORT: "70000" })
      .output();
    assert.equal(bad.code, 1);
    assert.match(
      new TextDecoder().decode(bad.stderr),
      /APPVIEW_PORT must be a port number from 0 to 65535, got 70000/,
    );

    const { dev, out, reading } = await startDev({
      DATA_DIR: dataDir,
      PDS_PORT: "0",
      APPVIEW_PORT: "0",
    });
    try {
      assert.match(out.join(""), /APPVIEW_PORT is 0: push to the index is off/);
    } finally {
      dev.kill("SIGINT");
      assert.equal((await dev.status).code, 0);
      await reading;
    }
  } finally {
    await Deno.remove(`${cwd}${dataDir.slice(2)}`, { recursive: true }).catch(() => {});
  }
});
