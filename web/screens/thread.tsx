/**
 * A thread (spec 2.8, 4.2 rule 5): the ancestors root-first, with "continues above" when the
 * server's walk stopped before the root, the post itself, then its replies oldest first, with the
 * viewer's like and repost state. Reloads when the member replies.
 *
 * @module
 */

import type { JSX } from "preact";
import { useEffect } from "preact/hooks";
import { COLLECTION_POST } from "../../shared/nsid.ts";
import { isPlaceholder } from "../components/avatar.tsx";
import { PostCard, postPath } from "../components/post_card.tsx";
import { useViewerState } from "../components/post_list.tsx";
import { Empty, ErrorBox, Loading } from "../components/states.tsx";
import { useLoad } from "../hooks.ts";
import { POSTED_EVENT } from "../lib/events.ts";
import { useApp } from "../state.ts";

/** The thread screen for the post `rkey` of `actor` (a DID or a handle). */
export function Thread(props: { actor: string; rkey: string }): JSX.Element {
  const app = useApp();
  const viewerDid = app.session?.did;
  const [state, reload, set] = useLoad(async () => {
    const did = props.actor.startsWith("did:")
      ? props.actor
      : (await app.client.profile(props.actor)).did;
    if (did === "") return null;
    return await app.client.thread(`at://${did}/${COLLECTION_POST}/${props.rkey}`, viewerDid);
  }, [props.actor, props.rkey, viewerDid]);
  useEffect(() => {
    const again = () => reload();
    globalThis.addEventListener(POSTED_EVENT, again);
    return () => globalThis.removeEventListener(POSTED_EVENT, again);
  }, [reload]);
  const t = state.status === "ok" ? state.data : null;
  const all = t?.post ? [...t.parents, t.post, ...t.replies] : [];
  const viewer = useViewerState(all);

  if (state.status === "loading") return <Loading label="Loading thread…" />;
  if (state.status === "error") return <ErrorBox message={state.error} retry={reload} />;
  if (t === null || t.post === null) {
    return (
      <>
        <h1 class="screen-title">Post</h1>
        <Empty>
          <p>
            This post is not available. It may have been deleted, or it has not reached this server
            yet.
          </p>
        </Empty>
      </>
    );
  }
  const post = t.post;
  const first = t.parents[0];
  const above = first?.parent_uri ?? null;
  const aboveParts = above?.split("/") ?? [];
  return (
    <>
      <h1 class="screen-title">Thread</h1>
      {above && aboveParts.length === 5 && (
        <a class="continues" href={postPath({ did: aboveParts[2], rkey: aboveParts[4] })}>
          Continues above: earlier posts
        </a>
      )}
      {t.parents.length > 0 && (
        <section aria-label="Earlier in the thread" class="feed ancestors">
          {t.parents.map((p) => <PostCard key={p.uri} post={p} viewer={viewer[p.uri]} inThread />)}
        </section>
      )}
      <PostCard
        key={post.uri}
        post={{
          ...post,
          like_count: t.like_count ?? post.like_count,
          repost_count: t.repost_count ?? post.repost_count,
        }}
        viewer={viewer[post.uri]}
        focused
        onDeleted={() => history.length > 1 ? history.back() : (location.href = "/")}
      />
      <section aria-label="Replies" class="feed replies">
        <h2 class="section-title">
          {t.replies.length === 0
            ? "No replies yet"
            : t.replies.length === 1
            ? "1 reply"
            : `${t.replies.length} replies`}
        </h2>
        {t.replies.map((p) => (
          <PostCard
            key={p.uri}
            post={p}
            viewer={viewer[p.uri]}
            inThread
            onDeleted={(uri) => set({ ...t, replies: t.replies.filter((r) => r.uri !== uri) })}
          />
        ))}
      </section>
      {isPlaceholder(post.handle) && (
        <p class="hint">The author's handle is not known to this server yet.</p>
      )}
    </>
  );
}
