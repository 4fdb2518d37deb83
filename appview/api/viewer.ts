/**
 * `GET /api/viewer?did=<viewer>&uris=<post URI>,...&actors=<DID>,...` (public, like the follow
 * lists: likes, reposts, follows and blocks are public records): `ViewerState` `{likes, reposts,
 * follows, blocks}`, the viewer's own records of the posts and accounts asked about, keyed by post URI
 * and actor DID. A key is present only when the record exists.
 *
 * `uris` and `actors` are optional comma-separated lists of at most {@link MAX_VIEWER_ENTRIES}
 * entries each; a longer list, or an entry that is not a post URI (`uris`) or a DID (`actors`),
 * is 400 `InvalidRequest` naming the parameter.
 *
 * @module
 */

import { type Context, Hono } from "hono";
import type { ViewerState } from "../../shared/client_types.ts";
import { postKeyOf } from "../db/post_key.ts";
import type { AsyncViews } from "../db/store.ts";
import { invalidRequest } from "./errors.ts";
import { checkDid, checkRecordUri, didParam, echo } from "./params.ts";

/** Most entries of `uris`, and of `actors`, in one request. */
export const MAX_VIEWER_ENTRIES = 100;

/** Routes of the viewer's state. */
export function viewerRoutes(views: AsyncViews): Hono {
  const app = new Hono();
  app.get("/api/viewer", async (c) => {
    const did = didParam(c);
    const uris = listParam(c, "uris").map(checkPostUri);
    const actors = listParam(c, "actors").map((actor) => checkDid(actor, "actors"));
    return c.json(await views.viewer.records(did, { uris, actors }) satisfies ViewerState);
  });
  return app;
}

/** The comma-separated list in the parameter `name`; empty when absent or empty. */
function listParam(c: Context, name: string): string[] {
  const raw = c.req.query(name);
  if (raw === undefined || raw === "") return [];
  const entries = raw.split(",");
  if (entries.length > MAX_VIEWER_ENTRIES) {
    throw invalidRequest(
      `Too many ${name}: ${entries.length} (at most ${MAX_VIEWER_ENTRIES})`,
    );
  }
  return entries;
}

/** `value` when it is a post URI with a DID authority; 400 naming `uris` otherwise. */
function checkPostUri(value: string): string {
  if (postKeyOf(checkRecordUri(value, "uris")) === null) {
    throw invalidRequest(`Invalid uris: ${echo(value)} (not a post URI with a DID)`);
  }
  return value;
}
