/**
 * Entry of the web app (`deno task web:build` bundles it): reads where the account host is,
 * builds the project's one client (`shared/client.ts`) over a `localStorage` session, and renders.
 *
 * @module
 */

import { render } from "preact";
import { SocialClient } from "../shared/client.ts";
import { App } from "./app.tsx";
import { readConfig } from "./config.ts";
import { LocalSessionStore } from "./session_store.ts";

function start(): void {
  const root = document.getElementById("root")!;
  let config;
  try {
    config = readConfig();
  } catch (err) {
    root.textContent = err instanceof Error ? err.message : String(err);
    return;
  }
  const store = new LocalSessionStore();
  const client = new SocialClient({
    pdsUrl: config.pdsUrl,
    appviewUrl: config.appviewUrl,
    store,
  });
  root.textContent = "";
  render(<App client={client} config={config} initialSession={store.load()} />, root);
}

start();
