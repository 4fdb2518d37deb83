/**
 * One post as the lists and the thread show it: author, text (as text), embed, time, and the
 * actions (reply, repost, like, open the thread, and in the last place delete on one's own post or
 * report on another member's). Like and repost answer at once and are undone if the account host
 * refuses.
 *
 * @module
 */

import { Component, type JSX } from "preact";
import { useEffect, useState } from "preact/hooks";
import type { Post } from "../../shared/client.ts";
import { errorText, useSessionGuard } from "../hooks.ts";
import { fullTime, shortAge } from "../lib/time.ts";
import { useApp } from "../state.ts";
import { ActorName, Avatar, showHandle } from "./avatar.tsx";
import { EmbedView } from "./embed.tsx";
import { FlagIcon, HeartIcon, ReplyIcon, RepostIcon, TrashIcon } from "./icons.tsx";
import { ReportDialog } from "./report_dialog.tsx";
import { RichText } from "./rich_text.tsx";

/** The viewer's own like and repost of a post (record URIs), as the index knows them. */
export interface PostViewer {
  like?: string | null;
  repost?: string | null;
}

/** Read after the time link's visible text: where the link goes. */
const OPEN_THREAD = ", open thread";

/** The thread path of a post. */
export function postPath(post: { did: string; rkey: string }): string {
  return `/profile/${encodeURIComponent(post.did)}/post/${encodeURIComponent(post.rkey)}`;
}

/** Options of {@link PostCard}. */
export interface PostCardProps {
  post: Post;
  viewer?: PostViewer;
  /** The thread's own post: larger, no link to itself. */
  focused?: boolean;
  /** Called once the post was deleted. */
  onDeleted?: (uri: string) => void;
  /** Hide the actions (the parent shown in the reply dialog). */
  compact?: boolean;
  /** Shown inside its thread: no "reply in a thread" note. */
  inThread?: boolean;
}

/** A post with its actions. */
export function PostCard(props: PostCardProps): JSX.Element {
  const { post } = props;
  const app = useApp();
  const guard = useSessionGuard();
  const [like, setLike] = useState<string | null>(props.viewer?.like ?? null);
  const [repost, setRepost] = useState<string | null>(props.viewer?.repost ?? null);
  const [likes, setLikes] = useState(post.like_count ?? 0);
  const [reposts, setReposts] = useState(post.repost_count ?? 0);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const [reporting, setReporting] = useState(false);
  useEffect(() => setLike(props.viewer?.like ?? null), [props.viewer?.like]);
  useEffect(() => setRepost(props.viewer?.repost ?? null), [props.viewer?.repost]);
  useEffect(() => setLikes(post.like_count ?? 0), [post.like_count]);
  useEffect(() => setReposts(post.repost_count ?? 0), [post.repost_count]);

  const mine = app.session?.did === post.did;
  const ref = { uri: post.uri, cid: post.cid };
  const author = post.handle;

  async function toggle(kind: "like" | "repost"): Promise<void> {
    if (busy || app.session === null) return;
    const current = kind === "like" ? like : repost;
    const set = kind === "like" ? setLike : setRepost;
    const count = kind === "like" ? setLikes : setReposts;
    setBusy(true);
    setError(null);
    set(current ?? "pending");
    count((n) => n + (current ? -1 : 1));
    try {
      if (current) {
        await app.client.deleteRecord(current);
        set(null);
      } else {
        const made = kind === "like" ? await app.client.like(ref) : await app.client.repost(ref);
        set(made.uri);
      }
    } catch (err) {
      set(current);
      count((n) => n + (current ? 1 : -1));
      if (!guard(err)) setError(errorText(err));
    } finally {
      setBusy(false);
    }
  }

  async function remove(): Promise<void> {
    if (!confirm("Delete this post? This cannot be undone.")) return;
    setBusy(true);
    setError(null);
    try {
      await app.client.deleteRecord(post.uri);
      props.onDeleted?.(post.uri);
    } catch (err) {
      if (!guard(err)) setError(errorText(err));
    } finally {
      setBusy(false);
    }
  }

  const time = (
    <time datetime={post.created_at} title={fullTime(post.created_at)}>
      {shortAge(post.created_at)}
    </time>
  );
  return (
    <article
      class={`post${props.focused ? " focused" : ""}`}
      aria-label={`Post by ${showHandle(author)}`}
    >
      <Avatar did={post.did} cid={post.avatar_cid} name={author} />
      <div class="post-body">
        <header class="post-head">
          <ActorName did={post.did} handle={author} />
          <span class="dot" aria-hidden="true">·</span>
          {props.focused || props.compact ? time : (
            <a class="time" href={postPath(post)}>
              {time}
              <span class="visually-hidden">{OPEN_THREAD}</span>
            </a>
          )}
        </header>
        {post.parent_uri && !props.focused && !props.compact && !props.inThread && (
          <p class="reply-note">Reply in a thread</p>
        )}
        {post.text !== "" && (
          <RichText text={post.text} class={props.focused ? "text text-large" : "text"} />
        )}
        <EmbedView did={post.did} embed={post.embed} />
        {!props.compact && (
          <div class="actions">
            <button
              type="button"
              class="action reply"
              aria-label={`Reply to ${showHandle(author)}`}
              onClick={() => app.reply(post)}
              disabled={app.session === null}
            >
              <ReplyIcon />
            </button>
            <button
              type="button"
              class={`action repost${repost ? " on repost-on" : ""}`}
              aria-pressed={repost !== null}
              disabled={busy || app.session === null}
              onClick={() => toggle("repost")}
            >
              <RepostIcon />
              <span class="visually-hidden">Repost</span>
              <span class="count">{reposts}</span>
            </button>
            <button
              type="button"
              class={`action like${like ? " on like-on" : ""}`}
              aria-pressed={like !== null}
              disabled={busy || app.session === null}
              onClick={() => toggle("like")}
            >
              <HeartIcon filled={like !== null} />
              <span class="visually-hidden">Like</span>
              <span class="count">{likes}</span>
            </button>
            {!props.focused && <a class="action open" href={postPath(post)}>Open thread</a>}
            {mine && (
              <button
                type="button"
                class="action delete danger"
                aria-label="Delete post"
                disabled={busy}
                onClick={remove}
              >
                <TrashIcon />
              </button>
            )}
            {!mine && app.session !== null && (
              <button
                type="button"
                class="action report"
                aria-label="Report post"
                title="Report post"
                aria-haspopup="dialog"
                onClick={() => setReporting(true)}
              >
                <FlagIcon />
              </button>
            )}
          </div>
        )}
        {error && <p class="inline-error" role="alert">{error}</p>}
      </div>
      {reporting && (
        <ReportDialog
          subject={ref}
          title="Report post"
          who={showHandle(author)}
          quote={post.text}
          onClose={() => setReporting(false)}
        />
      )}
    </article>
  );
}

/**
 * {@link PostCard} for long lists: renders again only when its post or the viewer's state of it
 * changed, so a page of posts arriving (or its like/repost state) renders the new cards, not
 * every card above them. Measured with `deno task bench web` (scrolling 300 timeline posts):
 * without it, the longest frame was 73-87 ms, nearly all of it re-rendering unchanged cards.
 */
export class ListedPostCard extends Component<PostCardProps> {
  override shouldComponentUpdate(next: PostCardProps): boolean {
    const p = this.props;
    return next.post !== p.post || next.viewer !== p.viewer || next.focused !== p.focused ||
      next.compact !== p.compact;
  }

  override render(props: PostCardProps): JSX.Element {
    return <PostCard {...props} />;
  }
}
