/**
 * A list of posts paged as the member scrolls, with the viewer's like and repost state asked of
 * the index (`/api/viewer`) for each page as it arrives.
 *
 * @module
 */

import type { ComponentChildren, JSX } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import type { Post } from "../../shared/client.ts";
import type { Paged } from "../hooks.ts";
import { useApp } from "../state.ts";
import { ListedPostCard, type PostViewer } from "./post_card.tsx";
import { Empty, ErrorBox, Loading } from "./states.tsx";

/** Most URIs the index takes in one `/api/viewer` request. */
const VIEWER_BATCH = 100;

/** The viewer's like and repost of each of `posts`, by URI (filled in as pages arrive). */
export function useViewerState(posts: Post[]): Record<string, PostViewer> {
  const { client, session } = useApp();
  const [state, setState] = useState<Record<string, PostViewer>>({});
  const asked = useRef(new Set<string>());
  useEffect(() => {
    asked.current.clear();
    setState({});
  }, [session?.did]);
  useEffect(() => {
    if (session === null) return;
    const fresh = posts.map((p) => p.uri).filter((u) => !asked.current.has(u));
    for (let i = 0; i < fresh.length; i += VIEWER_BATCH) {
      const uris = fresh.slice(i, i + VIEWER_BATCH);
      uris.forEach((u) => asked.current.add(u));
      client.viewerState({ uris }).then((v) => {
        setState((old) => {
          const next = { ...old };
          for (const u of uris) {
            next[u] = { like: v.likes[u] ?? null, repost: v.reposts[u] ?? null };
          }
          return next;
        });
      }, () => uris.forEach((u) => asked.current.delete(u)));
    }
  }, [posts, session?.did]);
  return state;
}

/** Options of {@link PostList}. */
export interface PostListProps {
  list: Paged<Post>;
  /** What to show when the list is empty. */
  empty: ComponentChildren;
  label: string;
}

/** A paged list of posts with its loading, error, empty and end states. */
export function PostList(props: PostListProps): JSX.Element {
  const { list } = props;
  const viewer = useViewerState(list.items);
  if (list.loading && list.items.length === 0) return <Loading label="Loading posts…" />;
  if (list.error && list.items.length === 0) {
    return <ErrorBox message={list.error} retry={list.reload} />;
  }
  if (list.items.length === 0) return <Empty>{props.empty}</Empty>;
  return (
    <section aria-label={props.label} class="feed">
      {list.items.map((post) => (
        <ListedPostCard
          key={post.uri}
          post={post}
          viewer={viewer[post.uri]}
          onDeleted={(uri) => list.update((items) => items.filter((p) => p.uri !== uri))}
        />
      ))}
      {list.error && <ErrorBox message={list.error} retry={list.loadMore} />}
      {list.loadingMore && <Loading label="Loading more posts…" />}
      {list.done
        ? <p class="end">You have reached the end</p>
        : <div ref={list.sentinel} class="sentinel" aria-hidden="true" />}
    </section>
  );
}
