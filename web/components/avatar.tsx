/**
 * An account's picture and name as the app shows them: the avatar from the account host's
 * `getBlob` (or a letter when there is none), the display name, and the handle, with
 * placeholder handles (a shortened DID, spec 2.1) shown as they are, without an `@`.
 *
 * @module
 */

import type { JSX } from "preact";
import { useApp } from "../state.ts";

/** True for a placeholder handle (a truncated DID) or a DID. */
export function isPlaceholder(handle: string): boolean {
  return handle.startsWith("did:");
}

/** A handle as shown: `@alice.test`, or the placeholder as it is. */
export function showHandle(handle: string): string {
  return handle === "" ? "" : isPlaceholder(handle) ? handle : `@${handle}`;
}

/** The profile path of an account: by handle when it is real, else by DID. */
export function profilePath(did: string, handle: string): string {
  return `/profile/${encodeURIComponent(isPlaceholder(handle) || handle === "" ? did : handle)}`;
}

/** A round avatar; decorative (the name beside it says whose it is). */
export function Avatar(
  props: { did: string; cid?: string | null; name: string; size?: "s" | "m" | "l" },
): JSX.Element {
  const { client } = useApp();
  const cls = `avatar avatar-${props.size ?? "m"}`;
  if (props.cid) {
    return (
      <img
        class={cls}
        src={client.blobUrl(props.did, props.cid)}
        alt=""
        loading="lazy"
        decoding="async"
      />
    );
  }
  const letter = (props.name.replace(/^@/, "").trim()[0] ?? "?").toUpperCase();
  return <span class={`${cls} avatar-empty`} aria-hidden="true">{letter}</span>;
}

/** Display name (when set) and handle, linking to the profile. */
export function ActorName(
  props: { did: string; handle: string; displayName?: string | null },
): JSX.Element {
  const name = props.displayName?.trim();
  return (
    <a class="actor-name" href={profilePath(props.did, props.handle)}>
      {name ? <span class="display-name">{name}</span> : null}
      <span class="handle">{showHandle(props.handle)}</span>
    </a>
  );
}
