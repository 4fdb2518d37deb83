/**
 * Assembling and running the index: opens the index store (its views, the one write path and its
 * state, `db/store.ts`; SQLite, or PostgreSQL when `APPVIEW_DATABASE_URL` is set) and the context,
 * then starts any subset of its components (HTTP API, local-stream consumer, public-stream
 * consumer, handle sync). Used by `main.ts` (all of them, or one per task), `scripts/dev.ts` and
 * tests (port 0).
 *
 * On PostgreSQL, where several processes share the index, each stream consumer runs under its
 * consumer lock (`db/pg/lease.ts`, docs/behaviour.md 6.2 rule 12): the process waits for the lock,
 * then runs the consumer (the local one with its backfill worker) on a context whose store writes
 * through the lock's connection; if the lock is lost, it stops them and waits again.
 *
 * @module
 */

import { WalCheckpointer } from "../runtime/wal_checkpointer.ts";
import { createLogger, type Logger } from "../shared/log.ts";
import { createAppviewApp } from "./app.ts";
import { createTokenVerifier } from "./auth/verifier.ts";
import { type AppviewConfig, ConfigError } from "./config.ts";
import { type AppviewContext, createAppviewContext } from "./context.ts";
import { isFilePath, openIndexStore } from "./db/open.ts";
import type { IndexStore } from "./db/store.ts";
import { CONSUMER_LOCAL, CONSUMER_PUBLIC } from "./db/state.ts";
import type { PgIndexStore } from "./db/pg/store.ts";
import type { AccountDirectory } from "./ingest/sources/account_directory.ts";
import { createJetstreamConsumer, type JetstreamOptions } from "./ingest/sources/jetstream.ts";
import { ThreadedPublicConsumer } from "./ingest/sources/public_consumer_thread.ts";
import {
  createLocalStreamConsumer,
  type LocalStreamOptions,
} from "./ingest/sources/local_stream.ts";
import type { StreamConsumer, StreamConsumerOptions } from "./ingest/sources/stream_consumer.ts";
import { type StreamConsumerStatus, writeDisabledStatus } from "./ingest/sources/stream_status.ts";
import { warnRelaxedSettings } from "./startup_warnings.ts";
import {
  Backfiller,
  type BackfillerOptions,
  createRepoSource,
} from "./ingest/backfill/backfiller.ts";
import { loadWebFiles } from "./web/web_files.ts";
import { createHandleSync, type HandleSync } from "./workers/handle_sync.ts";

/**
 * Consumer settings when the consumers share the process with the HTTP API, which waits while
 * the event loop is blocked (by one ingest transaction, one burst of received messages, or a WAL
 * checkpoint inside a commit). Catching up a 150k-op backlog in one process (`server.ts` with
 * both), the longest stall fell from 1.4 s (growing with the backlog) to about 0.2-0.25 s, for
 * about 20% slower catch-up than a consumer running alone.
 */
export const IN_PROCESS_CONSUMER: Readonly<StreamConsumerOptions> = Object.freeze({
  /** One transaction per event-loop turn, with flow control. */
  yieldBetweenBatches: true,
  /** About 0.1 s per transaction, against about 1 s at the standalone 20,000. */
  maxBatchOps: 2_000,
  // maxQueuedMessages: its default (MAX_QUEUED_MESSAGES) is set for this case. At 50,000 the
  // public-ingest benchmark paused 9 times instead of about 70 and was sent 1.3 events per event
  // instead of about 3, but was no faster (10,300-11,500 events/s either way: the dropped
  // messages are never parsed) and its /healthz polls were slower (p99 770-950 ms against
  // 520-550 ms), so the bound stays.
});

/** Which parts of the index run in this process (all default to true). */
export interface AppviewComponents {
  http?: boolean;
  localConsumer?: boolean;
  publicConsumer?: boolean;
  handleSync?: boolean;
}

/** Options of {@link startAppview}. */
export interface StartAppviewOptions {
  config: AppviewConfig;
  log?: Logger;
  /** Clock of the context (indexing times, status rows). */
  now?: () => Date;
  components?: AppviewComponents;
  /** Options of the local-stream consumer (tests shorten the backoff). */
  localStream?: LocalStreamOptions;
  /**
   * Options of the backfill worker, which runs with the local-stream consumer (tests shorten its
   * poll interval and backoff).
   */
  backfill?: Partial<BackfillerOptions>;
  /** Options of the public-stream consumer. */
  publicStream?: JetstreamOptions;
  /**
   * Beside the HTTP API, run the public-stream consumer in a worker thread
   * (`ingest/sources/public_consumer_thread.ts`). Default true; it runs on the main thread anyway
   * when the database is not a file, or a test gives a clock or a random source (they cannot
   * cross to a thread).
   */
  publicConsumerThread?: boolean;
  /** Interval of handle sync between batches that were not full. */
  handleSyncIntervalMs?: number;
  /** Interval between background WAL checkpoints. Default `CHECKPOINT_INTERVAL_MS`. */
  checkpointIntervalMs?: number;
  /** Where pushes are verified (`AppviewContext.accounts`). Default: the configured account host. */
  accounts?: AccountDirectory;
  /** On PostgreSQL: how often a consumer waiting for its lock tries it (`LEASE_POLL_MS`). */
  consumerLockPollMs?: number;
}

/** What a caller sees of a running consumer, wherever it runs. */
export interface ConsumerHandle {
  status(): StreamConsumerStatus;
  close(): Promise<void>;
}

/** A running index. */
export interface RunningAppview extends AsyncDisposable {
  /** Base URL of the HTTP server; null when HTTP is not among the components. */
  readonly url: string | null;
  readonly ctx: AppviewContext;
  /**
   * The local-stream consumer, when running (on PostgreSQL: while this process holds its lock,
   * else null).
   */
  readonly localConsumer: StreamConsumer | null;
  /** The backfill worker (docs/behaviour.md 6.2 rules 8-10), running with the local consumer. */
  readonly backfiller: Backfiller | null;
  /**
   * The public-stream consumer, when running (null also when Jetstream is not configured), on
   * this thread or in a worker thread.
   */
  readonly publicConsumer: ConsumerHandle | null;
  /** Stops every component, then closes the store. */
  close(): Promise<void>;
}

/** Starts the index components named in `opts.components`. */
export async function startAppview(opts: StartAppviewOptions): Promise<RunningAppview> {
  const { config } = opts;
  const want = { http: true, localConsumer: true, publicConsumer: true, handleSync: true };
  Object.assign(want, opts.components);
  const log = opts.log ?? createLogger("appview", { level: config.logLevel });
  const now = opts.now ?? (() => new Date());
  const store: IndexStore = await openIndexStore(config, { now, log: log.child("writer") });
  const ctx = createAppviewContext({ config, store, log, now, accounts: opts.accounts });
  const stops: (() => Promise<void>)[] = [];
  let url: string | null = null;
  let local: { consumer: StreamConsumer; backfiller: Backfiller } | null = null;
  let leasedLocal: LeasedComponent<LocalComponents> | null = null;
  let publicConsumer: ConsumerHandle | null = null;
  try {
    // Every component writes through this connection: its WAL is copied back off the main
    // thread (a SQLite database file only; `:memory:` has no WAL).
    if (store.kind === "sqlite" && isFilePath(config.dbPath)) {
      const checkpointer = new WalCheckpointer(config.dbPath, {
        log: log.child("checkpoint"),
        intervalMs: opts.checkpointIntervalMs,
      });
      if (checkpointer.start()) stops.push(() => checkpointer.stop());
    }
    if (want.http) {
      warnRelaxedSettings(config, log);
      const verifier = createTokenVerifier(config, { log: log.child("auth") });
      const warmUp = verifier.keySource.warmUp();
      stops.push(() => warmUp);
      const web = config.webDir === null ? undefined : {
        files: await loadWebFiles(config.webDir, { pdsUrl: config.webPdsUrl }, log.child("web")),
        pdsUrl: config.webPdsUrl,
      };
      const app = createAppviewApp(ctx, { verifier, web });
      let server: Deno.HttpServer<Deno.NetAddr>;
      try {
        server = Deno.serve(
          { hostname: config.hostname, port: config.port, onListen() {} },
          app.fetch,
        );
      } catch (err) {
        if (err instanceof Deno.errors.AddrInUse) {
          throw new ConfigError(
            `APPVIEW_PORT: address ${config.hostname}:${config.port} is already in use; set APPVIEW_PORT to a free port`,
            { cause: err },
          );
        }
        throw new ConfigError(
          `APPVIEW_HOSTNAME: cannot listen on ${JSON.stringify(config.hostname)}: ${
            err instanceof Error ? err.message : String(err)
          }`,
          { cause: err },
        );
      }
      stops.push(async () => {
        await server.shutdown();
        await server.finished;
      });
      const host = config.hostname === "0.0.0.0" || config.hostname === "::"
        ? "127.0.0.1"
        : config.hostname;
      url = `http://${host.includes(":") ? `[${host}]` : host}:${server.addr.port}`;
      log.info("Index listening", { url, publicUrl: config.publicUrl, did: config.serviceDid });
    }
    // Consumers beside the HTTP API block its event loop for shorter spells (unless the caller
    // chose otherwise).
    const sharing = want.http && (want.localConsumer || want.publicConsumer);
    const shared: StreamConsumerOptions = {
      ...(sharing ? IN_PROCESS_CONSUMER : {}),
      idleTimeoutMs: config.streamIdleTimeoutMs,
    };
    // The shared connection keeps the standalone `wal_autocheckpoint` (WAL_AUTOCHECKPOINT_PAGES,
    // `db/open.ts`). A 4,000-page override here (shorter checkpoints, more often) cost the
    // 2,000-op transactions of an in-process consumer about 20%: `applyOps` at 600k ops in
    // 2,000-op calls did 12,800 ops/s at 4,000 pages against 15,900 at 8,000; the public-ingest
    // benchmark (alternating runs) 10,500 and 10,000 against 11,400 and 11,700 events/s, with
    // /healthz polls no slower (p99 530-590 ms against 420-470 ms) (issue 36).
    const startLocal = async (lctx: AppviewContext): Promise<LocalComponents> => {
      const worker = new Backfiller(lctx, {
        source: createRepoSource(config),
        concurrency: config.backfill.concurrency,
        ...opts.backfill,
      });
      worker.start();
      const consumer = createLocalStreamConsumer(lctx, {
        ...shared,
        hooks: worker.streamHooks(),
        ...opts.localStream,
      });
      const close = async () => {
        await consumer.close();
        await worker.close();
      };
      try {
        await consumer.start();
      } catch (e) {
        await close();
        throw e;
      }
      return { consumer, backfiller: worker, close };
    };
    if (want.localConsumer && store.kind === "postgres") {
      const leased = new LeasedComponent(
        store as PgIndexStore,
        CONSUMER_LOCAL,
        ctx,
        startLocal,
        opts.consumerLockPollMs,
      );
      leasedLocal = leased;
      stops.push(() => leased.close());
    } else if (want.localConsumer) {
      const components = await startLocal(ctx);
      local = components;
      stops.push(() => components.close());
    }
    const threaded = want.http && (opts.publicConsumerThread ?? true) &&
      store.kind === "sqlite" && isFilePath(config.dbPath) && opts.now === undefined &&
      opts.publicStream?.random === undefined;
    if (want.publicConsumer && config.jetstreamUrl !== null && threaded) {
      const consumer = new ThreadedPublicConsumer(
        config,
        { idleTimeoutMs: config.streamIdleTimeoutMs, ...opts.publicStream },
        log,
        store.state,
      );
      consumer.start();
      publicConsumer = consumer;
      stops.push(() => consumer.close());
    } else if (want.publicConsumer && config.jetstreamUrl !== null && store.kind === "postgres") {
      const leased = new LeasedComponent(
        store as PgIndexStore,
        CONSUMER_PUBLIC,
        ctx,
        async (pctx) => {
          const consumer = createJetstreamConsumer(pctx, { ...shared, ...opts.publicStream })!;
          await consumer.start();
          return consumer;
        },
        opts.consumerLockPollMs,
      );
      publicConsumer = {
        status: () => leased.current?.status() ?? WAITING,
        close: () => leased.close(),
      };
      stops.push(() => leased.close());
    } else if (want.publicConsumer) {
      const consumer = createJetstreamConsumer(ctx, { ...shared, ...opts.publicStream });
      if (consumer === null) {
        log.info("Public-stream consumer disabled: APPVIEW_JETSTREAM_URL is unset");
        await writeDisabledStatus(ctx, CONSUMER_PUBLIC);
      } else {
        stops.push(() => consumer.close());
        await consumer.start();
        publicConsumer = consumer;
      }
    }
    if (want.handleSync) {
      const sync: HandleSync = createHandleSync(store, config, log.child("handle-sync"));
      sync.start(opts.handleSyncIntervalMs);
      stops.push(() => sync.close());
    }
  } catch (e) {
    await stopAll(stops, log);
    await store.close();
    throw e;
  }
  let closing: Promise<void> | null = null;
  const close = () => {
    closing ??= (async () => {
      await stopAll(stops, log);
      await store.close();
    })();
    return closing;
  };
  return {
    url,
    ctx,
    get localConsumer() {
      return (leasedLocal?.current ?? local)?.consumer ?? null;
    },
    get backfiller() {
      return (leasedLocal?.current ?? local)?.backfiller ?? null;
    },
    publicConsumer,
    close,
    [Symbol.asyncDispose]: close,
  };
}

/** The local-stream consumer and its backfill worker, stopped together. */
interface LocalComponents {
  consumer: StreamConsumer;
  backfiller: Backfiller;
  close(): Promise<void>;
}

/** What a consumer waiting for its lock reports (`ConsumerHandle.status`). */
const WAITING: StreamConsumerStatus = Object.freeze({
  state: "waiting",
  cursor: null,
  lastEventAt: null,
  lastError: null,
});

/**
 * A component run under a consumer lock (module comment): waits for the lock, starts the
 * component on a context whose store is the lock's, stops it when the lock is lost (then waits
 * again) or on {@link close}, and releases the lock.
 */
class LeasedComponent<T extends { close(): Promise<void> }> {
  readonly #stop = new AbortController();
  readonly #loop: Promise<void>;
  #current: T | null = null;

  constructor(
    store: PgIndexStore,
    name: string,
    ctx: AppviewContext,
    start: (ctx: AppviewContext) => Promise<T>,
    pollMs: number | undefined,
  ) {
    this.#loop = this.#run(store, name, ctx, start, pollMs);
  }

  /** The running component; null while the lock is another process's. */
  get current(): T | null {
    return this.#current;
  }

  async #run(
    store: PgIndexStore,
    name: string,
    ctx: AppviewContext,
    start: (ctx: AppviewContext) => Promise<T>,
    pollMs: number | undefined,
  ): Promise<void> {
    const log = ctx.log.child(`consumer.${name}`);
    const signal = this.#stop.signal;
    const stopped = new Promise<void>((resolve) =>
      signal.addEventListener("abort", () => resolve(), { once: true })
    );
    while (!signal.aborted) {
      const lease = await store.acquireConsumerLease(name, {
        signal,
        pollMs,
        onWaiting: (holder) =>
          log.info("Waiting for the consumer lock: another process runs this consumer", {
            consumer: name,
            holder,
          }),
        onError: (e) => log.warn("Cannot try the consumer lock", { consumer: name, error: e }),
      }).catch((e) => {
        log.error("Cannot try the consumer lock", { consumer: name, error: e });
        return null;
      });
      if (lease === null) break;
      log.info("Consumer lock taken", { consumer: name, session: lease.pid });
      let component: T | null = null;
      let failed = false;
      try {
        component = await start(createAppviewContext({
          config: ctx.config,
          store: lease.store,
          log: ctx.log,
          now: ctx.now,
          accounts: ctx.accounts,
        }));
        this.#current = component;
        await Promise.race([lease.lost, stopped]);
        if (lease.isLost) {
          log.error(
            "Consumer lock lost with its database connection; stopping until it is taken again",
            {
              consumer: name,
            },
          );
        }
      } catch (e) {
        log.error("Consumer failed to start", { consumer: name, error: e });
        failed = true;
      } finally {
        this.#current = null;
        try {
          await component?.close();
        } catch (e) {
          log.error("Consumer failed to stop cleanly", { consumer: name, error: e });
        }
        await lease.release().catch(() => {});
      }
      // Another process may start it meanwhile; this one tries again a poll later.
      if (failed) {
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, pollMs ?? 1_000);
          signal.addEventListener("abort", () => {
            clearTimeout(timer);
            resolve();
          }, { once: true });
        });
      }
    }
  }

  /** Stops the component (or the waiting) and releases the lock. */
  async close(): Promise<void> {
    this.#stop.abort();
    await this.#loop;
  }
}

/** Runs the stop functions in reverse start order; a failing one is logged, the rest still run. */
async function stopAll(stops: (() => Promise<void>)[], log: Logger): Promise<void> {
  for (const stop of stops.reverse()) {
    try {
      await stop();
    } catch (e) {
      log.error("Component failed to stop cleanly", { error: e });
    }
  }
  stops.length = 0;
}
