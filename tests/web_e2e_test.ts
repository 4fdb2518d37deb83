/**
 * The web app end to end in a real headless Chromium (issue 35), against a real account host and
 * index on loopback ports, each member in a browser context of their own: sign-up with an invite
 * code (a wrong one first), follow, a post with a photo fitted into the blob limit and its alt
 * text, the timeline, like, reply, the unread badge, notifications, the thread, a profile
 * edit seen by the other member, an access token that expires mid-session (refreshed once, the
 * action succeeds), a failed refresh (back to login, with the reason), a session surviving a
 * reload, hostile text shown as text, search, delete, block and mute from a profile (and unmute
 * in Settings), reports of a post and of an account to the operator (and the rate limit's answer),
 * a password change, an app password created and revoked, a post the operator took down listed in
 * Settings, and account deletion.
 * Every main screen is checked with axe-core
 * and captured to `screenshots/` in both colour schemes at 360 and 1280 px.
 */

import assert from "node:assert/strict";
import type { Page } from "puppeteer-core";
import { INVALID_INVITE_MESSAGE } from "../pds/accounts/accounts.ts";
import { createInviteCodes } from "../pds/accounts/invites.ts";
import { listReports } from "../pds/moderation/reports.ts";
import {
  checkAccessibility,
  ensureWebBuilt,
  launchBrowser,
  makeBmp,
  SCREENSHOT_DIR,
  screenshotAll,
  setLook,
  settle,
  skipBrowserTests,
} from "./_browser.ts";
import { runAdminCli } from "../scripts/admin.ts";
import { startSystem } from "./_system.ts";
import { makeTempDir } from "./_util.ts";

const TIMEOUT = 15_000;
const PASSWORD_A = "alice-password-1";
const PASSWORD_B = "bob-password-12";

/** Page-side code is written as strings: test files are type-checked without the DOM library. */
const q = JSON.stringify;

/** An expression for the post `article` whose text contains `text`. */
function postWith(text: string): string {
  return `[...document.querySelectorAll("article.post")].find((a) => a.querySelector(".text")?.textContent.includes(${
    q(text)
  }))`;
}

async function waitUntil(page: Page, expr: string, timeout = TIMEOUT): Promise<void> {
  try {
    await page.waitForFunction(expr, { timeout, polling: 50 });
  } catch (err) {
    const h1 = await page.evaluate(`document.querySelector("h1")?.textContent`).catch(() => "?");
    throw new Error(`Timed out waiting for ${expr} on ${page.url()} (h1: ${h1})`, { cause: err });
  }
}

/** Clicks the element `selector` inside the post containing `text`, with a real mouse click. */
async function clickInPost(page: Page, text: string, selector: string): Promise<void> {
  await waitUntil(page, `${postWith(text)}?.querySelector(${q(selector)})`);
  const handle = await page.evaluateHandle(`${postWith(text)}.querySelector(${q(selector)})`);
  const el = handle.asElement();
  assert.ok(el, `no ${selector} in the post "${text}"`);
  await (el as unknown as { click(): Promise<void> }).click();
}

async function textOf(page: Page, expr: string): Promise<string> {
  return await page.evaluate(`(${expr})?.textContent ?? null`) as string;
}

async function fill(page: Page, selector: string, value: string): Promise<void> {
  await page.waitForSelector(selector, { timeout: TIMEOUT });
  await page.$eval(selector, (el) => ((el as unknown as { value: string }).value = ""));
  await page.type(selector, value);
}

async function heading(page: Page, title: string): Promise<void> {
  await waitUntil(page, `document.querySelector("h1")?.textContent.startsWith(${q(title)})`);
}

async function go(page: Page, url: string, title: string): Promise<void> {
  await page.goto(url, { waitUntil: "domcontentloaded" });
  await heading(page, title);
}

/** Navigates inside the app by a real click on a link whose href is `href`. */
async function clickLink(page: Page, href: string): Promise<void> {
  await page.waitForSelector(`a[href="${href}"]`, { timeout: TIMEOUT });
  await page.click(`a[href="${href}"]`);
}

async function assertAccessible(page: Page, screen: string): Promise<void> {
  const { serious, all } = await checkAccessibility(page);
  if (all.length > 0) {
    console.log(
      `axe, ${screen}: ${
        all.map((f) => `${f.id} [${f.impact}] ${f.targets.join(" ")}`).join("; ")
      }`,
    );
  }
  assert.deepEqual(serious, [], `serious or critical accessibility violations on ${screen}`);
}

async function capture(page: Page, screen: string): Promise<void> {
  await assertAccessible(page, screen);
  await screenshotAll(page, screen);
}

Deno.test({
  name:
    "web app: two members sign up, follow, post a photo, like, reply, get notified and edit a profile",
  ignore: skipBrowserTests(),
  // puppeteer's pipe to Chromium outlives the test's ops by a tick after close.
  sanitizeOps: false,
  sanitizeResources: false,
  async fn(t) {
    await ensureWebBuilt();
    let pdsShiftMs = 0;
    await using sys = await startSystem({
      web: true,
      // Two reports an hour, so the third shows the rate limit's answer.
      pdsEnv: { PDS_INVITE_REQUIRED: "true", PDS_REPORTS_PER_HOUR: "2" },
      pdsNow: () => Date.now() + pdsShiftMs,
    });
    await using files = await makeTempDir("web-e2e-");
    const photo = `${files.path}/photo.bmp`;
    const avatar = `${files.path}/avatar.bmp`;
    const notImage = `${files.path}/notes.png`;
    await Deno.writeTextFile(notImage, "not a picture at all");
    await Deno.writeFile(photo, makeBmp(1400, 1000, 7)); // 4.2 MB: over the 1 MiB blob limit
    await Deno.writeFile(avatar, makeBmp(240, 240, 3));
    const [codeA, codeB] = await createInviteCodes(sys.pds.ctx.kv, { count: 2, uses: 1 });
    const base = sys.appviewUrl;

    await using chromium = await launchBrowser();
    const ctxA = await chromium.browser.createBrowserContext();
    const ctxB = await chromium.browser.createBrowserContext();
    const a = await ctxA.newPage();
    const b = await ctxB.newPage();
    const pageErrors: string[] = [];
    const dialogs: string[] = [];
    const refreshes = { a: 0 };
    for (const [name, page] of [["A", a], ["B", b]] as const) {
      await page.setViewport({ width: 1280, height: 900 });
      page.on("pageerror", (e) => pageErrors.push(`${name}: ${e}`));
      page.on("dialog", async (d) => {
        if (d.message().startsWith("Delete this post")) return await d.accept();
        dialogs.push(`${name}: ${d.type()} ${d.message()}`);
        await d.dismiss();
      });
    }
    const requestsA: string[] = [];
    a.on("response", (r) => {
      if (r.url().includes("/xrpc/")) {
        requestsA.push(
          `${r.request().method()} ${r.url().split("?")[0].split("/").pop()} ${r.status()}`,
        );
      }
    });
    a.on("request", (r) => {
      if (r.method() === "POST" && r.url().endsWith("/xrpc/com.atproto.server.refreshSession")) {
        refreshes.a++;
      }
    });

    await t.step(
      "signed out, / shows the login screen; sign-up asks for an invite code",
      async () => {
        await go(a, `${base}/`, "Log in");
        await capture(a, "login");
        await clickLink(a, "/signup");
        await heading(a, "Create an account");
        await a.waitForSelector("#signup-invite", { timeout: TIMEOUT });
        await capture(a, "signup");
      },
    );

    await t.step(
      "A signs up: a wrong invite code is refused with the server's message, the right one works",
      async () => {
        await fill(a, "#signup-handle", "alice");
        await fill(a, "#signup-password", PASSWORD_A);
        await fill(a, "#signup-invite", "wrong-code-00000");
        await a.click("form button[type=submit]");
        await waitUntil(a, `document.querySelector('[role="alert"]')`);
        const refused = await textOf(a, `document.querySelector('[role="alert"]')`);
        assert.equal(refused, INVALID_INVITE_MESSAGE);
        assert.equal(await a.evaluate(`localStorage.getItem("social.session")`), null);
        await fill(a, "#signup-invite", codeA.code);
        await a.click("form button[type=submit]");
        await heading(a, "Home");
        const session = JSON.parse(
          await a.evaluate(`localStorage.getItem("social.session")`) as string,
        );
        assert.equal(session.handle, "alice.test");
        assert.match(session.did, /^did:plc:/);
        // A follows nobody: the cold-start timeline, saying so.
        await waitUntil(
          a,
          `document.querySelector(".notice")?.textContent.startsWith("You do not follow anyone yet")`,
        );
      },
    );

    await t.step("B signs up in a separate browser context", async () => {
      await go(b, `${base}/signup`, "Create an account");
      await fill(b, "#signup-handle", "bob");
      await fill(b, "#signup-password", PASSWORD_B);
      await fill(b, "#signup-invite", codeB.code);
      await b.click("form button[type=submit]");
      await heading(b, "Home");
      assert.equal(
        await b.evaluate(`JSON.parse(localStorage.getItem("social.session")).handle`),
        "bob.test",
      );
      assert.equal(
        await a.evaluate(`JSON.parse(localStorage.getItem("social.session")).handle`),
        "alice.test",
      );
    });

    await t.step("A follows B from B's profile", async () => {
      await go(a, `${base}/profile/bob.test`, "@bob.test");
      await a.waitForSelector('button.follow[aria-pressed="false"]', { timeout: TIMEOUT });
      assert.equal(await textOf(a, `document.querySelector("button.follow")`), "Follow");
      await a.click("button.follow");
      await a.waitForSelector('button.follow[aria-pressed="true"]', {
        timeout: TIMEOUT,
      });
      // The index learns of the follow: the count on a fresh load says so.
      await waitUntil(a, "true");
      for (let i = 0; i < 50; i++) {
        await go(a, `${base}/profile/bob.test`, "@bob.test");
        if (
          (await textOf(a, `document.querySelector(".counts a[href$='/followers']")`)).startsWith(
            "1",
          )
        ) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      assert.equal(
        await textOf(a, `document.querySelector(".counts a[href$='/followers']")`),
        "1 followers",
      );
      await a.waitForSelector('button.follow[aria-pressed="true"]', { timeout: TIMEOUT });
    });

    const postText = "Sunset over the harbour, first light test";
    const alt = "A gradient of blue and orange with fine grain";
    await t.step(
      "B posts a phone-sized photo: it is scaled below 1 MiB in the browser, with its alt text",
      async () => {
        await go(b, `${base}/`, "Home");
        await fill(b, "form.composer textarea", postText);
        assert.equal(
          await textOf(b, `document.querySelector(".composer .counter")`),
          `${[...postText].length}/160 characters`,
        );
        const input = await b.$("form.composer input[type=file]");
        // A file that is no image: the composer says so and will not post until it is removed.
        await input!.uploadFile(notImage);
        await waitUntil(
          b,
          `document.querySelector('.attachment [role="alert"]')?.textContent === "This file is not an image the browser can read"`,
        );
        assert.equal(
          await b.evaluate(`document.querySelector("form.composer button[type=submit]").disabled`),
          true,
        );
        await b.click(".attachment .link-button");
        await waitUntil(b, `!document.querySelector(".attachment")`);
        assert.equal(
          await b.evaluate(`document.querySelector("form.composer button[type=submit]").disabled`),
          false,
        );
        await input!.uploadFile(photo);
        await waitUntil(
          b,
          `document.querySelector(".attachment .hint")?.textContent.startsWith("Scaled down")`,
        );
        const note = await textOf(b, `document.querySelector(".attachment .hint")`);
        assert.match(note, /^Scaled down from 4\.2 MB to \d+ KB to fit$/);
        await fill(b, ".attachment input[type=text]", alt);
        await b.click("form.composer button[type=submit]");
        await waitUntil(b, `${postWith(postText)}?.querySelector("img")?.alt === ${q(alt)}`);
      },
    );

    await t.step("A's open timeline offers B's newer post without a reload", async () => {
      await go(a, `${base}/`, "Home");
      await waitUntil(a, `${postWith(postText)}`);
      // A marker on the window survives only if the page is never reloaded.
      await a.evaluate(`window.__samePage = true`);
      await b.type("form.composer textarea", "A second one, no picture this time");
      await b.click("form.composer button[type=submit]");
      await waitUntil(b, `${postWith("A second one")}`);
      // Checked every 20 s and when the window gets focus.
      await waitUntil(
        a,
        `(dispatchEvent(new Event("focus")), document.querySelector("button.new-posts")?.textContent === "1 new post")`,
      );
      assert.equal(await a.evaluate(`${postWith("A second one")} === undefined`), true);
      await a.click("button.new-posts");
      await waitUntil(
        a,
        `document.querySelector("article.post .text")?.textContent === "A second one, no picture this time"`,
      );
      assert.equal(await a.evaluate(`window.__samePage`), true);
      assert.equal(await a.evaluate(`!!document.querySelector("button.new-posts")`), false);
    });

    await t.step(
      "A sees the post with its image from the account host, likes it and replies",
      async () => {
        await go(a, `${base}/`, "Home");
        await waitUntil(a, `${postWith(postText)}?.querySelector("img")?.complete`);
        const img = await a.evaluate(
          `(() => { const i = ${
            postWith(postText)
          }.querySelector("img"); return { alt: i.alt, src: i.src, w: i.naturalWidth }; })()`,
        ) as { alt: string; src: string; w: number };
        assert.equal(img.alt, alt);
        assert.ok(
          img.src.startsWith(`${sys.pdsUrl}/xrpc/com.atproto.sync.getBlob?did=did%3Aplc%3A`),
          img.src,
        );
        assert.ok(img.w > 0 && img.w <= 2048, `the image loaded (${img.w} px wide)`);
        await clickInPost(a, postText, "button.like");
        await waitUntil(
          a,
          `${postWith(postText)}.querySelector('button.like[aria-pressed="true"]:not([disabled])')`,
        );
        assert.equal(
          await textOf(
            a,
            `${postWith(postText)}.querySelector("button.like .count")`,
          ),
          "1",
        );
        await capture(a, "home");

        await clickInPost(a, postText, 'button[aria-label="Reply to @bob.test"]');
        await a.waitForSelector("dialog[open] textarea", { timeout: TIMEOUT });
        await assertAccessible(a, "reply dialog");
        await a.type("dialog[open] textarea", "What a picture! Where was it taken?");
        await a.click("dialog[open] form button[type=submit]");
        await waitUntil(a, `!document.querySelector("dialog[open]")`);
      },
    );

    await t.step(
      "B sees the unread badge (follow, like, reply), the notifications, then the thread with A's reply",
      async () => {
        // The badge is counted again when the window gets focus (and every 30 s).
        await waitUntil(
          b,
          `(dispatchEvent(new Event("focus")), document.querySelector('a[href="/notifications"]')?.textContent === "Notifications3 unread")`,
        );
        assert.equal(await textOf(b, `document.querySelector(".badge")`), "3 unread");
        // Where the label shows, the badge sits after it, not over it.
        const overlap = `(() => {
          const label = document.querySelector('a[href="/notifications"] .nav-label').getBoundingClientRect();
          const badge = document.querySelector(".badge").getBoundingClientRect();
          return badge.left < label.right && label.left < badge.right;
        })()`;
        assert.equal(await b.evaluate(overlap), false);
        await capture(b, "unread-badge");
        await clickLink(b, "/notifications");
        await heading(b, "Notifications");
        await waitUntil(b, `document.querySelectorAll("li.notification").length === 3`);
        const items = await b.evaluate(
          `[...document.querySelectorAll("li.notification .notification-body > p:first-child")].map((p) => p.textContent)`,
        ) as string[];
        assert.equal(items.length, 3);
        assert.match(items[0], /^@alice\.test replied to your post \(new\) · /);
        assert.match(items[1], /^@alice\.test liked your post \(new\) · /);
        assert.match(items[2], /^@alice\.test followed you \(new\) · /);
        assert.equal(
          await textOf(b, `document.querySelector("li.notification .subject-text")`),
          "What a picture! Where was it taken?",
        );
        // Opening the list marked them seen: the badge goes away.
        await waitUntil(
          b,
          `document.querySelector('a[href="/notifications"]').textContent === "Notifications"`,
        );
        await capture(b, "notifications");

        await b.click("li.notification .verb");
        await heading(b, "Thread");
        await waitUntil(
          b,
          `document.querySelector("article.post.focused .text")?.textContent === "What a picture! Where was it taken?"`,
        );
        assert.equal(
          await textOf(b, `document.querySelector(".ancestors article.post .text")`),
          postText,
        );
        await clickInPost(b, postText, "a.open");
        await waitUntil(
          b,
          `document.querySelector("article.post.focused .text")?.textContent === ${q(postText)}`,
        );
        await waitUntil(b, `document.querySelector(".replies h2")?.textContent === "1 reply"`);
        assert.equal(
          await textOf(b, `document.querySelector(".replies article.post .text")`),
          "What a picture! Where was it taken?",
        );
        assert.equal(
          await textOf(
            b,
            `document.querySelector("article.post.focused button.like .count")`,
          ),
          "1",
        );
        await capture(b, "thread");
      },
    );

    await t.step(
      "B edits the profile (avatar, name as markup, description) and A sees it",
      async () => {
        await go(b, `${base}/settings/profile`, "Edit profile");
        await capture(b, "edit-profile");
        const input = await b.$("#edit-avatar");
        await input!.uploadFile(avatar);
        await b.waitForSelector('img[alt="New avatar"]', { timeout: TIMEOUT });
        await fill(b, "#edit-name", "<i>Bob</i> the <b>builder</b>");
        await fill(
          b,
          "#edit-description",
          "Builds things. Site: https://bob.example/about and javascript:alert(1)",
        );
        await b.click("form button[type=submit]");
        await waitUntil(
          b,
          `document.querySelector('.notice[role="status"]')?.textContent.startsWith("Saved.")`,
        );

        let loaded = false;
        for (let i = 0; i < 60 && !loaded; i++) {
          await go(a, `${base}/profile/bob.test`, "<i>Bob</i>");
          loaded = await a.evaluate(
            `!!document.querySelector(".profile-id img.avatar") && document.querySelector(".profile-id img.avatar").src.includes("getBlob")`,
          ) as boolean;
          if (!loaded) await new Promise((r) => setTimeout(r, 100));
        }
        assert.ok(loaded, "A sees B's new avatar");
        await waitUntil(
          a,
          `document.querySelector(".profile-id img.avatar").complete && document.querySelector(".profile-id img.avatar").naturalWidth > 0`,
        );
        assert.equal(
          await textOf(a, `document.querySelector("h1.profile-name")`),
          "<i>Bob</i> the <b>builder</b>",
        );
        assert.equal(
          await a.evaluate(`document.querySelector("h1.profile-name").children.length`),
          0,
        );
        assert.deepEqual(
          await a.evaluate(
            `[...document.querySelectorAll(".description a")].map((x) => x.getAttribute("href"))`,
          ),
          ["https://bob.example/about"],
        );
        await capture(a, "profile");
        // The same profile by DID, as notification and follower links open it.
        const didB = await b.evaluate(
          `JSON.parse(localStorage.getItem("social.session")).did`,
        ) as string;
        await go(a, `${base}/profile/${didB}`, "<i>Bob</i>");
        assert.equal(
          await textOf(a, `document.querySelector(".profile-head .handle")`),
          "@bob.test",
        );
        await go(a, `${base}/profile/nobody.test`, "Profile");
        assert.equal(
          await textOf(a, `document.querySelector(".state.empty")`),
          "No account here goes by @nobody.test.",
        );
        await clickLink(a, "/");
        await go(a, `${base}/profile/bob.test`, "<i>Bob</i>");
        await clickLink(a, "/profile/bob.test/followers");
        await heading(a, "Followers");
        await waitUntil(a, `document.querySelectorAll(".actor-card").length === 1`);
        assert.equal(
          await textOf(a, `document.querySelector(".actor-card .handle")`),
          "@alice.test",
        );
        await capture(a, "followers");
      },
    );

    await t.step(
      "an access token that expires mid-session is refreshed once and the action succeeds",
      async () => {
        // Tokens minted by the account host two hours ago: the access token expired an hour ago.
        pdsShiftMs = -2 * 3600_000;
        const old = await sys.client().login("alice.test", PASSWORD_A);
        pdsShiftMs = 0;
        await go(a, `${base}/`, "Home");
        await a.evaluate(`localStorage.setItem("social.session", ${q(JSON.stringify(old))})`);
        refreshes.a = 0;
        await clickInPost(a, postText, "button.repost");
        await waitUntil(
          a,
          `${
            postWith(postText)
          }.querySelector('button.repost[aria-pressed="true"]:not([disabled])')`,
        );
        assert.equal(refreshes.a, 1, requestsA.slice(-8).join(", "));
        const stored = JSON.parse(
          await a.evaluate(`localStorage.getItem("social.session")`) as string,
        );
        assert.notEqual(stored.accessJwt, old.accessJwt);
        assert.notEqual(stored.refreshJwt, old.refreshJwt);
        // The account host stored it: the index serves A's repost record for the post.
        const href = await a.evaluate(
          `${postWith(postText)}.querySelector("a.open").getAttribute("href")`,
        ) as string;
        const [, , did, , rkey] = href.split("/").map(decodeURIComponent);
        const uri = `at://${did}/app.social.feed.post/${rkey}`;
        const asA = sys.client();
        await asA.login("alice.test", PASSWORD_A);
        const state = await asA.viewerState({ uris: [uri] });
        assert.match(
          state.reposts[uri] ?? "",
          new RegExp(`^at://${stored.did}/app\\.social\\.feed\\.repost/`),
        );
      },
    );

    await t.step(
      "a failed refresh returns to the login screen with a message; logging in again survives a reload",
      async () => {
        const bad = JSON.parse(
          await a.evaluate(`localStorage.getItem("social.session")`) as string,
        );
        pdsShiftMs = -2 * 3600_000;
        const expired = await sys.client().login("alice.test", PASSWORD_A);
        pdsShiftMs = 0;
        await a.evaluate(
          `localStorage.setItem("social.session", ${
            q(JSON.stringify({ ...bad, accessJwt: expired.accessJwt, refreshJwt: "not-a-token" }))
          })`,
        );
        await clickInPost(a, postText, "button.repost");
        await heading(a, "Log in");
        assert.equal(
          await textOf(a, `document.querySelector(".notice")`),
          "Your session has ended. Log in again.",
        );
        assert.equal(await a.evaluate(`localStorage.getItem("social.session")`), null);
        await fill(a, "#login-identifier", "alice.test");
        await fill(a, "#login-password", PASSWORD_A);
        await a.click("form button[type=submit]");
        await heading(a, "Home");
        await a.reload({ waitUntil: "domcontentloaded" });
        await heading(a, "Home");
        await waitUntil(a, `${postWith(postText)}`);
      },
    );

    const hostile =
      `<img src=x onerror="window.__pwned=1"> <script>window.__pwned=2</script> javascript:window.__pwned=3 https://example.com/ok`;
    await t.step(
      "hostile post text is shown as text; only the http(s) URL is a link; nothing runs",
      async () => {
        await fill(a, "form.composer textarea", hostile);
        await a.click("form.composer button[type=submit]");
        await waitUntil(a, `${postWith("window.__pwned=1")}`);
        assert.equal(
          await textOf(a, `${postWith("window.__pwned=1")}.querySelector(".text")`),
          hostile,
        );
        assert.equal(await a.evaluate(`typeof window.__pwned`), "undefined");
        assert.equal(
          await a.evaluate(
            `document.querySelectorAll('img[src="x"], script:not([src]):not([type="application/json"])').length`,
          ),
          0,
        );
        assert.deepEqual(
          await a.evaluate(
            `[...${
              postWith("window.__pwned=1")
            }.querySelectorAll(".text a")].map((x) => [x.getAttribute("href"), x.rel])`,
          ),
          [["https://example.com/ok", "noopener noreferrer nofollow ugc"]],
        );
        assert.equal(
          await a.evaluate(`document.querySelectorAll('a[href^="javascript:" i]').length`),
          0,
        );
        // B sees it the same way in search.
        await go(b, `${base}/search?q=pwned`, "Search");
        await waitUntil(b, `${postWith("window.__pwned=1")}`);
        assert.equal(
          await textOf(b, `${postWith("window.__pwned=1")}.querySelector(".text")`),
          hostile,
        );
        assert.equal(await b.evaluate(`typeof window.__pwned`), "undefined");
      },
    );

    await t.step("the keyboard alone reaches the content and likes a post", async () => {
      await go(a, `${base}/`, "Home");
      const second = "A second one, no picture this time";
      await waitUntil(a, `${postWith(second)}?.querySelector('button.like[aria-pressed="false"]')`);
      await a.keyboard.press("Tab");
      assert.equal(await a.evaluate(`document.activeElement.textContent`), "Skip to content");
      await a.keyboard.press("Enter");
      assert.equal(await a.evaluate(`document.activeElement.id`), "main");
      let reached = false;
      for (let i = 0; i < 60 && !reached; i++) {
        await a.keyboard.press("Tab");
        reached = await a.evaluate(
          `document.activeElement === ${postWith(second)}.querySelector("button.like")`,
        ) as boolean;
      }
      assert.ok(reached, "Tab reaches the post's like button");
      await a.keyboard.press("Space");
      await waitUntil(
        a,
        `${postWith(second)}.querySelector('button.like[aria-pressed="true"]:not([disabled])')`,
      );
    });

    await t.step("search finds posts; the empty and no-result states say so", async () => {
      await go(a, `${base}/search`, "Search");
      assert.equal(
        await textOf(a, `document.querySelector(".state.empty")`),
        "Type words to find posts that contain them.",
      );
      await fill(a, "#search-q", "harbour");
      await a.click(".search-form button[type=submit]");
      await waitUntil(a, `${postWith(postText)}`);
      assert.equal(new URL(a.url()).search, "?q=harbour");
      await capture(a, "search");
      await fill(a, "#search-q", "zebraunicorn");
      await a.click(".search-form button[type=submit]");
      await waitUntil(
        a,
        `document.querySelector(".state.empty")?.textContent === "No posts match “zebraunicorn”."`,
      );
    });

    await t.step(
      "A blocks B: B's posts leave A's timeline and search; unblocking brings them back",
      async () => {
        const harbour = `${base}/search?q=harbour`;
        await go(a, `${base}/profile/bob.test`, "<i>Bob</i>");
        await a.waitForSelector("button.danger:not([disabled])", { timeout: TIMEOUT });
        assert.equal(await textOf(a, `document.querySelector("button.danger")`), "Block");
        await a.click("button.danger");
        await a.waitForSelector('button.danger[aria-pressed="true"]:not([disabled])', {
          timeout: TIMEOUT,
        });
        assert.equal(await textOf(a, `document.querySelector("button.danger")`), "Unblock");
        await waitUntil(a, `document.querySelector(".feed .state.empty")`);
        assert.match(
          await textOf(a, `document.querySelector(".feed .state.empty")`),
          /You blocked/,
        );
        await capture(a, "profile-blocked");
        await go(a, `${base}/`, "Home");
        await waitUntil(a, `document.querySelector(".state.empty, article.post")`);
        assert.equal(await a.evaluate(`!!${postWith(postText)}`), false);
        await go(a, harbour, "Search");
        await waitUntil(a, `document.querySelector(".state.empty")`);
        assert.equal(await a.evaluate(`!!${postWith(postText)}`), false);
        await go(a, `${base}/profile/bob.test`, "<i>Bob</i>");
        await a.waitForSelector('button.danger[aria-pressed="true"]:not([disabled])', {
          timeout: TIMEOUT,
        });
        await a.click("button.danger");
        await a.waitForSelector('button.danger[aria-pressed="false"]:not([disabled])', {
          timeout: TIMEOUT,
        });
        await waitUntil(a, postWith(postText));
        await go(a, harbour, "Search");
        await waitUntil(a, postWith(postText));
        await go(a, `${base}/`, "Home");
        await waitUntil(a, postWith(postText));
      },
    );

    await t.step("A mutes B: B's posts leave A's timeline until unmuted", async () => {
      await go(a, `${base}/profile/bob.test`, "<i>Bob</i>");
      const mute = `.safety-actions button:not(.danger)`;
      await a.waitForSelector(`${mute}[aria-pressed="false"]:not([disabled])`, {
        timeout: TIMEOUT,
      });
      await a.click(mute);
      await a.waitForSelector(`${mute}[aria-pressed="true"]:not([disabled])`, { timeout: TIMEOUT });
      assert.equal(await textOf(a, `document.querySelector(${q(mute)})`), "Unmute");
      // Muting is private to A: B's profile still shows B's posts.
      await waitUntil(a, postWith(postText));
      await go(a, `${base}/`, "Home");
      await waitUntil(a, `document.querySelector(".state.empty, article.post")`);
      assert.equal(await a.evaluate(`!!${postWith(postText)}`), false);
      // The settings screen lists B among the muted accounts; unmuting there brings B back.
      await clickLink(a, "/settings");
      await heading(a, "Settings");
      await waitUntil(a, `document.querySelector('[aria-label="Muted accounts"] li')`);
      assert.match(
        await textOf(a, `document.querySelector('[aria-label="Muted accounts"]')`),
        /@bob\.test/,
      );
      await waitUntil(a, `!document.querySelector(".state.loading")`);
      await capture(a, "settings");
      await a.evaluate(`document.querySelector("#mutes-title").scrollIntoView()`);
      await screenshotAll(a, "settings-mutes");
      await a.click('[aria-label="Muted accounts"] li button');
      await waitUntil(
        a,
        `document.querySelector("#mutes-title").parentElement.querySelector(".state.empty")?.textContent === "You have not muted anyone."`,
      );
      await go(a, `${base}/`, "Home");
      await waitUntil(a, postWith(postText));
    });

    await t.step(
      "A reports one of B's posts and B's account; the account host keeps both; a third is refused with when to try again",
      async () => {
        const second = "A second one, no picture this time";
        const didA = await a.evaluate(
          `JSON.parse(localStorage.getItem("social.session")).did`,
        ) as string;
        // Not on one's own posts.
        await go(a, `${base}/profile/alice.test`, "@alice.test");
        await waitUntil(a, `${postWith("window.__pwned=1")}?.querySelector("button.delete")`);
        assert.equal(
          await a.evaluate(`${postWith("window.__pwned=1")}.querySelector("button.report")`),
          null,
        );
        await go(a, `${base}/profile/bob.test`, "<i>Bob</i>");
        const reportButton = `${postWith(second)}.querySelector("button.report")`;
        // Opened with the first reason focused; Escape closes it and focus goes back.
        await clickInPost(a, second, "button.report");
        await waitUntil(a, `document.activeElement?.matches("dialog[open] input[type=radio]")`);
        assert.equal(
          await a.evaluate(`document.activeElement.value`),
          "com.atproto.moderation.defs#reasonSpam",
        );
        const send = "dialog[open] button[type=submit]";
        assert.equal(
          await a.$eval(send, (el) => (el as unknown as { disabled: boolean }).disabled),
          true,
        );
        await a.keyboard.press("Escape");
        await waitUntil(a, `!document.querySelector("dialog")`);
        await waitUntil(a, `document.activeElement === ${reportButton}`);

        await clickInPost(a, second, "button.report");
        await a.waitForSelector("dialog[open] input[type=radio]", { timeout: TIMEOUT });
        await a.click('dialog[open] input[value="com.atproto.moderation.defs#reasonRude"]');
        const reason = "Keeps replying to me with insults";
        await a.type("dialog[open] textarea", reason);
        assert.equal(
          await textOf(a, `document.querySelector("dialog[open] .counter")`),
          `${reason.length}/2000 characters`,
        );
        await capture(a, "report");
        await a.click(send);
        await waitUntil(a, `document.querySelector('dialog[open] [role="status"]')`);
        assert.equal(
          await textOf(a, `document.querySelector('dialog[open] [role="status"]')`),
          "Thanks, the server's operator will look at it.",
        );
        assert.equal(await textOf(a, `document.activeElement`), "Close");
        await a.keyboard.press("Enter");
        await waitUntil(a, `!document.querySelector("dialog")`);

        const openProfileReport = async () => {
          await a.click(".safety-actions button.report");
          await a.waitForSelector("dialog[open] input[type=radio]", { timeout: TIMEOUT });
          assert.equal(
            await textOf(a, `document.querySelector("dialog[open] h2")`),
            "Report @bob.test",
          );
        };
        await openProfileReport();
        await a.click('dialog[open] input[value="com.atproto.moderation.defs#reasonSpam"]');
        await a.click(send);
        await waitUntil(a, `document.querySelector('dialog[open] [role="status"]')`);
        await a.keyboard.press("Escape");
        await waitUntil(a, `!document.querySelector("dialog")`);

        const res = await fetch(
          `${sys.pdsUrl}/xrpc/com.atproto.repo.listRecords?repo=bob.test&collection=app.social.feed.post`,
        );
        const { records } = await res.json() as {
          records: { uri: string; cid: string; value: { text: string } }[];
        };
        const post = records.find((r) => r.value.text === second)!;
        const didB = post.uri.split("/")[2];
        const stored = () =>
          listReports(sys.pds.ctx.kv, { all: true }).then((list) =>
            list.map(({ createdAt: _, ...rest }) => rest)
          );
        const expected = [
          {
            id: 1,
            reasonType: "com.atproto.moderation.defs#reasonRude",
            reason,
            subject: { $type: "com.atproto.repo.strongRef", uri: post.uri, cid: post.cid },
            reportedBy: didA,
            status: "open",
          },
          {
            id: 2,
            reasonType: "com.atproto.moderation.defs#reasonSpam",
            subject: { $type: "com.atproto.admin.defs#repoRef", did: didB },
            reportedBy: didA,
            status: "open",
          },
        ];
        assert.deepEqual(await stored(), expected);

        // The third in the hour: the dialog says when to try again, from Retry-After.
        await openProfileReport();
        await a.click('dialog[open] input[value="com.atproto.moderation.defs#reasonOther"]');
        const refused = a.waitForResponse((r) =>
          r.url().endsWith("/xrpc/com.atproto.moderation.createReport") && r.status() === 429
        );
        await a.click(send);
        const retryAfter = Number((await refused).headers()["retry-after"]);
        assert.ok(retryAfter > 1700 && retryAfter <= 1800, `Retry-After ${retryAfter}`);
        await waitUntil(a, `document.querySelector('dialog[open] [role="alert"]')`);
        assert.equal(
          await textOf(a, `document.querySelector('dialog[open] [role="alert"]')`),
          "You have sent as many reports as this server takes for now. Try again in " +
            `${Math.ceil(retryAfter / 60)} minutes.`,
        );
        await capture(a, "report-limited");
        // At 360 px the dialog scrolls: its end, with the message and the buttons.
        for (const scheme of ["light", "dark"] as const) {
          await setLook(a, scheme, 360);
          await a.evaluate(`document.querySelector("dialog[open]").scrollTop = 1e6`);
          await settle(a);
          const path = new URL(`report-limited-end-${scheme}-360.png`, SCREENSHOT_DIR).pathname;
          await a.screenshot({ path: path as `${string}.png` });
        }
        await setLook(a, "light", 1280);
        await a.click("dialog[open] button.secondary");
        await waitUntil(a, `!document.querySelector("dialog")`);
        assert.equal(
          await a.evaluate(
            `document.activeElement === document.querySelector(".safety-actions button.report")`,
          ),
          true,
        );
        assert.deepEqual(await stored(), expected);
      },
    );

    await t.step("A deletes the hostile post; logging out clears the session", async () => {
      await go(a, `${base}/profile/alice.test`, "@alice.test");
      await clickInPost(a, "window.__pwned=1", "button.delete");
      await waitUntil(a, `!${postWith("window.__pwned=1")}`);
      await a.click("button.nav-logout");
      await heading(a, "Log in");
      assert.equal(await a.evaluate(`localStorage.getItem("social.session")`), null);
    });

    const NEW_PASSWORD_B = "bob-new-password-34";
    await t.step(
      "B changes the password in Settings (a wrong current one is refused) and logs in with the new one",
      async () => {
        await go(b, `${base}/`, "Home");
        await clickLink(b, "/settings");
        await heading(b, "Settings");
        await fill(b, "#password-current", "not-the-password");
        await fill(b, "#password-new", NEW_PASSWORD_B);
        await b.click('[aria-labelledby="password-title"] button[type=submit]');
        await waitUntil(
          b,
          `document.querySelector('[aria-labelledby="password-title"] [role="alert"]')`,
        );
        assert.equal(
          await textOf(
            b,
            `document.querySelector('[aria-labelledby="password-title"] [role="alert"]')`,
          ),
          "Current password is wrong",
        );
        await fill(b, "#password-current", PASSWORD_B);
        await b.click('[aria-labelledby="password-title"] button[type=submit]');
        await waitUntil(
          b,
          `document.querySelector('[aria-labelledby="password-title"] .notice')?.textContent === "Your password is changed."`,
        );
        await b.click("button.nav-logout");
        await heading(b, "Log in");
        await fill(b, "#login-identifier", "bob.test");
        await fill(b, "#login-password", PASSWORD_B);
        await b.click("form button[type=submit]");
        await waitUntil(b, `document.querySelector('[role="alert"]')`);
        await fill(b, "#login-password", NEW_PASSWORD_B);
        await b.click("form button[type=submit]");
        await heading(b, "Home");
      },
    );

    await t.step("B creates an app password, sees it once, and revokes it", async () => {
      await go(b, `${base}/settings`, "Settings");
      const part = `document.querySelector('[aria-labelledby="app-passwords-title"]')`;
      await waitUntil(b, `${part}.querySelector(".state.empty")`);
      await fill(b, "#app-password-name", "Other app");
      await b.click('[aria-labelledby="app-passwords-title"] button[type=submit]');
      await waitUntil(b, `${part}.querySelector("code.secret")`);
      assert.match(
        await textOf(b, `${part}.querySelector("code.secret")`),
        /^[a-z0-9]{4}-[a-z0-9]{4}-[a-z0-9]{4}-[a-z0-9]{4}$/i,
      );
      await waitUntil(b, `document.querySelector('[aria-label="App passwords"] li')`);
      assert.match(
        await textOf(b, `document.querySelector('[aria-label="App passwords"] li')`),
        /Other app/,
      );
      await capture(b, "settings-app-password");
      await b.click('button[aria-label="Revoke Other app"]');
      await waitUntil(
        b,
        `${part}.querySelector(".state.empty") && !${part}.querySelector("code.secret")`,
      );
    });

    await t.step(
      "the operator takes B's photo post down: Settings lists it, reason as text",
      async () => {
        const res = await fetch(
          `${sys.pdsUrl}/xrpc/com.atproto.repo.listRecords?repo=bob.test&collection=app.social.feed.post`,
        );
        const { records } = await res.json() as {
          records: { uri: string; value: { text: string } }[];
        };
        const uri = records.find((r) => r.value.text === postText)!.uri;
        const env = { PDS_KV_PATH: sys.pds.ctx.config.kvPath, PDS_JWT_SECRET: "x".repeat(16) };
        const reason = "Not your photo <b>(copyright)</b>";
        const quiet = { out: () => {}, err: () => {} };
        assert.equal(
          await runAdminCli(["record", "takedown", uri, "--reason", reason], env, quiet),
          0,
        );
        await go(b, `${base}/settings`, "Settings");
        const item = `document.querySelector('[aria-label="Removed by the operator"] li')`;
        await waitUntil(b, item);
        assert.equal(
          await textOf(b, `${item}.querySelector(".text")`),
          postText,
        );
        assert.match(await textOf(b, item), /^Post.*Reason: Not your photo <b>\(copyright\)<\/b>$/);
        assert.equal(await b.evaluate(`${item}.querySelector("b")`), null);
        await b.evaluate(`document.querySelector("#removed-title").scrollIntoView()`);
        await capture(b, "settings-removed");
      },
    );

    await t.step("B deletes the account and ends on the login screen, saying so", async () => {
      await go(b, `${base}/settings`, "Settings");
      const part = `document.querySelector('[aria-labelledby="delete-title"]')`;
      await waitUntil(b, `${part}.querySelector("button")`);
      await b.click('[aria-labelledby="delete-title"] button');
      await b.waitForSelector("#delete-token", { timeout: TIMEOUT });
      assert.match(
        await b.$eval("#delete-token", (el) => (el as unknown as { value: string }).value),
        /^[a-z0-9]{5}-[a-z0-9]{5}$/i,
      );
      await fill(b, "#delete-password", NEW_PASSWORD_B);
      await b.evaluate(`document.querySelector("#delete-title").scrollIntoView()`);
      await capture(b, "settings-delete");
      await b.click('[aria-labelledby="delete-title"] button[type=submit]');
      await heading(b, "Log in");
      assert.equal(
        await textOf(b, `document.querySelector(".notice")`),
        "Your account is deleted.",
      );
      assert.equal(await b.evaluate(`localStorage.getItem("social.session")`), null);
      await fill(b, "#login-identifier", "bob.test");
      await fill(b, "#login-password", NEW_PASSWORD_B);
      await b.click("form button[type=submit]");
      await waitUntil(b, `document.querySelector('[role="alert"]')`);
    });

    assert.deepEqual(dialogs, [], "no page opened an alert or prompt");
    assert.deepEqual(pageErrors, [], "no uncaught page errors");
    await settle(a);
  },
});
