/**
 * The browser side of `web_bench.ts` (Chromium is launched as the browser tests launch it,
 * `tests/_browser.ts`): the probe each page of the app gets before its own scripts run. It
 * records when 30 posts are painted, and every long animation frame (`long-animation-frame`, Chromium's
 * threshold: over 50 ms) and long task (`longtask`, the fallback).
 *
 * Page-side code is a string: the scripts are type-checked without the DOM library.
 *
 * @module
 */

import type { Browser, Page } from "puppeteer-core";

/** The posts of the first screen of the home timeline (one page). */
export const FIRST_SCREEN_POSTS = 30;

/**
 * Runs in each document before the app: `__webBench.painted` is `performance.now()` (relative
 * to the navigation's start, the document's time origin) when a frame that holds 30
 * `article.post` has been rendered: checked in each animation frame, then a task queued from
 * that frame's callback runs once the frame's rendering (style, layout, paint) is done.
 */
const PROBE = `(() => {
  const bench = { painted: undefined, loaf: false, frames: [], tasks: [] };
  globalThis.__webBench = bench;
  const types = PerformanceObserver.supportedEntryTypes || [];
  bench.loaf = types.includes("long-animation-frame");
  if (bench.loaf) {
    new PerformanceObserver((list) => {
      for (const e of list.getEntries()) {
        const end = e.startTime + e.duration;
        bench.frames.push({
          start: e.startTime,
          duration: e.duration,
          scripts: e.scripts.reduce((sum, s) => sum + s.duration, 0),
          styleAndLayout: e.styleAndLayoutStart > 0 ? end - e.styleAndLayoutStart : 0,
          top: e.scripts.slice().sort((a, b) => b.duration - a.duration).slice(0, 2)
            .map((s) => s.invokerType + " " + s.invoker + " " + Math.round(s.duration)),
        });
      }
    }).observe({ type: "long-animation-frame", buffered: true });
  }
  if (types.includes("longtask")) {
    new PerformanceObserver((list) => {
      for (const e of list.getEntries()) bench.tasks.push({ start: e.startTime, duration: e.duration });
    }).observe({ type: "longtask", buffered: true });
  }
  const check = () => {
    if (document.querySelectorAll("article.post").length >= ${FIRST_SCREEN_POSTS}) {
      setTimeout(() => { bench.painted = performance.now(); }, 0);
      return;
    }
    requestAnimationFrame(check);
  };
  requestAnimationFrame(check);
})();`;

/** A page with the probe, the desktop viewport of the app's screenshots, and `session` stored. */
export async function openAppPage(
  browser: Browser,
  opts: { origin: string; sessionKey: string; session: unknown },
): Promise<Page> {
  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 900 });
  await page.evaluateOnNewDocument(PROBE);
  // The session goes into the origin's storage before the app's page is ever opened; the index
  // answers /healthz on the same origin, without the app.
  await page.goto(`${opts.origin}/healthz`);
  await page.evaluate(
    `localStorage.setItem(${JSON.stringify(opts.sessionKey)}, ${
      JSON.stringify(JSON.stringify(opts.session))
    })`,
  );
  return page;
}

/** One navigation to the home timeline. */
export interface Navigation {
  /** Navigation start to 30 posts painted, by the page's clock; null when it timed out. */
  paintedMs: number | null;
  /** `page.goto` called to the painted mark seen by this process (includes DevTools latency). */
  wallMs: number | null;
}

/** Opens `url` and waits for 30 painted posts (at most `timeoutMs`). */
export async function navigateHome(
  page: Page,
  url: string,
  timeoutMs: number,
): Promise<Navigation> {
  const started = performance.now();
  try {
    await page.goto(url, { waitUntil: "domcontentloaded", timeout: timeoutMs });
    await page.waitForFunction("globalThis.__webBench?.painted !== undefined", {
      timeout: timeoutMs,
      polling: 5,
    });
  } catch (err) {
    if (err instanceof Error && err.name === "TimeoutError") {
      return { paintedMs: null, wallMs: null };
    }
    throw err;
  }
  const wallMs = performance.now() - started;
  const paintedMs = await page.evaluate("globalThis.__webBench.painted") as number;
  return { paintedMs, wallMs };
}

/** A long animation frame (or, without that API, a long task), as the probe recorded it. */
export interface LongFrame {
  start: number;
  duration: number;
  /** Time in scripts (LoAF only). */
  scripts?: number;
  /** Time from the start of style and layout to the frame's end (LoAF only). */
  styleAndLayout?: number;
  /** The two longest scripts: "<invoker type> <invoker> <ms>" (LoAF only). */
  top?: string[];
}

/** What scrolling the timeline saw. */
export interface ScrollRun {
  /** `article.post` in the page at the end. */
  posts: number;
  /** Whether the target post was scrolled into view (else `maxMs` ran out). */
  through: boolean;
  /** Scroll steps taken. */
  steps: number;
  /** Scrolling time, ms. */
  ms: number;
  /** Longest interval between two animation frames while scrolling, ms. */
  longestFrameGapMs: number;
  /** Whether the browser has the Long Animation Frames API (else long tasks are reported). */
  loaf: boolean;
  /** Long animation frames (or long tasks) from the first scroll to the end. */
  scrolling: LongFrame[];
  /** Long animation frames (or long tasks) while the page loaded, before the first scroll. */
  loading: LongFrame[];
}

/**
 * Scrolls the loaded page down one viewport each step (a step per animation frame, or per
 * `stepMs` when not 0) until post number `posts` has been scrolled into view (or `maxMs`
 * passed), then waits `settleMs` for the last page's rendering and the observers' reports.
 */
export async function scrollTimeline(
  page: Page,
  opts: { posts: number; stepMs: number; maxMs: number; settleMs: number },
): Promise<ScrollRun> {
  return await page.evaluate(`(async () => {
    const bench = globalThis.__webBench;
    const frame = () => new Promise((resolve) => requestAnimationFrame(() => resolve()));
    const posts = () => document.querySelectorAll("article.post");
    // Through: the target post's bottom is in view (or the page ends above it).
    const through = () => {
      const all = posts();
      if (all.length < ${opts.posts}) return false;
      const bottom = all[${opts.posts} - 1].getBoundingClientRect().bottom;
      const end = document.documentElement.scrollHeight - innerHeight - 1;
      return bottom <= innerHeight || scrollY >= end;
    };
    await frame();
    let last = performance.now();
    let longestFrameGapMs = 0;
    let gaps = true;
    (async () => {
      while (gaps) {
        await frame();
        const now = performance.now();
        longestFrameGapMs = Math.max(longestFrameGapMs, now - last);
        last = now;
      }
    })();
    const start = performance.now();
    let steps = 0;
    while (performance.now() - start < ${opts.maxMs} && !through()) {
      scrollBy(0, innerHeight);
      steps++;
      if (${opts.stepMs} === 0) await frame();
      else await new Promise((resolve) => setTimeout(resolve, ${opts.stepMs}));
    }
    const ms = performance.now() - start;
    await new Promise((resolve) => setTimeout(resolve, ${opts.settleMs}));
    await frame();
    gaps = false;
    const entries = bench.loaf ? bench.frames : bench.tasks;
    return {
      posts: posts().length,
      through: through(),
      steps,
      ms,
      longestFrameGapMs,
      loaf: bench.loaf,
      scrolling: entries.filter((e) => e.start + e.duration > start),
      loading: entries.filter((e) => e.start + e.duration <= start),
    };
  })()`) as ScrollRun;
}
