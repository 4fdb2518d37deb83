/**
 * A PLC directory on loopback for tests (docs/behaviour.md 10.4): the reference implementation
 * (`@did-plc/server` from npm, its in-memory database) on 127.0.0.1 port 0, and a programmable
 * stand-in that answers what a test tells it to (refusals, outages). The reference server is
 * loaded lazily: when the package cannot be installed, {@link loadPlcServer} says why and the
 * tests that need it are skipped.
 *
 * @module
 */

import type { Server } from "node:http";
import type { AddressInfo } from "node:net";

/** A running directory. */
export interface PlcDirectory extends AsyncDisposable {
  url: string;
}

/** What the tests use of `@did-plc/server` (a CommonJS package: typed here by hand). */
export interface PlcModule {
  PlcServer: {
    create(opts: { db: unknown }): { app: { listen(port: number, host: string): Server } };
  };
  Database: { mock(): unknown };
}

let loaded: Promise<PlcModule | string> | null = null;

/** The `@did-plc/server` module, or the reason it could not be loaded. */
export function loadPlcServer(): Promise<PlcModule | string> {
  loaded ??= import("@did-plc/server").then(
    (m) => m as unknown as PlcModule,
    (err) => `@did-plc/server cannot be loaded: ${err instanceof Error ? err.message : err}`,
  );
  return loaded;
}

/** Starts the reference PLC directory with an in-memory database on 127.0.0.1 port 0. */
export async function startPlcDirectory(plc: PlcModule): Promise<PlcDirectory> {
  const server = plc.PlcServer.create({ db: plc.Database.mock() });
  const http = server.app.listen(0, "127.0.0.1");
  await new Promise<void>((resolve, reject) => {
    http.once("listening", resolve);
    http.once("error", reject);
  });
  const { port } = http.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    async [Symbol.asyncDispose]() {
      http.closeAllConnections();
      await new Promise((resolve) => http.close(resolve));
    },
  };
}

/** A stand-in directory answering each POST with the next of `answers` (then 200). */
export interface StandInDirectory extends PlcDirectory {
  /** The bodies POSTed, with their paths. */
  received: { path: string; body: Record<string, unknown> }[];
}

/** Starts a stand-in directory on 127.0.0.1 port 0. */
export function startStandInDirectory(
  answers: { status: number; body: string }[],
): StandInDirectory {
  const received: StandInDirectory["received"] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    received.push({ path: new URL(req.url).pathname, body: await req.json() });
    const answer = answers.shift() ?? { status: 200, body: "" };
    return new Response(answer.body, {
      status: answer.status,
      headers: { "content-type": "application/json" },
    });
  });
  return {
    url: `http://127.0.0.1:${server.addr.port}`,
    received,
    async [Symbol.asyncDispose]() {
      await server.shutdown();
    },
  };
}
