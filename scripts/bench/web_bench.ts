/**
 * The web app's budgets (issue 35), in a real browser against an index holding 1M posts:
 *
 * 1. the JavaScript of the first screen, gzipped: <= 100 KB (the scripts `web/dist/index.html`
 *    loads, gzipped with `CompressionStream`; the style sheet is reported beside it);
 * 2. navigation to the home timeline with 30 posts painted: p95 <= 500 ms;
 * 3. scrolling through 300 timeline posts: every frame's main-thread work under 50 ms.
 *
 * The index is `startAppview` (`appview/server.ts`) serving HTTP over a copy of the query
 * bench's data set (`cachedDataSet`: 10,000 users, 1,000,000 posts, viewers following 2,000
 * accounts; built once and cached), with the built web app (`APPVIEW_WEB_DIR` default,
 * `web/dist`) and authentication on. Its consumers run as separate processes in a split
 * deployment, so only HTTP runs here (they would need a real account host and network).
 * The viewer is the query bench's first viewer, so the home timeline takes the follow-graph
 * branch. The account host is a stand-in on loopback: it publishes the DID document of the key
 * the session's token is signed with (minted as the account host mints it,
 * `appview/_test_helpers.ts`) and answers 404 to everything else, so avatars fail at once.
 *
 * The page is Debian's Chromium, headless, driven by puppeteer-core at 1280 x 900; the session
 * is put into the index origin's `localStorage` (`social.session`) before the app is opened.
 *
 * Run alone: `deno task bench web` (with the server tasks' V8 flags)
 * (`WEB_BENCH_SCROLL_STEP_MS=0` scrolls one viewport per animation frame instead of per 100 ms).
 */

import { launchBrowser } from "../../tests/_browser.ts";
import type { Browser } from "puppeteer-core";
import { createLogger } from "../../shared/log.ts";
import { accessClaims, didDocument, makeSigner, PDS_DID } from "../../appview/_test_helpers.ts";
import { DID_DOCUMENT_PATH } from "../../appview/auth/key_source.ts";
import { loadAppviewConfig } from "../../appview/config.ts";
import { startAppview } from "../../appview/server.ts";
import { type BenchResult, percentile, printTable } from "./_types.ts";
import {
  FIRST_SCREEN_POSTS,
  type LongFrame,
  navigateHome,
  type Navigation,
  openAppPage,
  scrollTimeline,
} from "./_web_bench_browser.ts";
import { cachedDataSet, handleOf, userDid, viewerIndex } from "./query_bench.ts";

/** Budget of the first screen's JavaScript, gzipped (1 KB = 1,000 bytes). */
const JS_BUDGET_BYTES = 100_000;
/** Budget of navigation to 30 painted posts, p95. */
const PAINT_BUDGET_MS = 500;
/** Budget of each frame's main-thread work while scrolling (LoAF's own threshold). */
const FRAME_BUDGET_MS = 50;
const WARMUP_NAVIGATIONS = 2;
const NAVIGATIONS = 20;
const NAVIGATION_TIMEOUT_MS = 10_000;
const SCROLL_POSTS = 300;
const SCROLL_MAX_MS = 60_000;
/** Milliseconds between scroll steps of one viewport; 0: one step per animation frame. */
const SCROLL_STEP_MS = Number(Deno.env.get("WEB_BENCH_SCROLL_STEP_MS") ?? 100);
/** The browser's `localStorage` key of the session (`web/session_store.ts`). */
const SESSION_KEY = "social.session";

/** The scripts and style sheets a built page loads, as paths under its folder. */
export interface FirstScreenAssets {
  scripts: string[];
  styles: string[];
}

/** The `/assets/` scripts and style sheets `index.html` (of `web:build`) loads. */
export function firstScreenAssets(html: string): FirstScreenAssets {
  const scripts = [...html.matchAll(/<script\b[^>]*\bsrc="\/(assets\/[^"]+\.js)"/g)]
    .map((m) => m[1]);
  const styles = [...html.matchAll(/<link\b[^>]*\bhref="\/(assets\/[^"]+\.css)"/g)]
    .map((m) => m[1]);
  if (scripts.length === 0) throw new Error("index.html loads no /assets/ script");
  return { scripts, styles };
}

/** `bytes` gzipped by the platform's `CompressionStream` (its default level). */
export async function gzip(bytes: Uint8Array): Promise<Uint8Array> {
  const stream = new Blob([bytes as Uint8Array<ArrayBuffer>]).stream()
    .pipeThrough(new CompressionStream("gzip"));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

async function sizeRows(webDir: string): Promise<BenchResult[]> {
  let html: string;
  try {
    html = await Deno.readTextFile(`${webDir}/index.html`);
  } catch (err) {
    if (!(err instanceof Deno.errors.NotFound)) throw err;
    throw new Error(`${webDir}/index.html is missing: run deno task web:build`);
  }
  const assets = firstScreenAssets(html);
  const measure = async (paths: string[]) => {
    let raw = 0;
    let gzipped = 0;
    for (const path of paths) {
      const bytes = await Deno.readFile(`${webDir}/${path}`);
      raw += bytes.length;
      gzipped += (await gzip(bytes)).length;
    }
    return { raw, gzipped, names: paths.map((p) => p.slice(p.lastIndexOf("/") + 1)).join(", ") };
  };
  const js = await measure(assets.scripts);
  const css = await measure(assets.styles);
  const served = "the index serves it uncompressed";
  return [{
    name: "web: first-screen JavaScript, gzipped",
    figure: js.gzipped,
    unit: "bytes",
    budget: `<= ${JS_BUDGET_BYTES.toLocaleString("en-US")} bytes`,
    pass: js.gzipped <= JS_BUDGET_BYTES,
    note: `${js.names} (every script web/dist/index.html loads), gzipped with CompressionStream;` +
      ` ${js.raw.toLocaleString("en-US")} bytes as built (${served})`,
  }, {
    name: "web: first-screen style sheet, gzipped",
    figure: css.gzipped,
    unit: "bytes",
    budget: "-",
    pass: true,
    note: `${css.names}, gzipped likewise; ${css.raw.toLocaleString("en-US")} bytes as built`,
  }];
}

/** The stand-in account host: the DID document of `publicKey`, and 404 for the rest. */
function startAccountHost(publicKey: Uint8Array): Deno.HttpServer<Deno.NetAddr> {
  const doc = didDocument(publicKey);
  return Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (req) => {
    if (new URL(req.url).pathname === DID_DOCUMENT_PATH) return Response.json(doc);
    return Response.json({ error: "NotFound", message: "Not served by the bench" }, {
      status: 404,
    });
  });
}

function stats(values: readonly number[]) {
  return {
    p50: percentile(values, 50),
    p95: percentile(values, 95),
    max: Math.max(...values),
  };
}

function paintRows(label: string, runs: readonly Navigation[], budgeted: boolean): BenchResult[] {
  const painted = runs.map((r) => r.paintedMs ?? Infinity);
  const wall = runs.map((r) => r.wallMs ?? Infinity);
  const timedOut = painted.filter((ms) => ms === Infinity).length;
  const s = stats(painted);
  const w = stats(wall);
  const note = `${label}: ${runs.length} navigations after ${WARMUP_NAVIGATIONS} warm-up ones` +
    ` (page.goto of / with the session stored); the page's performance.now() (time origin:` +
    ` navigation start) when a frame holding ${FIRST_SCREEN_POSTS} article.post has been` +
    ` rendered (checked each animation frame, then a task queued from that frame). Page clock` +
    ` p50 ${s.p50.toFixed(0)} / p95 ${s.p95.toFixed(0)} / max ${s.max.toFixed(0)} ms;` +
    ` wall clock from goto, as seen over DevTools: p50 ${w.p50.toFixed(0)} / p95` +
    ` ${w.p95.toFixed(0)} ms` +
    (timedOut > 0 ? `; ${timedOut} did not paint within ${NAVIGATION_TIMEOUT_MS} ms` : "");
  const name = `web: navigation to ${FIRST_SCREEN_POSTS} painted timeline posts, 1M posts` +
    (budgeted ? "" : ", HTTP cache off");
  if (!budgeted) {
    return [{
      name: `${name} (p95)`,
      figure: s.p95,
      unit: "ms p95",
      budget: "-",
      pass: true,
      note,
    }];
  }
  return [
    { name: `${name} (p50)`, figure: s.p50, unit: "ms p50", budget: "-", pass: true },
    {
      name: `${name} (p95)`,
      figure: s.p95,
      unit: "ms p95",
      budget: `<= ${PAINT_BUDGET_MS} ms (p95)`,
      pass: s.p95 <= PAINT_BUDGET_MS && timedOut === 0,
      note,
    },
  ];
}

export async function benchWeb(): Promise<BenchResult[]> {
  if (!(SCROLL_STEP_MS >= 0)) {
    throw new Error(
      `WEB_BENCH_SCROLL_STEP_MS must be 0 or more milliseconds, got ${SCROLL_STEP_MS}`,
    );
  }
  const signer = await makeSigner("web bench account host secret");
  const accountHost = startAccountHost(signer.keyPair.publicKey);
  const work = await Deno.makeTempDir({ prefix: "social-web-bench-run-" });
  try {
    const cached = await cachedDataSet();
    const dbPath = `${work}/index.sqlite`;
    await Deno.copyFile(cached, dbPath);
    const config = loadAppviewConfig({
      DATA_DIR: work,
      APPVIEW_HOSTNAME: "127.0.0.1",
      APPVIEW_PORT: "0",
      APPVIEW_DB_PATH: dbPath,
      PDS_PUBLIC_URL: `http://127.0.0.1:${accountHost.addr.port}`,
      LOG_LEVEL: "error",
    });
    if (config.webDir === null) throw new Error("APPVIEW_WEB_DIR is off: the bench needs the app");
    const rows = await sizeRows(config.webDir);
    await using index = await startAppview({
      config,
      log: createLogger("appview", { level: "error" }),
      components: { http: true, localConsumer: false, publicConsumer: false, handleSync: false },
    });
    const origin = index.url!;
    const did = userDid(viewerIndex(0));
    const now = Date.now();
    const session = {
      did,
      handle: handleOf(viewerIndex(0)),
      accessJwt: await signer.sign(accessClaims(now, { sub: did, aud: config.serviceDid })),
      refreshJwt: await signer.sign(
        accessClaims(now, { sub: did, aud: PDS_DID, scope: "com.atproto.refresh" }),
      ),
    };
    await using chromium = await launchBrowser();
    const page = await openAppPage(chromium.browser, { origin, sessionKey: SESSION_KEY, session });
    // Alternately with and without the HTTP cache, so that neither gets the warmer server.
    const runs = { cached: [] as Navigation[], uncached: [] as Navigation[] };
    for (let i = 0; i < WARMUP_NAVIGATIONS + NAVIGATIONS; i++) {
      for (const cache of [true, false]) {
        await page.setCacheEnabled(cache);
        const run = await navigateHome(page, `${origin}/`, NAVIGATION_TIMEOUT_MS);
        if (i >= WARMUP_NAVIGATIONS) (cache ? runs.cached : runs.uncached).push(run);
      }
    }
    await page.setCacheEnabled(true);
    const on = "HTTP cache on (a returning member), alternating with cache-off navigations";
    const off = "HTTP cache off (every asset fetched again), alternating with cache-on ones";
    rows.push(...paintRows(on, runs.cached, true));
    rows.push(...paintRows(off, runs.uncached, false));
    await page.close();
    console.error(`web bench: navigations done; scrolling ${SCROLL_POSTS} posts`);
    rows.push(...await scrollRows(chromium.browser, { origin, session }));
    return rows;
  } finally {
    await accountHost.shutdown();
    await Deno.remove(work, { recursive: true });
  }
}

/** "n, longest: 76 ms (scripts 40; style and layout 30; ...), ..." of up to 5 long frames. */
function describeFrames(frames: readonly LongFrame[]): string {
  if (frames.length === 0) return "none";
  const sorted = [...frames].sort((a, b) => b.duration - a.duration).slice(0, 5);
  const one = (f: LongFrame) => {
    if (f.scripts === undefined) return `${f.duration.toFixed(0)} ms`;
    const parts = [`scripts ${f.scripts.toFixed(0)}`];
    if (f.styleAndLayout) parts.push(`style and layout ${f.styleAndLayout.toFixed(0)}`);
    if (f.top && f.top.length > 0) parts.push(`longest: ${f.top.join(", ")}`);
    return `${f.duration.toFixed(0)} ms (${parts.join("; ")})`;
  };
  return `${frames.length}, longest: ${sorted.map(one).join(", ")}`;
}

async function scrollRows(
  browser: Browser,
  opts: { origin: string; session: unknown },
): Promise<BenchResult[]> {
  const page = await openAppPage(browser, { ...opts, sessionKey: SESSION_KEY });
  try {
    const name = `web: scrolling ${SCROLL_POSTS} timeline posts, longest frame (main thread)`;
    const budget = `< ${FRAME_BUDGET_MS} ms`;
    const first = await navigateHome(page, `${opts.origin}/`, NAVIGATION_TIMEOUT_MS);
    if (first.paintedMs === null) {
      const note = `the timeline did not paint ${FIRST_SCREEN_POSTS} posts within` +
        ` ${NAVIGATION_TIMEOUT_MS} ms, so there was nothing to scroll`;
      return [{ name, figure: NaN, unit: "ms", budget, pass: false, note }];
    }
    const run = await scrollTimeline(page, {
      posts: SCROLL_POSTS,
      stepMs: SCROLL_STEP_MS,
      maxMs: SCROLL_MAX_MS,
      settleMs: 500,
    });
    const durations = run.scrolling.map((f) => f.duration);
    const longest = durations.length === 0 ? null : Math.max(...durations);
    const over = durations.filter((d) => d >= FRAME_BUDGET_MS).length;
    const reached = run.through;
    const api = run.loaf ? "long animation frames" : "long tasks (no LoAF API)";
    const step = SCROLL_STEP_MS === 0 ? "animation frame" : `${SCROLL_STEP_MS} ms`;
    const note = `scrollBy one viewport (900 px) per ${step} until post ${SCROLL_POSTS} had` +
      ` been scrolled into view (the app pages by cursor as its end comes into view):` +
      ` ${run.posts} posts loaded, ${run.steps} steps, ${(run.ms / 1000).toFixed(1)} s;` +
      ` ${api} while scrolling (PerformanceObserver, buffered; the API reports only those of` +
      ` 50 ms or more): ${describeFrames(run.scrolling)}; longest gap between animation` +
      ` frames ${run.longestFrameGapMs.toFixed(0)} ms; while the page loaded, before` +
      ` scrolling: ${describeFrames(run.loading)}` +
      (reached ? "" : `; post ${SCROLL_POSTS} was not reached within ${SCROLL_MAX_MS / 1000} s`);
    return [{
      name,
      figure: longest ?? FRAME_BUDGET_MS,
      unit: "ms",
      budget,
      pass: longest === null ? reached : longest < FRAME_BUDGET_MS && reached,
      shown: longest === null ? `< ${FRAME_BUDGET_MS} ms` : undefined,
      note,
    }, {
      name:
        `web: scrolling ${SCROLL_POSTS} timeline posts, frames of ${FRAME_BUDGET_MS} ms or more`,
      figure: over,
      unit: "frames",
      budget: "-",
      pass: true,
      shown: `${over} frames`,
    }];
  } finally {
    await page.close();
  }
}

if (import.meta.main) printTable(await benchWeb());
