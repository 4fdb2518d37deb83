/**
 * The home timeline: the composer, the posts of followed accounts newest first (or the newest
 * posts on the server while the member follows nobody, spec 4.2 rule 2), paged as the member
 * scrolls, and a "new posts" button when newer posts arrived, checked every 20 s and when the
 * window regains focus, without reloading the page.
 *
 * @module
 */

import type { JSX } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import type { Post } from "../../shared/client.ts";
import { Composer } from "../components/composer.tsx";
import { PostCard } from "../components/post_card.tsx";
import { PostList } from "../components/post_list.tsx";
import { useLoad, usePaged } from "../hooks.ts";
import { waitIndexed } from "../lib/indexed.ts";
import { useApp } from "../state.ts";

/** How often the timeline checks for newer posts. */
export const NEW_POSTS_POLL_MS = 20_000;

/** The home screen. */
export function Home(): JSX.Element {
  const app = useApp();
  const did = app.session!.did;
  const list = usePaged<Post>(async (cursor) => {
    const page = await app.client.timeline({ cursor: cursor ?? undefined, limit: 30 });
    return { items: page.posts, cursor: page.cursor };
  }, [did]);
  const [me] = useLoad(() => app.client.profileByDid(did), [did]);
  const [fresh, setFresh] = useState(0);
  const [mine, setMine] = useState<Post[]>([]);
  const top = useRef<string | null>(null);
  top.current = list.items[0]?.uri ?? null;

  useEffect(() => {
    setFresh(0);
    let stopped = false;
    const check = async () => {
      if (stopped || document.visibilityState === "hidden" || top.current === null) return;
      try {
        const { posts } = await app.client.timeline({ limit: 30 });
        const at = posts.findIndex((p) => p.uri === top.current);
        if (!stopped) setFresh(at === -1 ? posts.length : at);
      } catch {
        // The next check tries again; the list itself shows errors.
      }
    };
    const timer = setInterval(check, NEW_POSTS_POLL_MS);
    globalThis.addEventListener("focus", check);
    return () => {
      stopped = true;
      clearInterval(timer);
      globalThis.removeEventListener("focus", check);
    };
  }, [did]);

  function showNew(): void {
    setFresh(0);
    list.reload();
    globalThis.scrollTo({ top: 0 });
  }

  const followsNobody = me.status === "ok" && me.data.following === 0;
  const ownNew = mine.filter((p) => !list.items.some((i) => i.uri === p.uri));
  return (
    <>
      <h1 class="screen-title">Home</h1>
      <Composer
        onPosted={async (created) => {
          await waitIndexed(app.client, created.uri);
          // The timeline holds the posts of followed accounts: the member's own new post is
          // kept on top (until the list itself has it) so that posting shows its result.
          const got = await app.client.getPost(created.uri).catch(() => null);
          if (got?.post) setMine((m) => [got.post!, ...m]);
          showNew();
        }}
      />
      {fresh > 0 && (
        <button type="button" class="new-posts" onClick={showNew}>
          {fresh >= 30 ? "30+ new posts" : fresh === 1 ? "1 new post" : `${fresh} new posts`}
        </button>
      )}
      {followsNobody && (
        <p class="notice">
          You do not follow anyone yet, so here are the newest posts on this server. Follow people
          to fill your timeline.
        </p>
      )}
      {!list.loading && ownNew.length > 0 && (
        <section aria-label="Your new posts" class="feed own-new">
          {ownNew.map((p) => (
            <PostCard
              key={p.uri}
              post={p}
              onDeleted={(uri) =>
                setMine((m) =>
                  m.filter((x) => x.uri !== uri)
                )}
            />
          ))}
        </section>
      )}
      <PostList
        list={list}
        label="Timeline"
        empty={
          <p>
            No posts yet. Write the first one above, or <a href="/search">search</a>{" "}
            for people to follow.
          </p>
        }
      />
    </>
  );
}
