/**
 * The whole system in one test process: a real account host and a real index, each on its own
 * loopback port with its own store files in a temp dir, with the push path and the local stream
 * each switchable.
 *
 * @module
 */

import { loadAppviewConfig } from "../appview/config.ts";
import { type RunningAppview, startAppview } from "../appview/server.ts";
import { type RunningPds, startPds } from "../pds/server.ts";
import { SocialClient, type SocialClientOptions } from "../shared/client.ts";
import { createLogger, type Logger } from "../shared/log.ts";
import { freePort, makeTempDir, type TempDir } from "../runtime/_test_helpers.ts";

/** Options of {@link startSystem}. */
export interface SystemOptions {
  /** The account host pushes commits to the index (default true). */
  push?: boolean;
  /** The index consumes the account host's subscribeRepos (default true). */
  stream?: boolean;
  /** Clock of the account host in ms (tests shift it to mint expired tokens). */
  pdsNow?: () => number;
  /** Further account host variables (`PDS_INVITE_REQUIRED`, `PDS_CORS_ORIGINS`, ...). */
  pdsEnv?: Record<string, string>;
  /** Serve the built web app at the index's `/` (default false: the API alone). */
  web?: boolean;
  /** The index runs handle sync (default true). */
  handleSync?: boolean;
}

/** A running account host + index pair. */
export interface TestSystem extends AsyncDisposable {
  readonly pds: RunningPds;
  readonly appview: RunningAppview;
  readonly pdsUrl: string;
  readonly appviewUrl: string;
  /** Log lines of both servers. */
  readonly lines: string[];
  /** A new client of both servers. */
  client(opts?: Partial<SocialClientOptions>): SocialClient;
  close(): Promise<void>;
}

/** The ingest secret the account host and the index share. */
export const INGEST_SECRET = "e2e-ingest-secret";

/** Starts an account host and an index wired to each other. */
export async function startSystem(opts: SystemOptions = {}): Promise<TestSystem> {
  const dir: TempDir = await makeTempDir("social-e2e-");
  const lines: string[] = [];
  const log: Logger = createLogger("e2e", { level: "debug", sink: (l) => lines.push(l) });
  const appPort = freePort();
  const appviewUrl = `http://127.0.0.1:${appPort}`;
  const pds = await startPds({
    env: {
      DATA_DIR: dir.path,
      PDS_JWT_SECRET: "e2e-jwt-secret-0123456789",
      PDS_HANDLE_DOMAINS: ".test",
      APPVIEW_PUBLIC_URL: appviewUrl,
      APPVIEW_INTERNAL_URL: opts.push === false ? "off" : appviewUrl,
      APPVIEW_INGEST_SECRET: INGEST_SECRET,
      // The web app's page calls the account host from the index's origin.
      ...(opts.web ? { PDS_CORS_ORIGINS: appviewUrl } : {}),
      ...opts.pdsEnv,
    },
    hostname: "127.0.0.1",
    port: 0,
    now: opts.pdsNow,
    log: log.child("pds"),
  });
  let appview: RunningAppview;
  try {
    appview = await startAppview({
      config: loadAppviewConfig({
        DATA_DIR: dir.path,
        APPVIEW_HOSTNAME: "127.0.0.1",
        APPVIEW_PORT: String(appPort),
        APPVIEW_PUBLIC_URL: appviewUrl,
        PDS_PUBLIC_URL: pds.url,
        APPVIEW_INGEST_SECRET: INGEST_SECRET,
        APPVIEW_CORS_ORIGINS: "http://localhost",
        APPVIEW_WEB_DIR: opts.web ? "" : "off",
      }),
      log: log.child("appview"),
      components: {
        http: true,
        localConsumer: opts.stream !== false,
        publicConsumer: false,
        handleSync: opts.handleSync !== false,
      },
      handleSyncIntervalMs: 100,
    });
  } catch (err) {
    await pds.close();
    await dir[Symbol.asyncDispose]();
    throw err;
  }
  const close = async () => {
    await appview.close();
    await pds.close();
    await dir[Symbol.asyncDispose]();
  };
  return {
    pds,
    appview,
    pdsUrl: pds.url,
    appviewUrl,
    lines,
    client: (o = {}) => new SocialClient({ pdsUrl: pds.url, appviewUrl, ...o }),
    close,
    [Symbol.asyncDispose]: close,
  };
}
