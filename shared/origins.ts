/**
 * Parsing of a configured list of web origins for CORS (`APPVIEW_CORS_ORIGINS`,
 * `PDS_CORS_ORIGINS`). Pure: each server's `config.ts` reads the variable and has the error made
 * as its own `ConfigError`.
 *
 * @module
 */

/**
 * Parses a comma-separated list of web origins (`scheme://host[:port]`) into the form browsers
 * send in `Origin`: a trailing slash is dropped, the host lower-cased (IDNA-encoded), a default
 * port removed; empty entries are skipped. Anything else (a path, a query, a bare host name, `*`)
 * could never match, so it throws an error naming `name` and the entry (a `SyntaxError`, or what
 * `opts.error` makes of the message), for the caller to stop startup with instead of silently
 * blocking every browser.
 *
 * @example
 * ```ts
 * parseOrigins("PDS_CORS_ORIGINS", "https://app.example/, http://localhost:5173");
 * // ["https://app.example", "http://localhost:5173"]
 * // "app.example/path" throws SyntaxError: PDS_CORS_ORIGINS entries must be origins such as
 * // https://app.example, got "app.example/path"
 * ```
 */
export function parseOrigins(
  name: string,
  raw: string,
  opts: { error?: (message: string) => Error } = {},
): readonly string[] {
  const error = opts.error ?? ((message: string) => new SyntaxError(message));
  const origins: string[] = [];
  for (const entry of raw.split(",").map((o) => o.trim()).filter((o) => o !== "")) {
    const origin = toOrigin(entry);
    if (origin === null) {
      throw error(
        `${name} entries must be origins such as https://app.example, got ${JSON.stringify(entry)}`,
      );
    }
    origins.push(origin);
  }
  return Object.freeze(origins);
}

/** The origin `entry` spells, in the form browsers send; null when it is not an origin. */
function toOrigin(entry: string): string | null {
  let url: URL;
  try {
    url = new URL(entry);
  } catch {
    return null;
  }
  // Any spelling of an origin (upper case, a default port, a trailing slash) is kept in the
  // form browsers send; a path, query, fragment or user name is refused.
  const ok = (url.protocol === "http:" || url.protocol === "https:") &&
    (url.pathname === "/" || url.pathname === "") && url.search === "" && url.hash === "" &&
    !entry.includes("?") && !entry.includes("#") && url.username === "" && url.password === "";
  return ok ? url.origin : null;
}
