/**
 * The built web app (`deno task web:build` writes `web/dist/`), read once at startup: the page
 * shell with the browser's configuration filled in, and the content-named assets. The index does
 * not import the web app; it serves the files.
 *
 * @module
 */

import type { Logger } from "../../shared/log.ts";

/** What the browser is told (the `#app-config` JSON of the page). */
export interface WebPageConfig {
  /** Base URL of the account host as the browser reaches it. */
  pdsUrl: string;
}

/** The web app in memory. */
export interface WebFiles {
  /** The page shell, configuration included. */
  readonly page: string;
  /** Assets by file name. */
  readonly assets: ReadonlyMap<string, { bytes: Uint8Array; type: string }>;
}

const TYPES: Record<string, string> = {
  js: "text/javascript; charset=utf-8",
  css: "text/css; charset=utf-8",
  map: "application/json; charset=utf-8",
  png: "image/png",
  svg: "image/svg+xml",
  ico: "image/x-icon",
};

/** `value` as JSON that is safe inside a `<script>` element (no `<`, no line separators). */
export function scriptJson(value: unknown): string {
  return JSON.stringify(value)
    .replace(/</g, "\\u003c")
    .replace(/\u2028/g, "\\u2028")
    .replace(/\u2029/g, "\\u2029");
}

/**
 * Reads the web app from `dir`; null (with a warning naming the fix) when it was not built.
 * An asset name is a plain file name: nothing outside `dir/assets` is ever read.
 */
export async function loadWebFiles(
  dir: string,
  config: WebPageConfig,
  log: Logger,
): Promise<WebFiles | null> {
  const root = dir.replace(/\/+$/, "");
  let template: string;
  try {
    template = await Deno.readTextFile(`${root}/index.html`);
  } catch (err) {
    if (!(err instanceof Deno.errors.NotFound)) throw err;
    log.warn("The web app is not built: / answers 503 until `deno task web:build` has run", {
      dir: root,
    });
    return null;
  }
  if (!template.includes("{{CONFIG}}")) {
    throw new Error(`${root}/index.html has no {{CONFIG}} placeholder: rebuild the web app`);
  }
  const assets = new Map<string, { bytes: Uint8Array; type: string }>();
  for await (const entry of Deno.readDir(`${root}/assets`)) {
    if (!entry.isFile) continue;
    const dot = entry.name.lastIndexOf(".");
    const ext = entry.name.slice(dot + 1);
    // Own keys only: `app.constructor` must not find Object's member.
    if (dot < 0 || !Object.hasOwn(TYPES, ext)) continue;
    const type = TYPES[ext];
    assets.set(entry.name, { bytes: await Deno.readFile(`${root}/assets/${entry.name}`), type });
  }
  // A function, not a string: a replacement string would expand `$&`, `$'` and `` $` ``.
  const json = scriptJson(config);
  return { page: template.replace("{{CONFIG}}", () => json), assets };
}
