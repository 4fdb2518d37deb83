/**
 * The web app, served by the index beside `/api/*` (issue 35): the page shell on the app's own
 * paths (so an address such as `/profile/alice.test` can be opened, shared and reloaded), and its
 * assets under `/assets/`, cached for good since their names carry their content's hash.
 *
 * The page goes out with a Content-Security-Policy that allows scripts and styles from this
 * origin only, and network and images from this origin and the account host: a post that slipped
 * markup past the rendering (which sets network text as text) still could not run a script.
 * `X-Content-Type-Options: nosniff` comes from the app's middleware, as on every response.
 *
 * @module
 */

import { Hono } from "hono";
import type { WebFiles } from "../web/web_files.ts";

/** First path segments of the app's screens; every other path stays the API's. */
export const APP_PATHS: readonly string[] = [
  "login",
  "signup",
  "search",
  "notifications",
  "settings",
  "profile",
];

/** Options of {@link webRoutes}. */
export interface WebRoutesOptions {
  /** The loaded web app; null when it was not built (the paths answer 503 saying so). */
  files: WebFiles | null;
  /** Base URL of the account host as the browser reaches it (for the policy). */
  pdsUrl: string;
}

/** The Content-Security-Policy of the page for an account host at `pdsUrl`. */
export function contentSecurityPolicy(pdsUrl: string): string {
  const pds = new URL(pdsUrl).origin;
  return [
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self'",
    `img-src 'self' blob: data: ${pds}`,
    `connect-src 'self' ${pds}`,
    "font-src 'self'",
    "manifest-src 'self'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
  ].join("; ");
}

const NOT_BUILT = "<!doctype html><meta charset=utf-8><title>Not built</title>" +
  "<p>The web app is not built. Run <code>deno task web:build</code> and restart the index.</p>";

/** Routes of the web app. */
export function webRoutes(opts: WebRoutesOptions): Hono {
  const app = new Hono();
  const csp = contentSecurityPolicy(opts.pdsUrl);
  const page = (c: { body: (b: string, s: 200 | 503, h: Record<string, string>) => Response }) =>
    opts.files === null
      ? c.body(NOT_BUILT, 503, {
        "content-type": "text/html; charset=utf-8",
        "cache-control": "no-store",
      })
      : c.body(opts.files.page, 200, {
        "content-type": "text/html; charset=utf-8",
        "cache-control": "no-cache",
        "content-security-policy": csp,
        "x-frame-options": "DENY",
        "referrer-policy": "same-origin",
      });
  app.get("/", (c) => page(c));
  for (const first of APP_PATHS) {
    app.get(`/${first}`, (c) => page(c));
    app.get(`/${first}/*`, (c) => page(c));
  }
  app.get("/assets/:name", (c) => {
    const asset = opts.files?.assets.get(c.req.param("name"));
    if (asset === undefined) {
      return c.json({
        error: "NotFound",
        message: `No asset: ${c.req.param("name").slice(0, 128)}`,
      }, 404);
    }
    return c.body(asset.bytes as Uint8Array<ArrayBuffer>, 200, {
      "content-type": asset.type,
      "cache-control": "public, max-age=31536000, immutable",
    });
  });
  return app;
}
