/**
 * What the index tells the page about where things are: the account host's address (for sign-up,
 * login, writes and blobs). The index writes it into the page as JSON (`#app-config`); reads go to
 * the page's own origin, the index.
 *
 * @module
 */

/** The web app's configuration. */
export interface WebConfig {
  /** Base URL of the account host, as the browser reaches it. */
  pdsUrl: string;
  /** Base URL of the index (the page's own origin). */
  appviewUrl: string;
}

/** Reads the configuration the index put into the page. */
export function readConfig(doc: Document = document): WebConfig {
  const el = doc.getElementById("app-config");
  let raw: { pdsUrl?: unknown } = {};
  try {
    raw = JSON.parse(el?.textContent ?? "{}");
  } catch {
    // Reported below as a missing address.
  }
  if (typeof raw.pdsUrl !== "string" || raw.pdsUrl === "") {
    throw new Error("The page carries no account host address (#app-config pdsUrl)");
  }
  return { pdsUrl: raw.pdsUrl, appviewUrl: doc.location.origin };
}
