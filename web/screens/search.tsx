/**
 * Full-text search of posts, newest first; the query lives in the address (`/search?q=`), so a
 * search can be shared and the back button works.
 *
 * @module
 */

import type { JSX } from "preact";
import { useState } from "preact/hooks";
import { useLocation } from "preact-iso";
import { PostCard } from "../components/post_card.tsx";
import { useViewerState } from "../components/post_list.tsx";
import { Empty, ErrorBox, Loading } from "../components/states.tsx";
import { useLoad } from "../hooks.ts";
import { useApp } from "../state.ts";

/** Results per search. */
const SEARCH_LIMIT = 50;

/** The search screen. */
export function Search(): JSX.Element {
  const app = useApp();
  const loc = useLocation();
  const q = (loc.query.q ?? "").trim();
  const [draft, setDraft] = useState(q);
  const viewerDid = app.session?.did;
  const [state, reload] = useLoad(
    () => (q === "" ? Promise.resolve(null) : app.client.search(q, SEARCH_LIMIT, viewerDid)),
    [q, viewerDid],
  );
  const posts = state.status === "ok" && state.data ? state.data.posts : [];
  const viewer = useViewerState(posts);

  function submit(e: Event): void {
    e.preventDefault();
    loc.route(`/search?q=${encodeURIComponent(draft.trim())}`);
  }

  return (
    <>
      <h1 class="screen-title">Search</h1>
      <form class="search-form" role="search" onSubmit={submit}>
        <label for="search-q" class="visually-hidden">Search posts</label>
        <input
          id="search-q"
          type="search"
          value={draft}
          placeholder="Search posts"
          onInput={(e) => setDraft((e.target as HTMLInputElement).value)}
        />
        <button type="submit" class="button">Search</button>
      </form>
      {q === "" && (
        <Empty>
          <p>Type words to find posts that contain them.</p>
        </Empty>
      )}
      {q !== "" && state.status === "loading" && <Loading label="Searching…" />}
      {state.status === "error" && <ErrorBox message={state.error} retry={reload} />}
      {q !== "" && state.status === "ok" && posts.length === 0 && (
        <Empty>
          <p>No posts match “{q}”.</p>
        </Empty>
      )}
      {posts.length > 0 && (
        <section aria-label="Search results" class="feed">
          {posts.map((p) => (
            <PostCard key={p.uri} post={p} viewer={viewer[p.uri]} onDeleted={reload} />
          ))}
        </section>
      )}
    </>
  );
}
