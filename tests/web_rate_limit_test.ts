/**
 * The web app's login screen over a real account host whose login limit is reached: the 429's
 * `Retry-After` (exposed to the web app's origin) becomes "try again in N minutes" on the screen,
 * as the member reads it. Screenshots in light and dark, narrow and wide.
 *
 * @module
 */

import assert from "node:assert/strict";
import type { Page } from "puppeteer-core";
import { ensureWebBuilt, launchBrowser, screenshotAll, skipBrowserTests } from "./_browser.ts";
import { startSystem } from "./_system.ts";

const TIMEOUT = 15_000;
/** Page-side code is written as strings: test files are type-checked without the DOM library. */
const ERROR = `document.querySelector(".inline-error")?.textContent ?? ""`;

/** Logs in with `password` and answers the screen's error once the login's answer is shown. */
async function tryLogin(page: Page, password: string): Promise<string> {
  await page.$eval("#login-password", (el) => ((el as unknown as { value: string }).value = ""));
  await page.type("#login-password", password);
  const answered = page.waitForResponse(
    (r) => r.url().endsWith("com.atproto.server.createSession"),
    {
      timeout: TIMEOUT,
    },
  );
  await page.click("form button[type=submit]");
  await answered;
  await page.waitForFunction(
    `!document.querySelector("form[aria-busy=true]") && (${ERROR}) !== ""`,
    { timeout: TIMEOUT, polling: 50 },
  );
  return await page.evaluate(ERROR) as string;
}

Deno.test({
  name: "web app: a login over the account host's limit says when to try again",
  ignore: skipBrowserTests(),
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    await ensureWebBuilt();
    await using sys = await startSystem({
      web: true,
      push: false,
      handleSync: false,
      pdsEnv: { PDS_LOGINS_PER_HOUR: "2" },
    });
    await sys.client().createAccount({ handle: "alice.test", password: "alice-password-1" });
    await using chromium = await launchBrowser();
    const page = await chromium.browser.newPage();
    await page.setViewport({ width: 1280, height: 900 });
    await page.goto(`${sys.appviewUrl}/`, { waitUntil: "domcontentloaded" });
    await page.waitForFunction(`document.querySelector("h1")?.textContent === "Log in"`, {
      timeout: TIMEOUT,
    });
    await page.type("#login-identifier", "alice.test");
    assert.match(await tryLogin(page, "wrong-password-1"), /password/i);
    assert.match(await tryLogin(page, "wrong-password-2"), /password/i);
    const limited = await tryLogin(page, "alice-password-1");
    const m = /^Too many attempts: try again in (\d+) minutes?\.$/.exec(limited);
    assert.ok(m, `the login screen said: ${limited}`);
    assert.ok(Number(m[1]) >= 1 && Number(m[1]) <= 60, limited);
    assert.equal(await page.evaluate(`document.querySelector("h1").textContent`), "Log in");
    await screenshotAll(page, "login-rate-limited");
  },
});
