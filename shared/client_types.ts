/**
 * Wire shapes of the index query API (spec part 2) and of the account host operations the
 * client uses, as TypeScript types.
 *
 * @module
 */

/** Embed of a post (spec 2.2): `$type` plus members kept verbatim. */
export interface Embed {
  $type: string;
  [member: string]: unknown;
}

/** Post as the index serves it (spec 2.1). */
export interface Post {
  uri: string;
  did: string;
  handle: string;
  rkey: string;
  collection: string;
  text: string;
  cid: string;
  parent_uri: string | null;
  root_uri: string | null;
  embed: Embed | null;
  langs: string[];
  created_at: string;
  like_count?: number;
  repost_count?: number;
  avatar_cid: string | null;
}

/** Blob reference (spec 2.3). */
export interface BlobRef {
  $type: "blob";
  ref: { $link: string };
  mimeType: string;
  size: number;
}

/** Profile (spec 2.4, `ProfileResponse`). */
export interface Profile {
  did: string;
  handle: string;
  posts: Post[];
  followers: number;
  following: number;
  display_name?: string | null;
  description?: string | null;
  avatar_cid?: string | null;
  banner_cid?: string | null;
  post_count: number;
}

/** Actor card (spec 2.6). */
export interface ActorProfile {
  did: string;
  handle: string;
  display_name?: string | null;
  avatar_cid?: string | null;
}

/** Notification (spec 2.7). */
export interface Notification {
  id: number;
  kind: string;
  author_did: string;
  author_handle: string;
  author_display_name?: string | null;
  author_avatar_cid?: string | null;
  subject_uri: string | null;
  subject_text?: string | null;
  created_at: string;
  indexed_at: string;
  read_at: string | null;
}

/** `GET /api/post/<uri>` (spec 2.8). */
export interface ThreadResponse {
  post: Post | null;
  thread: { parent: Post | null; root: Post | null };
  like_count?: number;
  repost_count?: number;
  /** True when the post is by an account the viewer blocks or is blocked by (4.2 rule 10). */
  blocked?: boolean;
}

/** `GET /api/thread` (spec 2.8). */
export interface ThreadFullResponse {
  post: Post | null;
  parents: Post[];
  root: Post | null;
  replies: Post[];
  like_count?: number;
  repost_count?: number;
  viewer_liked?: boolean;
  viewer_reposted?: boolean;
  /** True when the post is by an account the viewer blocks or is blocked by (4.2 rule 10). */
  blocked?: boolean;
  /**
   * True when the ancestors end at a post unavailable to the viewer because of a block: the
   * parent of `parents[0]` (of `post` when `parents` is empty) is to be shown as unavailable.
   */
  ancestor_blocked?: boolean;
}

/** `POST /api/mutes`: `muted` is false when the account was muted already. */
export interface MuteResult {
  ok: boolean;
  muted: boolean;
}

/** `DELETE /api/mutes/<did>`: `removed` is false when the account was not muted. */
export interface UnmuteResult {
  ok: boolean;
  removed: boolean;
}

/**
 * `GET /api/viewer`: the viewer's own like, repost and follow records of the posts and accounts
 * asked about. A key is present only when the viewer has that record (absent means no); the
 * record URI is what `deleteRecord` takes to undo it.
 *
 * @example
 * ```ts
 * const post = "at://did:plc:bob/app.social.feed.post/3k1";
 * const state: ViewerState = {
 *   likes: { [post]: "at://did:plc:me/app.social.feed.like/3k2" },
 *   reposts: {},
 *   follows: { "did:plc:bob": "at://did:plc:me/app.social.graph.follow/3k3" },
 *   blocks: {},
 * };
 * ```
 */
export interface ViewerState {
  /** Post URI to the URI of the viewer's like record of it. */
  likes: Record<string, string>;
  /** Post URI to the URI of the viewer's repost record of it. */
  reposts: Record<string, string>;
  /**
   * Followed DID to the URI of the viewer's follow record; null when the index holds the follow
   * without its record key (rows from before it stored one), so it cannot be undone from here.
   */
  follows: Record<string, string | null>;
  /** Blocked DID to the URI of the viewer's block record (spec 2.14), what `unblock` takes. */
  blocks: Record<string, string>;
}

/** A page of a list with an opaque cursor; null means the end. */
export interface Page {
  cursor: string | null;
}

/** `com.atproto.server.describeServer` as the client reads it (spec 4.1). */
export interface ServerDescription {
  /** The account host's DID. */
  did: string;
  /** Handle suffixes the account host accepts, each with its leading dot (`.test`). */
  availableUserDomains: string[];
  /** Whether `createAccount` needs an invite code. */
  inviteCodeRequired: boolean;
}

/** An app password as listed (`listAppPasswords`). */
export interface AppPasswordInfo {
  name: string;
  /** ISO 8601. */
  createdAt: string;
}

/** A new app password (`createAppPassword`): the only answer that holds the password. */
export interface AppPasswordCreated extends AppPasswordInfo {
  password: string;
}

/**
 * A record of the member that the server's operator took down
 * (`app.social.server.listRecordTakedowns`, spec 4.1 rule 15).
 */
export interface RecordTakedownInfo {
  uri: string;
  cid: string;
  /** The record as it was (lex JSON); `$type` names its collection. */
  value: Record<string, unknown>;
  /** The operator's reason, when they gave one. */
  reason?: string;
  /** ISO 8601. */
  takenDownAt: string;
}

/** Client-visible session (spec 2.13). */
export interface Session {
  did: string;
  handle: string;
  accessJwt: string;
  refreshJwt: string;
}

/** Strong reference to a record. */
export interface StrongRef {
  uri: string;
  cid: string;
}

/** Result of record creation (spec 2.10). */
export interface CreatedRecord {
  uri: string;
  cid: string;
}

/**
 * Why a member reports something: the reason types of `com.atproto.moderation.defs` that the
 * account host takes (spec 4.1 rule 8).
 */
export type ReportReasonType = `com.atproto.moderation.defs#reason${
  | "Spam"
  | "Violation"
  | "Misleading"
  | "Sexual"
  | "Rude"
  | "Other"
  | "Appeal"}`;

/** What a report is about, as `createReport` sends and answers it: an account or a record. */
export type ReportSubject =
  | { $type: "com.atproto.admin.defs#repoRef"; did: string }
  | { $type: "com.atproto.repo.strongRef"; uri: string; cid: string };

/** The account host's answer to `com.atproto.moderation.createReport` (spec 4.1 rule 8). */
export interface CreatedReport {
  id: number;
  reasonType: ReportReasonType;
  reason?: string;
  subject: ReportSubject;
  /** DID of the reporting account. */
  reportedBy: string;
  /** ISO 8601. */
  createdAt: string;
}
