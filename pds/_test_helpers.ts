/**
 * Test helpers for the account host: a context on a real KV file in a temp dir (for
 * `app.request()` tests) and a real server on port 0. Everything is closed on dispose.
 *
 * @module
 */

import type { Hono } from "hono";
import { captureLogger, makeTempDir } from "../runtime/_test_helpers.ts";
import { createPdsApp } from "./app.ts";
import { loadPdsConfig, type RawEnv } from "./config.ts";
import type { PdsContext, PdsEnv, PdsHooks } from "./context.ts";
import { createPdsContext, type RunningPds, startPds } from "./server.ts";
import { BlockStore } from "./repo/block_store.ts";
import { Sequencer } from "./sequencer/sequencer.ts";

export {
  captureLogger,
  kvRowsInMainFile,
  ManualClock,
  offsetClock,
} from "../runtime/_test_helpers.ts";

/** The JWT secret of test servers. */
export const TEST_JWT_SECRET = "test-secret-0123456789abcdef";
/** Base environment of test servers. */
export const TEST_ENV: RawEnv = {
  PDS_JWT_SECRET: TEST_JWT_SECRET,
  PDS_PUBLIC_URL: "http://localhost:2583",
  APPVIEW_PUBLIC_URL: "http://localhost:3000",
  PDS_HANDLE_DOMAINS: ".test",
  // No index runs in these tests: never push commits to one.
  APPVIEW_INTERNAL_URL: "off",
};

/** An in-process account host on a temporary KV file. */
export interface TestApp extends AsyncDisposable {
  ctx: PdsContext;
  app: Hono<PdsEnv>;
  lines: string[];
  kvPath: string;
}

/** Creates a context and app on a fresh KV file (env merged over {@link TEST_ENV}). */
export async function createTestApp(
  opts: { env?: RawEnv; now?: () => number; hooks?: PdsHooks } = {},
): Promise<TestApp> {
  const dir = await makeTempDir("pds-test-");
  const kvPath = `${dir.path}/pds.kv`;
  const config = loadPdsConfig({ ...TEST_ENV, DATA_DIR: dir.path, ...opts.env });
  const kv = await Deno.openKv(kvPath);
  const { log, lines } = captureLogger("pds");
  const ctx = await createPdsContext({ config, kv, log, now: opts.now, hooks: opts.hooks });
  return {
    ctx,
    app: createPdsApp(ctx),
    lines,
    kvPath,
    async [Symbol.asyncDispose]() {
      kv.close();
      await dir[Symbol.asyncDispose]();
    },
  };
}

/** A real account host on 127.0.0.1 port 0 with a temporary data directory. */
export interface TestServer extends AsyncDisposable {
  pds: RunningPds;
  url: string;
  ctx: PdsContext;
  lines: string[];
  kvPath: string;
}

/**
 * Starts a real server. `PDS_PUBLIC_URL` is left unset unless given, so the public URL (and the
 * service DID) is the bound address.
 */
export async function startTestServer(
  opts: { env?: RawEnv; now?: () => number; hooks?: PdsHooks } = {},
): Promise<TestServer> {
  const dir = await makeTempDir("pds-test-");
  const kvPath = `${dir.path}/pds.kv`;
  const { log, lines } = captureLogger("pds");
  const env: RawEnv = {
    ...TEST_ENV,
    PDS_PUBLIC_URL: undefined,
    DATA_DIR: dir.path,
    PDS_KV_PATH: kvPath,
    ...opts.env,
  };
  const pds = await startPds({
    env,
    hostname: "127.0.0.1",
    port: 0,
    log,
    now: opts.now,
    hooks: opts.hooks,
  });
  return {
    pds,
    url: pds.url,
    ctx: pds.ctx,
    lines,
    kvPath,
    async [Symbol.asyncDispose]() {
      await pds.close();
      await dir[Symbol.asyncDispose]();
    },
  };
}

/** POSTs JSON to an XRPC procedure of an app or a server URL. */
export function xrpcPost(
  target: Hono<PdsEnv> | string,
  nsid: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<Response> {
  const init: RequestInit = {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  };
  return typeof target === "string"
    ? fetch(`${target}/xrpc/${nsid}`, init)
    : Promise.resolve(target.request(`/xrpc/${nsid}`, init));
}

/** GETs an XRPC query of an app or a server URL. */
export function xrpcGet(
  target: Hono<PdsEnv> | string,
  nsidAndQuery: string,
  headers: Record<string, string> = {},
): Promise<Response> {
  return typeof target === "string"
    ? fetch(`${target}/xrpc/${nsidAndQuery}`, { headers })
    : Promise.resolve(target.request(`/xrpc/${nsidAndQuery}`, { headers }));
}

/** Creates an account through the API and returns the session body. */
export async function signUp(
  target: Hono<PdsEnv> | string,
  handle: string,
  extra: Record<string, unknown> = {},
): Promise<{ did: string; handle: string; accessJwt: string; refreshJwt: string }> {
  const res = await xrpcPost(target, "com.atproto.server.createAccount", {
    handle,
    password: "correct horse battery",
    ...extra,
  });
  const body = await res.json();
  if (res.status !== 200) throw new Error(`createAccount ${res.status}: ${JSON.stringify(body)}`);
  return body;
}

/**
 * The parts of a store a `RepoService` shares with its readers and stream, built as
 * `createPdsContext` builds them: for tests of the repository on a bare KV handle.
 */
export function storeParts(kv: Deno.Kv): { kv: Deno.Kv; blocks: BlockStore; sequencer: Sequencer } {
  return { kv, blocks: new BlockStore(kv), sequencer: new Sequencer(kv) };
}
