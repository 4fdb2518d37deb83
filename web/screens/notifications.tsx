/**
 * Notifications (spec 2.7, 4.2 rules 6-7): the list hydrated as the index returns it, newest
 * first, paged as the member scrolls; unread ones marked. Opening the screen marks what it shows
 * as seen (`seenAt` = the newest `indexed_at`), and the badge is counted again.
 *
 * @module
 */

import type { JSX } from "preact";
import { useEffect, useRef } from "preact/hooks";
import type { Notification } from "../../shared/client.ts";
import { ActorName, Avatar } from "../components/avatar.tsx";
import { postPath } from "../components/post_card.tsx";
import { Empty, ErrorBox, Loading } from "../components/states.tsx";
import { usePaged } from "../hooks.ts";
import { fullTime, shortAge } from "../lib/time.ts";
import { useApp } from "../state.ts";

/** Read after an unread notification. */
const NEW = " (new)";
const SEPARATOR = " · ";

const VERBS: Record<string, string> = {
  like: "liked your post",
  repost: "reposted your post",
  follow: "followed you",
  reply: "replied to your post",
};

/** The thread path of a notification's subject, or the author's profile for a follow. */
function targetOf(n: Notification): string {
  const parts = n.subject_uri?.split("/") ?? [];
  if (parts.length === 5) return postPath({ did: parts[2], rkey: parts[4] });
  return `/profile/${encodeURIComponent(n.author_did)}`;
}

/** The notifications screen. */
export function Notifications(): JSX.Element {
  const app = useApp();
  const did = app.session!.did;
  const list = usePaged<Notification>(async (cursor) => {
    const page = await app.client.notifications({ cursor: cursor ?? undefined, limit: 30 });
    return { items: page.notifications, cursor: page.cursor };
  }, [did]);
  const marked = useRef<string | null>(null);
  const newest = list.items[0]?.indexed_at ?? null;
  useEffect(() => {
    if (newest === null || marked.current === newest) return;
    if (!list.items.some((n) => n.read_at === null)) return;
    marked.current = newest;
    app.client.markSeen(newest).then(() => app.refreshUnread(), () => {
      marked.current = null;
    });
  }, [newest]);

  return (
    <>
      <h1 class="screen-title">Notifications</h1>
      {list.loading && list.items.length === 0 && <Loading label="Loading notifications…" />}
      {list.error && list.items.length === 0 && (
        <ErrorBox message={list.error} retry={list.reload} />
      )}
      {!list.loading && !list.error && list.items.length === 0 && (
        <Empty>
          <p>Nothing yet. Likes, reposts, replies and new followers show up here.</p>
        </Empty>
      )}
      {list.items.length > 0 && (
        <ul class="notifications" aria-label="Notifications">
          {list.items.map((n) => (
            <li key={n.id} class={`notification${n.read_at === null ? " unread" : ""}`}>
              <Avatar
                did={n.author_did}
                cid={n.author_avatar_cid}
                name={n.author_display_name || n.author_handle}
              />
              <div class="notification-body">
                <p>
                  <ActorName
                    did={n.author_did}
                    handle={n.author_handle}
                    displayName={n.author_display_name}
                  />{" "}
                  <a href={targetOf(n)} class="verb">{VERBS[n.kind] ?? n.kind}</a>
                  {n.read_at === null && <span class="visually-hidden">{NEW}</span>}
                  <span class="dot" aria-hidden="true">{SEPARATOR}</span>
                  <time datetime={n.indexed_at} title={fullTime(n.indexed_at)}>
                    {shortAge(n.indexed_at)}
                  </time>
                </p>
                {n.subject_text && <p class="subject-text">{n.subject_text}</p>}
              </div>
            </li>
          ))}
        </ul>
      )}
      {list.error && list.items.length > 0 && (
        <ErrorBox message={list.error} retry={list.loadMore} />
      )}
      {list.loadingMore && <Loading />}
      {!list.done && list.items.length > 0 && (
        <div ref={list.sentinel} class="sentinel" aria-hidden="true" />
      )}
    </>
  );
}
