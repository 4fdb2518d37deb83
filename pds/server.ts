/**
 * Assembling and running the account host: `createPdsContext` (keys derived from the secret),
 * `openPdsKv`, and `startPds` (a real `Deno.serve` server; used by `main.ts`, `scripts/dev.ts`
 * and tests on port 0).
 *
 * @module
 */

import { AccountStatusCache } from "./accounts/account_status.ts";
import type { Hono } from "hono";
import { deriveP256KeyPair } from "../shared/keys.ts";
import { importSigningKey, importVerifyKey } from "../shared/jwt.ts";
import { createLogger, type Logger } from "../shared/log.ts";
import { createPdsApp } from "./app.ts";
import { ConfigError, loadPdsConfig, type PdsConfig, type RawEnv } from "./config.ts";
import type { PdsContext, PdsEnv, PdsHooks } from "./context.ts";
import { WARN_CORS_UNSET } from "./cors.ts";
import { startStreamServices, type StreamServicesOptions } from "./sequencer/services.ts";
import { createRepoService, initRepo } from "./repo/service.ts";
import { AccountKeys } from "./accounts/account_keys.ts";
import { BlockStore } from "./repo/block_store.ts";
import { Sequencer } from "./sequencer/sequencer.ts";
import { createExportGate } from "./xrpc/sync.ts";
import {
  KV_CHECKPOINTS,
  startWalCheckpointer,
  type WalCheckpointer,
} from "../runtime/wal_checkpointer.ts";
import { commitSigner } from "./repo/signer.ts";
import { BlobSweeper } from "./blobs/blob_gc.ts";
import { AccountDeletionFinisher } from "./accounts/account_delete.ts";
import { Crawlers } from "./sequencer/crawlers.ts";
import { commitSyncEvent } from "./sequencer/sync_events.ts";

/** Startup warning when `PDS_PLC_URL` is unset (development). */
export const WARN_PLC_UNSET =
  "PDS_PLC_URL is not set: DIDs are minted locally and not published to a PLC directory; " +
  "no other network service can resolve them";
/** Startup warning when `PDS_PLC_URL` is `off`. */
export const WARN_PLC_OFF = "PDS_PLC_URL is off: DIDs are not published to a PLC directory; " +
  "no other network service can resolve them";

/** HKDF `info` of the service signing key; changing it changes the published key. */
export const SERVICE_KEY_INFO = "pds/service-signing-key/v1";

/**
 * Builds a context: derives the service key from the JWT secret and builds the services of the
 * store (each once per context).
 */
export async function createPdsContext(opts: {
  config: PdsConfig;
  kv: Deno.Kv;
  /** Overrides `config.jwtSecret` (for example a generated dev secret). */
  jwtSecret?: string;
  log?: Logger;
  now?: () => number;
  /** Default: `onAccountCreated` writes the repository's initial commit. */
  hooks?: PdsHooks;
}): Promise<PdsContext> {
  const secret = opts.jwtSecret ?? opts.config.jwtSecret;
  if (!secret) throw new ConfigError("PDS_JWT_SECRET is not set");
  const keyPair = deriveP256KeyPair(secret, SERVICE_KEY_INFO);
  const [signingKey, verifyKey] = await Promise.all([
    importSigningKey(keyPair),
    importVerifyKey(keyPair.publicKey),
  ]);
  const kv = opts.kv;
  const log = opts.log ?? createLogger("pds", { level: opts.config.logLevel });
  const now = opts.now ?? Date.now;
  const sequencer = new Sequencer(kv);
  const blocks = new BlockStore(kv);
  const accountKeys = new AccountKeys(kv);
  const ctx: PdsContext = {
    config: opts.config,
    kv,
    log,
    now,
    serviceKeys: { keyPair, signingKey, verifyKey },
    hooks: opts.hooks ?? {},
    sequencer,
    blocks,
    accountKeys,
    repos: createRepoService({
      kv,
      log,
      now: () => ctx.now(),
      accountKeys,
      blocks,
      sequencer,
      signer: commitSigner(),
    }),
    accessTokens: new Map(),
    accountStatuses: new AccountStatusCache(kv),
    exportGate: createExportGate(),
    stream: null,
  };
  // Default wiring: every new account gets its empty initial commit, then the #sync event of
  // that commit (docs/behaviour.md 6.1 rule 10).
  if (opts.hooks === undefined) {
    ctx.hooks.onAccountCreated = async (did) => {
      await initRepo(ctx, did);
      await commitSyncEvent(ctx.kv, ctx.blocks, { did, nowMs: ctx.now() });
    };
  }
  return ctx;
}

/** Opens the configured KV store, creating the parent directory of a file path. */
export async function openPdsKv(config: PdsConfig): Promise<Deno.Kv> {
  const path = config.kvPath;
  if (!/^https?:\/\//.test(path) && path !== ":memory:") {
    const slash = path.lastIndexOf("/");
    if (slash > 0) await Deno.mkdir(path.slice(0, slash), { recursive: true });
  }
  return await Deno.openKv(path);
}

/** Options of {@link startPds}. */
export interface StartPdsOptions {
  /** Raw environment for `loadPdsConfig` (default `{}`: all defaults). */
  env?: RawEnv;
  /** Listen address overrides (tests pass `port: 0`). */
  hostname?: string;
  port?: number;
  /** Use this store instead of opening `PDS_KV_PATH`; it is not closed by `close()`. */
  kv?: Deno.Kv;
  /** Used when `PDS_JWT_SECRET` is unset (main.ts passes its generated secret). */
  jwtSecret?: string;
  log?: Logger;
  now?: () => number;
  hooks?: PdsHooks;
  /** Tuning of the commit stream (tests use small per-connection bounds). */
  stream?: StreamServicesOptions;
  /** Interval of the unreferenced-blob sweep (default one hour). */
  blobSweepIntervalMs?: number;
}

/** A running account host. */
export interface RunningPds extends AsyncDisposable {
  /** Base URL the server listens on, e.g. `http://127.0.0.1:41234`. */
  readonly url: string;
  readonly ctx: PdsContext;
  readonly app: Hono<PdsEnv>;
  close(): Promise<void>;
}

/**
 * Starts the account host. When `PDS_PUBLIC_URL` is not set, the public URL (and so the service
 * DID) is the address actually bound, which makes port 0 usable in tests.
 */
export async function startPds(opts: StartPdsOptions = {}): Promise<RunningPds> {
  const env = opts.env ?? {};
  const initial = loadPdsConfig(env);
  const hostname = opts.hostname ?? initial.hostname;
  let app: Hono<PdsEnv> | null = null;
  const listenPort = opts.port ?? initial.port;
  let server: Deno.HttpServer<Deno.NetAddr>;
  try {
    server = Deno.serve(
      { hostname, port: listenPort, onListen() {} },
      (req, info) => app ? app.fetch(req, info) : new Response("starting", { status: 503 }),
    );
  } catch (err) {
    if (err instanceof Deno.errors.AddrInUse) {
      throw new ConfigError(
        `PDS_PORT: address ${hostname}:${listenPort} is already in use; set PDS_PORT to a free port`,
        { cause: err },
      );
    }
    throw new ConfigError(
      `PDS_HOSTNAME: cannot listen on ${JSON.stringify(hostname)}: ${
        err instanceof Error ? err.message : String(err)
      }`,
      { cause: err },
    );
  }
  const port = server.addr.port;
  const urlHost = hostname === "0.0.0.0" || hostname === "::" ? "127.0.0.1" : hostname;
  const url = `http://${urlHost.includes(":") ? `[${urlHost}]` : urlHost}:${port}`;
  let kv: Deno.Kv | null = null;
  let checkpointer: WalCheckpointer | null = null;
  try {
    const config = env.PDS_PUBLIC_URL?.trim()
      ? initial
      : loadPdsConfig({ ...env, PDS_PUBLIC_URL: url, PDS_PORT: String(port) });
    kv = opts.kv ?? await openPdsKv(config);
    const ctx = await createPdsContext({
      config,
      kv,
      jwtSecret: opts.jwtSecret,
      log: opts.log,
      now: opts.now,
      hooks: opts.hooks,
    });
    if (!config.inviteRequired) {
      ctx.log.warn("PDS_INVITE_REQUIRED is false: anyone can create an account");
    }
    if (config.corsOrigins === null) ctx.log.warn(WARN_CORS_UNSET);
    if (config.plcUrl === null) ctx.log.warn(config.plcOff ? WARN_PLC_OFF : WARN_PLC_UNSET);
    // Only a KV file this server opened: a caller's store is the caller's to tune.
    checkpointer = opts.kv
      ? null
      : startWalCheckpointer(config.kvPath, { ...KV_CHECKPOINTS, log: ctx.log });
    const stream = await startStreamServices(ctx, opts.stream);
    const sweeper = new BlobSweeper({
      kv,
      log: ctx.log.child("blobs"),
      now: () => ctx.now(),
      intervalMs: opts.blobSweepIntervalMs,
    });
    sweeper.start();
    // Deletions a killed process left half done (docs/operations.md "Operating a community").
    const deletions = new AccountDeletionFinisher({ kv, log: ctx.log.child("accounts") });
    deletions.start();
    const crawlers = new Crawlers({
      crawlers: config.crawlers,
      publicUrl: config.publicUrl,
      log: ctx.log.child("crawlers"),
      now: () => ctx.now(),
    });
    crawlers.start(ctx.sequencer);
    app = createPdsApp(ctx);
    ctx.log.info("account host listening", {
      url,
      publicUrl: config.publicUrl,
      did: config.serviceDid,
      commitSigning: commitSigner().nativePath ?? "@noble/curves (OpenSSL not loadable)",
    });
    const ownedKv = opts.kv ? null : kv;
    let closing: Promise<void> | null = null;
    const close = () => {
      closing ??= (async () => {
        await crawlers.close();
        await stream.close();
        await sweeper.close();
        await deletions.close();
        await server.shutdown();
        await server.finished;
        // No write is left to queue one: let a running compaction finish, drop queued ones.
        await ctx.repos.compactionsSettled({ stop: true });
        await checkpointer?.stop();
        ownedKv?.close();
      })();
      return closing;
    };
    return { url, ctx, app, close, [Symbol.asyncDispose]: close };
  } catch (err) {
    await server.shutdown();
    await checkpointer?.stop();
    if (kv && !opts.kv) kv.close();
    throw err;
  }
}
