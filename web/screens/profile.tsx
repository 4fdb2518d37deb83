/**
 * A profile by handle or by DID (spec 2.4, 4.2 rule 3): banner, avatar, name, description,
 * counts, follow/unfollow, the latest posts, and links to the follower lists. Placeholder handles
 * (spec 2.1) are shown as they are.
 *
 * @module
 */

import type { JSX } from "preact";
import { useEffect, useState } from "preact/hooks";
import type { Profile } from "../../shared/client.ts";
import { Avatar, isPlaceholder, showHandle } from "../components/avatar.tsx";
import { PostCard } from "../components/post_card.tsx";
import { useViewerState } from "../components/post_list.tsx";
import { RichText } from "../components/rich_text.tsx";
import { Empty, ErrorBox, Loading } from "../components/states.tsx";
import { errorText, useLoad, useSessionGuard } from "../hooks.ts";
import { useApp } from "../state.ts";

/** Most posts a profile response carries (spec 2.4). */
const PROFILE_POSTS = 50;

/** Loads a profile by DID or by handle. */
export function loadProfile(app: ReturnType<typeof useApp>, actor: string): Promise<Profile> {
  return actor.startsWith("did:") ? app.client.profileByDid(actor) : app.client.profile(actor);
}

/** The profile screen. */
export function ProfileScreen(props: { actor: string }): JSX.Element {
  const app = useApp();
  const [state, reload] = useLoad(() => loadProfile(app, props.actor), [props.actor]);
  const posts = state.status === "ok" ? state.data.posts : [];
  const viewer = useViewerState(posts);
  if (state.status === "loading") return <Loading label="Loading profile…" />;
  if (state.status === "error") return <ErrorBox message={state.error} retry={reload} />;
  const p = state.data;
  if (p.did === "") {
    return (
      <>
        <h1 class="screen-title">Profile</h1>
        <Empty>
          <p>No account here goes by {showHandle(props.actor)}.</p>
        </Empty>
      </>
    );
  }
  const name = p.display_name?.trim() || showHandle(p.handle);
  const base = `/profile/${encodeURIComponent(isPlaceholder(p.handle) ? p.did : p.handle)}`;
  return (
    <>
      <div class="profile-head">
        {p.banner_cid
          ? (
            <img
              class="banner"
              src={app.client.blobUrl(p.did, p.banner_cid)}
              alt={`Banner of ${name}`}
            />
          )
          : <div class="banner banner-empty" aria-hidden="true" />}
        <div class="profile-id">
          <Avatar did={p.did} cid={p.avatar_cid} name={name} size="l" />
          <div class="profile-actions">
            {app.session?.did === p.did
              ? <a class="button secondary" href="/settings/profile">Edit profile</a>
              : app.session && <FollowButton did={p.did} name={name} />}
          </div>
        </div>
        <h1 class="profile-name">{name}</h1>
        <p class="handle">{showHandle(p.handle)}</p>
        {p.description && <RichText text={p.description} class="description" />}
        <ul class="counts">
          <li>
            <strong>{p.post_count}</strong> posts
          </li>
          <li>
            <a href={`${base}/followers`}>
              <strong>{p.followers}</strong> followers
            </a>
          </li>
          <li>
            <a href={`${base}/following`}>
              <strong>{p.following}</strong> following
            </a>
          </li>
        </ul>
      </div>
      <section aria-label={`Posts by ${name}`} class="feed">
        <h2 class="section-title">Posts</h2>
        {p.posts.length === 0
          ? (
            <Empty>
              <p>No posts yet.</p>
            </Empty>
          )
          : p.posts.map((post) => (
            <PostCard key={post.uri} post={post} viewer={viewer[post.uri]} onDeleted={reload} />
          ))}
        {p.posts.length >= PROFILE_POSTS && (
          <p class="end">Showing the latest {PROFILE_POSTS} posts</p>
        )}
      </section>
    </>
  );
}

/** Follow/unfollow, from the viewer's follow record as the index knows it. */
function FollowButton(props: { did: string; name: string }): JSX.Element {
  const app = useApp();
  const guard = useSessionGuard();
  const [follow, setFollow] = useState<string | null | undefined>(undefined);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    let live = true;
    setFollow(undefined);
    app.client.viewerState({ actors: [props.did] }).then(
      (v) => live && setFollow(props.did in v.follows ? v.follows[props.did] ?? "" : null),
      (err) => live && !guard(err) && setError(errorText(err)),
    );
    return () => {
      live = false;
    };
  }, [props.did]);

  async function toggle(): Promise<void> {
    setBusy(true);
    setError(null);
    try {
      if (follow) {
        await app.client.unfollow(follow);
        setFollow(null);
      } else if (follow === "") {
        setError("This follow was made elsewhere and cannot be undone here");
      } else {
        setFollow((await app.client.follow(props.did)).uri);
      }
    } catch (err) {
      if (!guard(err)) setError(errorText(err));
    } finally {
      setBusy(false);
    }
  }

  if (follow === undefined && error === null) {
    return <button type="button" class="button secondary" disabled>…</button>;
  }
  const following = typeof follow === "string";
  return (
    <>
      <button
        type="button"
        class={`button follow${following ? " secondary" : ""}`}
        aria-pressed={following}
        title={following ? `Unfollow ${props.name}` : `Follow ${props.name}`}
        disabled={busy}
        onClick={toggle}
      >
        {following ? "Following" : "Follow"}
      </button>
      {error && <p class="inline-error" role="alert">{error}</p>}
    </>
  );
}
