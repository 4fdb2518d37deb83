/**
 * Followers and following lists (spec 2.6, 4.2 rule 8): actor cards, newest follow first, paged
 * as the member scrolls.
 *
 * @module
 */

import type { JSX } from "preact";
import type { ActorProfile } from "../../shared/client.ts";
import { ActorCard } from "../components/actor_card.tsx";
import { showHandle } from "../components/avatar.tsx";
import { Empty, ErrorBox, Loading } from "../components/states.tsx";
import { useLoad, usePaged } from "../hooks.ts";
import { useApp } from "../state.ts";
import { loadProfile } from "./profile.tsx";

/** The followers or following list of `actor` (a DID or a handle). */
export function Follows(props: { actor: string; list: "followers" | "following" }): JSX.Element {
  const app = useApp();
  const [who] = useLoad(() => loadProfile(app, props.actor), [props.actor]);
  const did = who.status === "ok" ? who.data.did : null;
  const list = usePaged<ActorProfile>(async (cursor) => {
    if (did === null || did === "") return { items: [], cursor: null };
    const page = await app.client[props.list](did, {
      cursor: cursor ?? undefined,
      limit: 30,
      viewerDid: app.session?.did,
    });
    return { items: page.profiles, cursor: page.cursor };
  }, [did, props.list, app.session?.did]);
  const title = props.list === "followers" ? "Followers" : "Following";
  const name = who.status === "ok"
    ? who.data.display_name?.trim() || showHandle(who.data.handle)
    : showHandle(props.actor);
  return (
    <>
      <h1 class="screen-title">
        {title} <span class="subtitle">of {name}</span>
      </h1>
      {who.status === "error" && <ErrorBox message={who.error} />}
      {who.status === "ok" && who.data.did === "" && (
        <Empty>
          <p>No account here goes by {showHandle(props.actor)}.</p>
        </Empty>
      )}
      {(who.status === "loading" || (list.loading && list.items.length === 0)) && did !== "" && (
        <Loading />
      )}
      {list.error && (
        <ErrorBox message={list.error} retry={list.items.length ? list.loadMore : list.reload} />
      )}
      {!list.loading && did && list.items.length === 0 && !list.error && (
        <Empty>
          <p>{props.list === "followers" ? "No followers yet." : "Not following anyone yet."}</p>
        </Empty>
      )}
      {list.items.length > 0 && (
        <ul class="actor-list" aria-label={title}>
          {list.items.map((a) => <ActorCard key={a.did} actor={a} />)}
        </ul>
      )}
      {list.loadingMore && <Loading />}
      {!list.done && list.items.length > 0 && (
        <div ref={list.sentinel} class="sentinel" aria-hidden="true" />
      )}
    </>
  );
}
