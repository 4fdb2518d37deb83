/**
 * The typed context every part of the account host receives: configuration, the KV store, the
 * logger, an injectable clock, the service keys, extension hooks, and the services built on
 * them (sequencer, blocks, account keys, repositories, caches, the running stream). Built once
 * by `createPdsContext` (`pds/server.ts`), in tests too; never a global.
 *
 * @module
 */

import type { Logger } from "../shared/log.ts";
import type { P256KeyPair } from "../shared/keys.ts";
import type { PdsConfig } from "./config.ts";
import type { AccountKeys } from "./accounts/account_keys.ts";
import type { ConcurrencyGate } from "./concurrency_gate.ts";
import type { BlockStore } from "./repo/block_store.ts";
import type { RepoService } from "./repo/repository.ts";
import type { Sequencer } from "./sequencer/sequencer.ts";
import type { Broadcaster } from "./sequencer/broadcast.ts";
import type { PushService } from "./sequencer/push.ts";
import type { RetentionWorker } from "./sequencer/retention.ts";
import type { StreamHub } from "./sequencer/stream.ts";

/**
 * Verified access tokens of one context (`ctx.accessTokens`): token -> subject, expiry and
 * whether it is an app password's.
 */
export type AccessTokenCache = Map<string, { did: string; expMs: number; appPassword: boolean }>;

/** The stream components of a context. */
export interface StreamServices {
  broadcaster: Broadcaster;
  hub: StreamHub;
  /** Null when push is disabled (`APPVIEW_INTERNAL_URL=off`). */
  push: PushService | null;
  retention: RetentionWorker;
  /** Closes the connections, then stops the broadcast, the push and the retention worker. */
  close(): Promise<void>;
}

/** The account host's signing key (derived from `PDS_JWT_SECRET`) in its usable forms. */
export interface ServiceKeys {
  /** Raw P-256 key pair; `publicKey` is what `/.well-known/did.json` publishes. */
  keyPair: P256KeyPair;
  /** WebCrypto ES256 signing key (tokens). */
  signingKey: CryptoKey;
  /** WebCrypto ES256 verification key (tokens). */
  verifyKey: CryptoKey;
}

/** Extension points other components plug into. */
export interface PdsHooks {
  /**
   * Called once after an account (DID, handle, signing key) has been committed to KV, before
   * the createAccount response is sent; the repository creates the empty initial commit here.
   * A failure is logged; the account still exists.
   */
  onAccountCreated?: (did: string, handle: string) => Promise<void>;
}

/** Everything a handler or domain function of the account host needs. */
export interface PdsContext {
  config: PdsConfig;
  kv: Deno.Kv;
  log: Logger;
  /** Current time in milliseconds since the epoch; injectable for tests. */
  now(): number;
  serviceKeys: ServiceKeys;
  hooks: PdsHooks;
  /** The commit sequencer of `kv` (the write path and the stream share it). */
  sequencer: Sequencer;
  /** The repository blocks of `kv` and this process's caches of them. */
  blocks: BlockStore;
  /** The accounts' signing keys (cached). */
  accountKeys: AccountKeys;
  /** The one repository write path (`applyWrites`) and its per-repository state. */
  repos: RepoService;
  /** Verified access tokens, until their expiry (`auth/access.ts`). */
  accessTokens: AccessTokenCache;
  /** The accounts' statuses, read once and kept (`accounts/account_status.ts`). */
  accountStatuses: AccountStatuses;
  /** Bound on concurrent repository exports (`sync.getRepo`). */
  exportGate: ConcurrencyGate;
  /** The running commit stream; set by `startStreamServices`, null before and after. */
  stream: StreamServices | null;
}

/**
 * The statuses of the accounts (`AccountStatusCache` of `accounts/account_status.ts`; null: no
 * such account), told to forget one when it changes.
 */
export interface AccountStatuses {
  get(did: string): Promise<"active" | "takendown" | "deactivated" | null>;
  invalidate(did: string): void;
}

/** What `requireAccess()` stores for the handlers: the authenticated account. */
export interface AuthInfo {
  /** The access token's subject (the account DID). */
  did: string;
  /** True for a login with an app password (scope `com.atproto.appPass`). */
  appPassword: boolean;
}

/** Hono environment of the account host's routers: `new Hono<PdsEnv>()`. */
export type PdsEnv = {
  Variables: {
    /** Set by `requireAccess()`. */
    auth: AuthInfo;
    /** Set by `createPdsApp()` for every request. */
    ctx: PdsContext;
  };
};
