/**
 * `deno task web:build`, second step: takes the bundle `deno bundle` wrote to
 * `web/dist/.bundle/`, names it and the style sheet after their content (so a browser may cache
 * them for good), and writes `web/dist/index.html` from `web/index.html` with those names. The
 * index serves `web/dist/` (`appview/api/web.ts`); `{{CONFIG}}` is filled in there, per server.
 *
 * @module
 */

const WEB = new URL("../web/", import.meta.url);
const DIST = new URL("./dist/", WEB);
const BUNDLE = new URL("./.bundle/", DIST);

async function contentName(bytes: Uint8Array, stem: string, ext: string): Promise<string> {
  const digest = new Uint8Array(
    await crypto.subtle.digest("SHA-256", bytes as Uint8Array<ArrayBuffer>),
  );
  const hex = Array.from(digest.slice(0, 6), (b) => b.toString(16).padStart(2, "0")).join("");
  return `${stem}-${hex}.${ext}`;
}

async function build(): Promise<void> {
  const js = await Deno.readFile(new URL("app.js", BUNDLE));
  const css = await Deno.readFile(new URL("styles.css", WEB));
  const jsName = await contentName(js, "app", "js");
  const cssName = await contentName(css, "app", "css");
  const assets = new URL("./assets/", DIST);
  await Deno.remove(assets, { recursive: true }).catch((e) => {
    if (!(e instanceof Deno.errors.NotFound)) throw e;
  });
  await Deno.mkdir(assets, { recursive: true });
  await Deno.writeFile(new URL(jsName, assets), js);
  await Deno.writeFile(new URL(cssName, assets), css);
  const template = await Deno.readTextFile(new URL("index.html", WEB));
  const html = template.replace("{{JS}}", jsName).replace("{{CSS}}", cssName);
  await Deno.writeTextFile(new URL("index.html", DIST), html);
  console.log(`web: built web/dist (${jsName} ${js.length} bytes, ${cssName} ${css.length} bytes)`);
}

if (import.meta.main) await build();
