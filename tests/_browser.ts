/**
 * A real browser for the web app's tests: Debian's Chromium driven by puppeteer-core (no browser
 * download), the web app built when it is missing, screenshots to `screenshots/` (ignored by
 * git) in both colour schemes and two widths, an axe-core accessibility check, and images made in
 * memory for uploads.
 *
 * @module
 */

import axe from "axe-core";
import puppeteer, { type Browser, type Page } from "puppeteer-core";
import { REPO_ROOT } from "./_util.ts";

/** Where Chromium may be installed (Debian's package first), or `CHROMIUM_PATH`. */
const CHROMIUM_CANDIDATES = [
  "/usr/bin/chromium",
  "/usr/bin/chromium-browser",
  "/usr/bin/google-chrome",
];

/** The Chromium binary, or null when none is installed. */
export function chromiumPath(): string | null {
  const configured = Deno.env.get("CHROMIUM_PATH");
  for (const path of configured ? [configured] : CHROMIUM_CANDIDATES) {
    try {
      if (Deno.statSync(path).isFile) return path;
    } catch {
      // not here
    }
  }
  return null;
}

/**
 * Whether browser tests are skipped: only outside CI, when no Chromium is installed (`.ci/run`
 * installs it; in CI a missing browser fails the tests instead of hiding them).
 */
export function skipBrowserTests(): boolean {
  if (chromiumPath() !== null) return false;
  if (Deno.env.get("CI") === "true") return false;
  console.warn(
    "Browser tests skipped: no Chromium found; install it with `apt-get install chromium`",
  );
  return true;
}

/** Chromium's flags here: no sandbox as root, and no background calls to the network. */
const CHROMIUM_ARGS = [
  "--no-sandbox",
  "--disable-gpu",
  "--disable-dev-shm-usage",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
  "--disable-quic",
  "--no-first-run",
  "--no-default-browser-check",
];

/** A running headless Chromium with its own profile folder. */
export interface TestBrowser extends AsyncDisposable {
  readonly browser: Browser;
  close(): Promise<void>;
}

/** Launches headless Chromium. */
export async function launchBrowser(): Promise<TestBrowser> {
  const executablePath = chromiumPath();
  if (executablePath === null) {
    throw new Error("No Chromium: install it with apt-get install chromium");
  }
  const profile = await Deno.makeTempDir({ prefix: "chromium-" });
  const browser = await puppeteer.launch({
    executablePath,
    headless: true,
    args: [...CHROMIUM_ARGS, `--user-data-dir=${profile}`],
  });
  const close = async () => {
    await browser.close();
    await Deno.remove(profile, { recursive: true }).catch(() => {});
  };
  return { browser, close, [Symbol.asyncDispose]: close };
}

/** Builds the web app (`deno task web:build`) when `web/dist` has none. */
export async function ensureWebBuilt(): Promise<void> {
  try {
    await Deno.stat(new URL("web/dist/index.html", REPO_ROOT));
    return;
  } catch {
    // build it
  }
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["task", "web:build"],
    cwd: REPO_ROOT.pathname,
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (!out.success) {
    throw new Error(`deno task web:build failed: ${new TextDecoder().decode(out.stderr)}`);
  }
}

/** Folder of the screenshots (ignored by git). */
export const SCREENSHOT_DIR = new URL("screenshots/", REPO_ROOT);

/** The widths and schemes every main screen is captured in. */
export const SHOTS: readonly { scheme: "light" | "dark"; width: number }[] = [
  { scheme: "light", width: 1280 },
  { scheme: "dark", width: 1280 },
  { scheme: "light", width: 360 },
  { scheme: "dark", width: 360 },
];

/** Sets the page's colour scheme and width. */
export async function setLook(page: Page, scheme: "light" | "dark", width: number): Promise<void> {
  await page.emulateMediaFeatures([{ name: "prefers-color-scheme", value: scheme }]);
  await page.setViewport({ width, height: width < 600 ? 780 : 900 });
}

/** Writes `screenshots/<name>-<scheme>-<width>.png` for each of {@link SHOTS}; returns the paths. */
export async function screenshotAll(page: Page, name: string): Promise<string[]> {
  await Deno.mkdir(SCREENSHOT_DIR, { recursive: true });
  const paths: string[] = [];
  for (const { scheme, width } of SHOTS) {
    await setLook(page, scheme, width);
    await settle(page);
    const path = new URL(`${name}-${scheme}-${width}.png`, SCREENSHOT_DIR).pathname;
    await page.screenshot({ path: path as `${string}.png`, fullPage: false });
    paths.push(path);
  }
  await setLook(page, "light", 1280);
  return paths;
}

/** Waits two animation frames, so what changed is painted. */
export async function settle(page: Page): Promise<void> {
  // Page-side code is a string: these files are type-checked without the DOM library.
  await page.evaluate("new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))");
}

/** One axe-core finding. */
export interface AxeFinding {
  id: string;
  impact: string | null;
  help: string;
  targets: string[];
}

/**
 * Runs axe-core (WCAG 2.1 A and AA rules and best practices) on the page in both colour schemes;
 * returns the serious and critical violations (the acceptance bar) and all of them.
 */
export async function checkAccessibility(
  page: Page,
): Promise<{ serious: AxeFinding[]; all: AxeFinding[] }> {
  const all: AxeFinding[] = [];
  for (const scheme of ["light", "dark"] as const) {
    await page.emulateMediaFeatures([{ name: "prefers-color-scheme", value: scheme }]);
    await settle(page);
    if (!(await page.evaluate(() => "axe" in globalThis))) {
      await page.evaluate((axe as unknown as { source: string }).source);
    }
    const found = await page.evaluate(`(async () => {
      const result = await axe.run(document, {
        runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"] },
      });
      return result.violations.map((v) => ({
        id: v.id,
        impact: v.impact,
        help: v.help,
        targets: v.nodes.map((n) => String(n.target)),
      }));
    })()`) as AxeFinding[];
    all.push(...found.map((f: AxeFinding) => ({ ...f, id: `${f.id} (${scheme})` })));
  }
  await page.emulateMediaFeatures([{ name: "prefers-color-scheme", value: "light" }]);
  return { serious: all.filter((f) => f.impact === "serious" || f.impact === "critical"), all };
}

/**
 * An uncompressed 24-bit BMP of `width` x `height` with a colour pattern and per-pixel grain: a
 * stand-in for a phone photo (large, and it does not compress away when re-encoded).
 */
export function makeBmp(width: number, height: number, seed = 1): Uint8Array {
  const row = Math.ceil((width * 3) / 4) * 4;
  const size = 54 + row * height;
  const bytes = new Uint8Array(size);
  const view = new DataView(bytes.buffer);
  bytes[0] = 0x42;
  bytes[1] = 0x4d;
  view.setUint32(2, size, true);
  view.setUint32(10, 54, true);
  view.setUint32(14, 40, true);
  view.setInt32(18, width, true);
  view.setInt32(22, height, true);
  view.setUint16(26, 1, true);
  view.setUint16(28, 24, true);
  view.setUint32(34, row * height, true);
  let state = seed >>> 0 || 1;
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      state = (state * 1664525 + 1013904223) >>> 0;
      const noise = state >>> 30;
      const at = 54 + y * row + x * 3;
      bytes[at] = (x * 255 / width + noise) & 255;
      bytes[at + 1] = (y * 255 / height + noise) & 255;
      bytes[at + 2] = ((x + y) * 128 / (width + height) + 64 + noise) & 255;
    }
  }
  return bytes;
}
