/**
 * An account in a followers or following list (spec 2.6): avatar, name and handle, linking to
 * the profile.
 *
 * @module
 */

import type { ComponentChildren, JSX } from "preact";
import type { ActorProfile } from "../../shared/client.ts";
import { ActorName, Avatar } from "./avatar.tsx";

/** One actor card; `children` (an action about the account) go at its end. */
export function ActorCard(
  props: { actor: ActorProfile; children?: ComponentChildren },
): JSX.Element {
  const a = props.actor;
  return (
    <li class="actor-card">
      <Avatar did={a.did} cid={a.avatar_cid} name={a.display_name || a.handle} />
      <ActorName did={a.did} handle={a.handle} displayName={a.display_name} />
      {props.children}
    </li>
  );
}
