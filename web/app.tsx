/**
 * The app: the session, the unread badge, the header navigation, the routes, and the reply
 * dialog. Screens live in `screens/`; shared pieces in `components/`.
 *
 * @module
 */

import type { JSX } from "preact";
import { useCallback, useEffect, useMemo, useRef, useState } from "preact/hooks";
import { LocationProvider, Route, Router, useLocation } from "preact-iso";
import type { Post, Session, SocialClient } from "../shared/client.ts";
import { profilePath } from "./components/avatar.tsx";
import { Composer } from "./components/composer.tsx";
import { BellIcon, GearIcon, HomeIcon, SearchIcon, UserIcon } from "./components/icons.tsx";
import { PostCard } from "./components/post_card.tsx";
import { Empty } from "./components/states.tsx";
import type { WebConfig } from "./config.ts";
import { POSTED_EVENT } from "./lib/events.ts";
import { waitIndexed } from "./lib/indexed.ts";
import { EditProfile } from "./screens/edit_profile.tsx";
import { Follows } from "./screens/follows.tsx";
import { Home } from "./screens/home.tsx";
import { Login } from "./screens/login.tsx";
import { Notifications } from "./screens/notifications.tsx";
import { ProfileScreen } from "./screens/profile.tsx";
import { Search } from "./screens/search.tsx";
import { Settings } from "./screens/settings.tsx";
import { Signup } from "./screens/signup.tsx";
import { Thread } from "./screens/thread.tsx";
import { AppContext, type AppState, useApp } from "./state.ts";

/** Read after the badge's number. */
const UNREAD = " unread";

/** How often the unread badge is counted again (also on focus). */
export const UNREAD_POLL_MS = 30_000;

/** Options of {@link App}. */
export interface AppProps {
  client: SocialClient;
  config: WebConfig;
  /** The session found in storage at start. */
  initialSession: Session | null;
}

/** The whole app. */
export function App(props: AppProps): JSX.Element {
  return (
    <LocationProvider>
      <Shell {...props} />
    </LocationProvider>
  );
}

function Shell(props: AppProps): JSX.Element {
  const loc = useLocation();
  const [session, setSession] = useState<Session | null>(props.initialSession);
  const [notice, setNotice] = useState<string | null>(null);
  const [unread, setUnread] = useState(0);
  const [replyTo, setReplyTo] = useState<Post | null>(null);
  const { client } = props;

  const refreshUnread = useCallback(() => {
    if (session === null) return;
    client.notificationCount().then((r) => setUnread(r.count), () => {});
  }, [session?.did]);

  const state: AppState = useMemo(() => ({
    client,
    config: props.config,
    session,
    notice,
    unread,
    refreshUnread,
    reply: setReplyTo,
    signedIn(s: Session) {
      setNotice(null);
      setSession(s);
      if (loc.path === "/login" || loc.path === "/signup") loc.route("/");
    },
    signedOut(message?: string) {
      client.logout().catch(() => {});
      setSession(null);
      setUnread(0);
      setReplyTo(null);
      setNotice(message ?? null);
      loc.route("/login");
    },
  }), [client, session, notice, unread, refreshUnread, loc.path]);

  useEffect(() => {
    if (session === null) return;
    refreshUnread();
    const timer = setInterval(refreshUnread, UNREAD_POLL_MS);
    const onFocus = () => refreshUnread();
    globalThis.addEventListener("focus", onFocus);
    return () => {
      clearInterval(timer);
      globalThis.removeEventListener("focus", onFocus);
    };
  }, [session?.did]);

  useEffect(() => {
    globalThis.scrollTo?.({ top: 0 });
  }, [loc.path]);

  return (
    <AppContext.Provider value={state}>
      <a class="skip" href="#main">Skip to content</a>
      <Header />
      <main id="main" tabIndex={-1}>
        <Router>
          <Route path="/" component={session ? Home : Login} />
          <Route path="/login" component={Login} />
          <Route path="/signup" component={Signup} />
          <Route path="/search" component={Search} />
          <Route path="/notifications" component={session ? Notifications : Login} />
          <Route path="/settings" component={session ? Settings : Login} />
          <Route path="/settings/profile" component={session ? EditProfile : Login} />
          <Route
            path="/profile/:actor"
            component={(p: { actor: string }) => <ProfileScreen actor={p.actor} />}
          />
          <Route
            path="/profile/:actor/followers"
            component={(p: { actor: string }) => <Follows actor={p.actor} list="followers" />}
          />
          <Route
            path="/profile/:actor/following"
            component={(p: { actor: string }) => <Follows actor={p.actor} list="following" />}
          />
          <Route
            path="/profile/:actor/post/:rkey"
            component={(p: { actor: string; rkey: string }) => (
              <Thread actor={p.actor} rkey={p.rkey} />
            )}
          />
          <Route default component={NotFound} />
        </Router>
      </main>
      {replyTo && <ReplyDialog post={replyTo} onClose={() => setReplyTo(null)} />}
    </AppContext.Provider>
  );
}

function Header(): JSX.Element {
  const app = useApp();
  const { path } = useLocation();
  const s = app.session;
  const current = (href: string) => (path === href ? "page" : undefined);
  return (
    <header class="topbar">
      <nav class="nav" aria-label="Main">
        <a class="brand" href="/">Social</a>
        {s
          ? (
            <>
              <a href="/" aria-current={current("/")}>
                <HomeIcon />
                <span class="nav-label">Home</span>
              </a>
              <a href="/search" aria-current={current("/search")}>
                <SearchIcon />
                <span class="nav-label">Search</span>
              </a>
              <a href="/notifications" aria-current={current("/notifications")}>
                <BellIcon />
                <span class="nav-label">Notifications</span>
                {app.unread > 0 && (
                  <span class="badge">
                    {app.unread > 99 ? "99+" : app.unread}
                    <span class="visually-hidden">{UNREAD}</span>
                  </span>
                )}
              </a>
              <a
                href={profilePath(s.did, s.handle)}
                aria-current={current(profilePath(s.did, s.handle))}
              >
                <UserIcon />
                <span class="nav-label">Profile</span>
              </a>
              {/* The gear alone, at every width: the header has no room for one more word. */}
              <a href="/settings" aria-current={current("/settings")} title="Settings">
                <GearIcon />
                <span class="visually-hidden">Settings</span>
              </a>
              <button type="button" class="link-button nav-logout" onClick={() => app.signedOut()}>
                Log out
              </button>
            </>
          )
          : (
            <>
              <a href="/search" aria-current={current("/search")}>
                <SearchIcon />
                <span class="nav-label">Search</span>
              </a>
              <a href="/login" aria-current={current("/login")}>Log in</a>
              <a href="/signup" class="button small" aria-current={current("/signup")}>Sign up</a>
            </>
          )}
      </nav>
    </header>
  );
}

function ReplyDialog(props: { post: Post; onClose: () => void }): JSX.Element {
  const app = useApp();
  const ref = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    const d = ref.current;
    if (d && !d.open) d.showModal();
  }, []);
  return (
    <dialog ref={ref} class="dialog" aria-labelledby="reply-title" onClose={props.onClose}>
      <div class="dialog-head">
        <h2 id="reply-title">Reply</h2>
        <button type="button" class="link-button" onClick={() => ref.current?.close()}>
          Cancel
        </button>
      </div>
      <p class="hint">Replying to</p>
      <PostCard post={props.post} compact />
      <Composer
        replyTo={props.post}
        autoFocus
        onPosted={async (created) => {
          await waitIndexed(app.client, created.uri);
          globalThis.dispatchEvent(new CustomEvent(POSTED_EVENT, { detail: created.uri }));
          ref.current?.close();
        }}
      />
    </dialog>
  );
}

function NotFound(): JSX.Element {
  return (
    <>
      <h1 class="screen-title">Not found</h1>
      <Empty>
        <p>
          There is nothing at this address. <a href="/">Go home</a>
        </p>
      </Empty>
    </>
  );
}
