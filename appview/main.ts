/**
 * Entry point of the index (docs/architecture.md 5):
 *
 * - `deno task appview` (no argument): the HTTP API, the local-stream consumer, the public-stream
 *   consumer (when `APPVIEW_JETSTREAM_URL` is set) and handle sync, in one process;
 * - `deno task consumer:local`, `consumer:public`, `handle-sync`: that one component alone, for
 *   deployments that run them as separate processes on the same database;
 * - `deno task appview api`: the HTTP API alone, for API processes beside separate consumer
 *   processes (on PostgreSQL, any number of them: docs/operations.md).
 *
 * SIGINT and SIGTERM stop every component and close the database before exiting.
 *
 * @module
 */

import { createLogger } from "../shared/log.ts";
import { type AppviewConfig, loadAppviewConfig, readAppviewEnv } from "./config.ts";
import { type AppviewComponents, startAppview } from "./server.ts";

/** The components each command runs. */
export const COMMANDS: Readonly<Record<string, AppviewComponents>> = {
  "": { http: true, localConsumer: true, publicConsumer: true, handleSync: true },
  "api": { http: true, localConsumer: false, publicConsumer: false, handleSync: false },
  "consumer:local": { http: false, localConsumer: true, publicConsumer: false, handleSync: false },
  "consumer:public": { http: false, localConsumer: false, publicConsumer: true, handleSync: false },
  "handle-sync": { http: false, localConsumer: false, publicConsumer: false, handleSync: true },
};

async function main(args: string[]): Promise<number> {
  const command = args[0] ?? "";
  const components = COMMANDS[command];
  if (components === undefined || args.length > 1) {
    console.error(
      `Usage: appview/main.ts [api | consumer:local | consumer:public | handle-sync], got ${
        args.join(" ")
      }`,
    );
    return 2;
  }
  let config: AppviewConfig;
  try {
    config = loadAppviewConfig(readAppviewEnv());
  } catch (e) {
    console.error(e instanceof Error ? e.message : String(e));
    return 1;
  }
  const log = createLogger(command === "" ? "appview" : `appview.${command}`, {
    level: config.logLevel,
  });
  // The listeners go in before startup and its log lines: a signal sent on one of them must
  // find them, not Deno's default (exit 130 without closing); one sent during startup stops the
  // index as soon as it runs.
  const signalled = new Promise<void>((resolve) => {
    const stop = () => {
      Deno.removeSignalListener("SIGINT", stop);
      Deno.removeSignalListener("SIGTERM", stop);
      resolve();
    };
    Deno.addSignalListener("SIGINT", stop);
    Deno.addSignalListener("SIGTERM", stop);
  });
  const running = await startAppview({ config, log, components });
  log.info("Index started", { command: command || "appview" });
  await signalled;
  log.info("Shutting down");
  await running.close();
  return 0;
}

if (import.meta.main) {
  main(Deno.args).then((code) => Deno.exit(code), (e) => {
    console.error(e instanceof Error ? e.message : String(e));
    Deno.exit(1);
  });
}
