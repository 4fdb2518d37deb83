/**
 * Wire shapes of the query API (spec part 2) and their presenters: database rows in, JSON-ready
 * objects out, with members in the order of the spec's tables.
 *
 * @module
 */

import type { IdKey } from "./cursor.ts";
import { placeholderHandle } from "../db/handles.ts";

import type {
  ActorProfile as WireActorProfile,
  Embed,
  Notification as WireNotification,
  Post as WirePost,
  Profile as WireProfile,
} from "../../shared/client_types.ts";

export type { Embed };

// The wire shapes of spec part 2 are defined once, in shared/client_types.ts (the client reads
// them too). The index always sends every member, so here they are all required.

/** Spec 2.1: a post as the index serves it. */
export type Post = Required<WirePost>;
/** Spec 2.4: `ProfileResponse`. */
export type Profile = Required<WireProfile>;
/** Spec 2.6: `ActorProfile`, a minimal actor card. */
export type ActorCard = Required<WireActorProfile>;
/** Spec 2.7: a notification, hydrated with its author and subject text. */
export type Notification = Required<WireNotification>;

/** Columns of `posts` every post query selects (see {@link PostRow}). */
export const POST_COLUMNS = `id, uri, did, handle, rkey, collection, text, cid, parent_uri,
  root_uri, embed, langs, created_at, like_count, repost_count, avatar_cid, indexed_at`;

/**
 * A `posts` row as selected by {@link POST_COLUMNS}: the wire post's columns, `embed` and `langs`
 * as stored (JSON text), plus the row id and arrival time.
 */
export interface PostRow extends Omit<Post, "embed" | "langs"> {
  id: number;
  embed: string | null;
  langs: string;
  indexed_at: string;
}

/** Presents a post row (spec 2.1): `embed` and `langs` parsed from their stored JSON. */
export function presentPost(row: PostRow): Post {
  return {
    uri: row.uri,
    did: row.did,
    handle: presentHandle(row.handle, row.did),
    rkey: row.rkey,
    collection: row.collection,
    text: row.text,
    cid: row.cid,
    parent_uri: row.parent_uri,
    root_uri: row.root_uri,
    embed: row.embed === null ? null : JSON.parse(row.embed) as Embed,
    langs: parseLangs(row.langs),
    created_at: row.created_at,
    like_count: row.like_count,
    repost_count: row.repost_count,
    avatar_cid: row.avatar_cid,
  };
}

/** A profile-cache row joined for actor cards and notification authors. */
export interface ActorRow {
  did: string;
  handle: string | null;
  display_name: string | null;
  avatar_cid: string | null;
}

/** A page of actor cards and the key of the next one (null on the last page). */
export interface ActorPage {
  rows: ActorRow[];
  next: IdKey | null;
}

/**
 * The page of a statement that read `limit + 1` rows (follower lists, mutes): the first `limit`
 * as actor rows, and the next page's key from the last one when there was one more.
 */
export function actorPage<R extends ActorRow>(
  rows: R[],
  limit: number,
  keyOf: (last: R) => IdKey,
): ActorPage {
  const more = rows.length > limit;
  if (more) rows.length = limit;
  return {
    rows: rows.map(({ did, handle, display_name, avatar_cid }) => ({
      did,
      handle,
      display_name,
      avatar_cid,
    })),
    next: more ? keyOf(rows[rows.length - 1]) : null,
  };
}

/** Presents an actor card (spec 2.6). */
export function presentActor(row: ActorRow): ActorCard {
  return {
    did: row.did,
    handle: presentHandle(row.handle, row.did),
    display_name: row.display_name,
    avatar_cid: row.avatar_cid,
  };
}

/** A `notifications` row joined with its author's profile and its subject post. */
export interface NotificationRow {
  id: number;
  kind: string;
  author_did: string;
  author_handle: string | null;
  author_display_name: string | null;
  author_avatar_cid: string | null;
  subject_uri: string | null;
  subject_text: string | null;
  created_at: string;
  indexed_at: string;
  read_at: string | null;
}

/** Presents a notification (spec 2.7): the author handle is never null. */
export function presentNotification(row: NotificationRow): Notification {
  return {
    id: row.id,
    kind: row.kind,
    author_did: row.author_did,
    author_handle: presentHandle(row.author_handle, row.author_did),
    author_display_name: row.author_display_name,
    author_avatar_cid: row.author_avatar_cid,
    subject_uri: row.subject_uri,
    subject_text: row.subject_text,
    created_at: row.created_at,
    indexed_at: row.indexed_at,
    read_at: row.read_at,
  };
}

/** A handle for the wire: the known handle without any `@`, else the DID's placeholder. */
export function presentHandle(handle: string | null, did: string): string {
  if (handle === null || handle === "") return placeholderHandle(did);
  return handle.startsWith("@") ? handle.slice(1) : handle;
}

function parseLangs(text: string): string[] {
  if (text === "[]") return [];
  const langs: unknown = JSON.parse(text);
  return Array.isArray(langs) ? langs.filter((l): l is string => typeof l === "string") : [];
}
