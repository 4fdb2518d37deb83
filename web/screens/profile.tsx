/**
 * A profile by handle or by DID (spec 2.4, 4.2 rule 3): banner, avatar, name, description,
 * counts, follow/unfollow, block/unblock (a public record, spec 2.14), mute/unmute (private to
 * the member, spec 4.2 rule 11) and report (to the operator, spec 4.1 rule 8), the latest posts,
 * and links to the follower lists. Placeholder handles (spec 2.1) are shown as they are.
 *
 * @module
 */

import type { JSX } from "preact";
import { useEffect, useState } from "preact/hooks";
import type { Profile, SocialClient } from "../../shared/client.ts";
import { Avatar, isPlaceholder, showHandle } from "../components/avatar.tsx";
import { PostCard } from "../components/post_card.tsx";
import { ReportDialog } from "../components/report_dialog.tsx";
import { useViewerState } from "../components/post_list.tsx";
import { RichText } from "../components/rich_text.tsx";
import { Empty, ErrorBox, Loading } from "../components/states.tsx";
import { errorText, useLoad, useSessionGuard } from "../hooks.ts";
import { useApp } from "../state.ts";

/** Most posts a profile response carries (spec 2.4). */
const PROFILE_POSTS = 50;

/**
 * Loads a profile by DID or by handle, as the logged-in viewer sees it: no posts when either
 * blocks the other (spec 4.2 rule 10).
 */
export function loadProfile(app: ReturnType<typeof useApp>, actor: string): Promise<Profile> {
  const viewerDid = app.session?.did;
  return actor.startsWith("did:")
    ? app.client.profileByDid(actor, viewerDid)
    : app.client.profile(actor, viewerDid);
}

/** The profile screen. */
export function ProfileScreen(props: { actor: string }): JSX.Element {
  const app = useApp();
  const [state, reload, set] = useLoad(() => loadProfile(app, props.actor), [
    props.actor,
    app.session?.did,
  ]);
  const posts = state.status === "ok" ? state.data.posts : [];
  const viewer = useViewerState(posts);
  const [blocked, setBlocked] = useState(false);
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
              : app.session && (
                <>
                  <FollowButton did={p.did} name={name} />
                  <SafetyButtons
                    did={p.did}
                    name={name}
                    handle={showHandle(p.handle)}
                    onBlocked={setBlocked}
                    onChange={() => loadProfile(app, props.actor).then(set, () => reload())}
                  />
                </>
              )}
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
              <p>
                {blocked
                  ? `You blocked ${name}: you do not see each other's posts.`
                  : "No posts yet."}
              </p>
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

/** Waits (about 3 s at most) until the index reports the block of `did` as `blocked`. */
async function blockIndexed(client: SocialClient, did: string, blocked: boolean): Promise<void> {
  const until = Date.now() + 3000;
  while (Date.now() < until) {
    const v = await client.viewerState({ actors: [did] }).catch(() => null);
    if (v === null || (did in v.blocks) === blocked) return;
    await new Promise((r) => setTimeout(r, 150));
  }
}

/**
 * Block/unblock and mute/unmute, from the viewer's block record (`/api/viewer`) and mute state
 * (`/api/mutes/<did>`); `onBlocked` hears the block state, `onChange` reads the profile again (in place) once the index has the change.
 * Report opens the report dialog for the account.
 */
function SafetyButtons(props: {
  did: string;
  name: string;
  handle: string;
  onBlocked: (blocked: boolean) => void;
  onChange: () => void;
}): JSX.Element {
  const app = useApp();
  const guard = useSessionGuard();
  const [block, setBlock] = useState<string | null | undefined>(undefined);
  const [muted, setMuted] = useState<boolean | undefined>(undefined);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const [reporting, setReporting] = useState(false);
  useEffect(() => {
    let live = true;
    setBlock(undefined);
    setMuted(undefined);
    const fail = (err: unknown) => live && !guard(err) && setError(errorText(err));
    app.client.viewerState({ actors: [props.did] }).then(
      (v) => {
        if (!live) return;
        setBlock(v.blocks[props.did] ?? null);
        props.onBlocked(props.did in v.blocks);
      },
      fail,
    );
    app.client.isMuted(props.did).then((m) => live && setMuted(m.muted), fail);
    return () => {
      live = false;
    };
  }, [props.did]);

  async function run(action: () => Promise<void>): Promise<void> {
    setBusy(true);
    setError(null);
    try {
      await action();
    } catch (err) {
      if (!guard(err)) setError(errorText(err));
    } finally {
      setBusy(false);
    }
  }

  const toggleBlock = () =>
    run(async () => {
      if (block) {
        await app.client.unblock(block);
        await blockIndexed(app.client, props.did, false);
        setBlock(null);
        props.onBlocked(false);
      } else {
        const created = await app.client.block(props.did);
        await blockIndexed(app.client, props.did, true);
        setBlock(created.uri);
        props.onBlocked(true);
      }
      props.onChange();
    });
  const toggleMute = () =>
    run(async () => {
      if (muted) await app.client.unmute(props.did);
      else await app.client.mute(props.did);
      setMuted(!muted);
    });

  return (
    <div class="safety-actions">
      <button
        type="button"
        class="button small secondary"
        aria-pressed={muted === true}
        title={muted
          ? `Unmute ${props.name}`
          : `Mute ${props.name}: their posts leave your timeline`}
        disabled={busy || muted === undefined}
        onClick={toggleMute}
      >
        {muted === undefined ? "…" : muted ? "Unmute" : "Mute"}
      </button>
      <button
        type="button"
        class="button small secondary danger"
        aria-pressed={typeof block === "string"}
        title={block
          ? `Unblock ${props.name}`
          : `Block ${props.name}: you no longer see each other`}
        disabled={busy || block === undefined}
        onClick={toggleBlock}
      >
        {block === undefined ? "…" : block ? "Unblock" : "Block"}
      </button>
      <button
        type="button"
        class="button small secondary report"
        title={`Report ${props.name} to the server's operator`}
        aria-haspopup="dialog"
        onClick={() => setReporting(true)}
      >
        Report
      </button>
      {error && <p class="inline-error" role="alert">{error}</p>}
      {reporting && (
        <ReportDialog
          subject={{ did: props.did }}
          title={`Report ${props.handle}`}
          who={props.handle}
          onClose={() => setReporting(false)}
        />
      )}
    </div>
  );
}
