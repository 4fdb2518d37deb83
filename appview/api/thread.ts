/**
 * Single posts and threads (spec 2.8, 4.2 rules 4-5, public):
 * - `GET /api/post/<uri>`: `ThreadResponse` `{post, thread: {parent, root}, like_count?,
 *   repost_count?}`;
 * - `GET /api/thread?uri=` and `GET /api/thread/<uri>` (docs/behaviour.md 10.9): `ThreadFullResponse`
 *   `{post, parents, root, replies, like_count?, repost_count?, viewer_liked?, viewer_reposted?}`.
 *
 * The URI in the path keeps its slashes (`/api/post/at://did:plc:x/app.social.feed.post/3k...`);
 * a percent-encoded URI is accepted too. Counters are absent when the post is not indexed;
 * `viewer_liked`/`viewer_reposted` are present only when `viewerDid` is given (and the post is
 * indexed): absent means unknown, not false.
 *
 * With `viewerDid` (both routes) the block rule applies (spec 4.2 rule 10), and with or without
 * it the same for inactive accounts (rule 12): a post by an inactive account, or by an account
 * the viewer blocks or is blocked by, is answered as `post: null` with `blocked: true`; as parent
 * or root it is null; in the ancestors it ends the chain (`ancestor_blocked: true`); as a reply
 * it is left out.
 *
 * @module
 */

import { type Context, Hono } from "hono";
import { type Post, type PostRow, presentPost } from "../views/present.ts";
import type { AsyncViews } from "../db/store.ts";
import { invalidRequest } from "./errors.ts";
import { checkRecordUri, echo, requiredParam, viewerParam } from "./params.ts";

const POST_PREFIX = "/api/post/";
const THREAD_PREFIX = "/api/thread/";

/** Routes of posts and threads. */
export function threadRoutes(views: AsyncViews): Hono {
  const app = new Hono();
  app.get(
    `${POST_PREFIX}*`,
    async (c) => c.json(await postResponse(views, c, uriFromPath(c, POST_PREFIX))),
  );
  app.get(
    "/api/thread",
    async (c) => c.json(await threadResponse(views, c, requiredParam(c, "uri"))),
  );
  app.get(
    `${THREAD_PREFIX}*`,
    async (c) => c.json(await threadResponse(views, c, uriFromPath(c, THREAD_PREFIX))),
  );
  return app;
}

async function postResponse(
  views: AsyncViews,
  c: Context,
  uri: string,
): Promise<Record<string, unknown>> {
  const row = await views.threads.post(checkRecordUri(uri));
  const viewerDid = viewerParam(c);
  const visible = async (post: PostRow | null) =>
    post !== null && !(await views.safety.unavailable(viewerDid, post.did)) ? post : null;
  if (row === null) return { post: null, thread: { parent: null, root: null } };
  if (await visible(row) === null) {
    return { post: null, thread: { parent: null, root: null }, blocked: true };
  }
  const parent = row.parent_uri === null
    ? null
    : await visible(await views.posts.byUri(row.parent_uri));
  const root = row.root_uri === null ? null : await visible(await views.posts.byUri(row.root_uri));
  return {
    post: presentPost(row),
    thread: {
      parent: parent === null ? null : presentPost(parent),
      root: root === null ? null : presentPost(root),
    },
    like_count: row.like_count,
    repost_count: row.repost_count,
  };
}

async function threadResponse(
  views: AsyncViews,
  c: Context,
  rawUri: string,
): Promise<Record<string, unknown>> {
  const uri = checkRecordUri(rawUri);
  const viewerDid = viewerParam(c);
  const row = await views.threads.post(uri);
  if (row === null) return { post: null, parents: [], root: null, replies: [] };
  if (await views.safety.unavailable(viewerDid, row.did)) {
    return { post: null, parents: [], root: null, replies: [], blocked: true };
  }
  const rootRow = row.root_uri === null ? null : await views.posts.byUri(row.root_uri);
  const root = rootRow !== null && !(await views.safety.unavailable(viewerDid, rootRow.did))
    ? rootRow
    : null;
  const ancestors = await views.threads.ancestors(row, viewerDid);
  const replies = await views.threads.replies(uri, viewerDid);
  const body: Record<string, unknown> = {
    post: presentPost(row),
    parents: ancestors.chain.map(presentPost),
    root: root === null ? null : presentPost(root),
    replies: replies.map(presentPost) satisfies Post[],
    like_count: row.like_count,
    repost_count: row.repost_count,
  };
  if (ancestors.blocked) body.ancestor_blocked = true;
  if (viewerDid !== null) {
    const state = await views.threads.viewerState(uri, viewerDid);
    body.viewer_liked = state.liked;
    body.viewer_reposted = state.reposted;
  }
  return body;
}

/** The record URI after `prefix` in the request path, percent-decoded. */
function uriFromPath(c: Context, prefix: string): string {
  const path = new URL(c.req.url).pathname;
  const raw = path.slice(path.indexOf(prefix) + prefix.length);
  if (raw === "") throw invalidRequest("Missing required parameter: uri");
  try {
    return decodeURIComponent(raw);
  } catch {
    throw invalidRequest(`Invalid uri: ${echo(raw)}`);
  }
}
