/**
 * A typed client for both servers: the account host (XRPC, `com.atproto.*`) and the index
 * (`/api/*`), implementing the token refresh contract of spec 5.4 through
 * {@link SessionManager}. Uses only `fetch`, so it runs in Deno, browsers and tests alike.
 *
 * @example
 * ```ts
 * const client = new SocialClient({ pdsUrl: "http://localhost:2583", appviewUrl: "http://localhost:3000" });
 * await client.login("alice.test", "correct horse battery staple");
 * await client.post({ text: "hello" });
 * const { posts } = await client.timeline();
 * ```
 *
 * @module
 */

import {
  COLLECTION_BLOCK,
  COLLECTION_FOLLOW,
  COLLECTION_LIKE,
  COLLECTION_POST,
  COLLECTION_PROFILE,
  COLLECTION_REPOST,
  PROFILE_RKEY,
} from "./nsid.ts";
import type {
  ActorProfile,
  AppPasswordCreated,
  AppPasswordInfo,
  BlobRef,
  CreatedRecord,
  CreatedReport,
  Embed,
  MuteResult,
  Notification,
  Page,
  Post,
  Profile,
  RecordTakedownInfo,
  ReportReasonType,
  ServerDescription,
  Session,
  StrongRef,
  ThreadFullResponse,
  ThreadResponse,
  UnmuteResult,
  ViewerState,
} from "./client_types.ts";
import {
  LoginRequiredError,
  MemorySessionStore,
  SessionManager,
  type SessionStore,
  XrpcClientError,
} from "./client_session.ts";

export * from "./client_types.ts";
export {
  LoginRequiredError,
  MemorySessionStore,
  type SessionStore,
  XrpcClientError,
} from "./client_session.ts";

/** Options of {@link SocialClient}. */
export interface SocialClientOptions {
  /** Base URL of the account host. */
  pdsUrl: string;
  /** Base URL of the index. */
  appviewUrl: string;
  /** Session storage; memory by default. */
  store?: SessionStore;
  /** `fetch` to use (tests may wrap it to count calls). */
  fetch?: typeof fetch;
}

/** Fields of a new post (spec 2.10). */
export interface NewPost {
  text: string;
  /** The post replied to and its thread root; the root defaults to the parent. */
  reply?: { parent: StrongRef; root?: StrongRef };
  embed?: Embed;
  langs?: string[];
  createdAt?: string;
}

/** Profile fields to overlay; `null` removes a field (spec 4.1 rule 3). */
export interface ProfileUpdate {
  displayName?: string | null;
  description?: string | null;
  avatar?: BlobRef | null;
  banner?: BlobRef | null;
}

type Query = Record<string, string | number | undefined | null>;

/** Client of the account host and the index. */
export class SocialClient {
  readonly #pds: string;
  readonly #appview: string;
  readonly #fetch: typeof fetch;
  readonly #session: SessionManager;

  constructor(opts: SocialClientOptions) {
    this.#pds = opts.pdsUrl.replace(/\/+$/, "");
    this.#appview = opts.appviewUrl.replace(/\/+$/, "");
    // Called unbound: a browser refuses `fetch` called as a method of another object.
    this.#fetch = opts.fetch ?? ((input, init) => fetch(input, init));
    this.#session = new SessionManager(
      opts.store ?? new MemorySessionStore(),
      (refreshJwt) => this.#refreshSession(refreshJwt),
    );
  }

  /** Number of `refreshSession` calls this client made. */
  get refreshCount(): number {
    return this.#session.refreshCount;
  }

  /** The current session, or null. */
  session(): Promise<Session | null> {
    return this.#session.current();
  }

  /** Base URL of the account host (blobs are served from it). */
  get pdsUrl(): string {
    return this.#pds;
  }

  /**
   * Address of a blob on the account host (`com.atproto.sync.getBlob`, public): what an `<img>`
   * shows for an avatar, a banner or a post image.
   */
  blobUrl(did: string, cid: string): string {
    const q = new URLSearchParams({ did, cid });
    return `${this.#pds}/xrpc/com.atproto.sync.getBlob?${q}`;
  }

  /** The account host's description: handle domains and whether sign-up needs an invite. */
  describeServer(): Promise<ServerDescription> {
    return this.#call(this.#pds, "GET", "/xrpc/com.atproto.server.describeServer");
  }

  // --- authentication (never triggers a refresh) ---

  /** Creates an account and stores its session. */
  async createAccount(input: { handle: string; password: string; inviteCode?: string }) {
    const session = await this.#call<Session>(
      this.#pds,
      "POST",
      "/xrpc/com.atproto.server.createAccount",
      { body: input },
    );
    await this.#session.set(pick(session));
    return pick(session);
  }

  /** Logs in with a handle or DID and a password, and stores the session. */
  async login(identifier: string, password: string): Promise<Session> {
    const session = await this.#call<Session>(
      this.#pds,
      "POST",
      "/xrpc/com.atproto.server.createSession",
      {
        body: { identifier, password },
      },
    );
    await this.#session.set(pick(session));
    return pick(session);
  }

  /** Revokes the refresh token on the account host and forgets the session. */
  async logout(): Promise<void> {
    const session = await this.#session.current();
    await this.#session.set(null);
    if (!session) return;
    await this.#call(this.#pds, "POST", "/xrpc/com.atproto.server.deleteSession", {
      token: session.refreshJwt,
    }).catch(() => {});
  }

  /**
   * Changes the password (`app.social.server.changePassword`, spec 4.1 rule 9): every login of
   * the account ends, and the new session it answers replaces the stored one.
   */
  async changePassword(currentPassword: string, newPassword: string): Promise<Session> {
    const session = await this.#authed<Session>(
      this.#pds,
      "POST",
      "/xrpc/app.social.server.changePassword",
      { body: { currentPassword, newPassword } },
    );
    await this.#session.set(pick(session));
    return pick(session);
  }

  /**
   * Moves the logged-in account to `handle` (`com.atproto.identity.updateHandle`, spec 4.1 rule
   * 11) and keeps the stored session's handle in step.
   */
  async updateHandle(handle: string): Promise<void> {
    await this.#authed(this.#pds, "POST", "/xrpc/com.atproto.identity.updateHandle", {
      body: { handle },
    });
    const session = await this.#session.current();
    if (session !== null) await this.#session.set({ ...session, handle: handle.toLowerCase() });
  }

  /**
   * Creates an app password named `name` (`com.atproto.server.createAppPassword`, spec 4.1 rule
   * 12); the answer holds the password, shown this once.
   */
  createAppPassword(name: string): Promise<AppPasswordCreated> {
    return this.#authed(this.#pds, "POST", "/xrpc/com.atproto.server.createAppPassword", {
      body: { name },
    });
  }

  /** The account's app passwords, newest first, without the passwords. */
  listAppPasswords(): Promise<{ passwords: AppPasswordInfo[] }> {
    return this.#authed(this.#pds, "GET", "/xrpc/com.atproto.server.listAppPasswords", {});
  }

  /** Revokes the app password `name`: its sessions end at their next refresh. */
  async revokeAppPassword(name: string): Promise<void> {
    await this.#authed(this.#pds, "POST", "/xrpc/com.atproto.server.revokeAppPassword", {
      body: { name },
    });
  }

  /**
   * Asks to delete the logged-in account (`com.atproto.server.requestAccountDelete`, spec 4.1
   * rule 13): with no email to send it by, the answer holds the token (15 minutes).
   */
  requestAccountDelete(): Promise<{ token: string }> {
    return this.#authed(this.#pds, "POST", "/xrpc/com.atproto.server.requestAccountDelete", {});
  }

  /**
   * Deletes the logged-in account for good (`com.atproto.server.deleteAccount`) with its password
   * and the token of {@link requestAccountDelete}, then forgets the session.
   */
  async deleteAccount(password: string, token: string): Promise<void> {
    const { did } = await this.#session.require();
    await this.#call(this.#pds, "POST", "/xrpc/com.atproto.server.deleteAccount", {
      body: { did, password, token },
    });
    await this.#session.set(null);
  }

  /**
   * The logged-in member's records that the server's operator took down, with the operator's
   * reason (`app.social.server.listRecordTakedowns`, spec 4.1 rule 15); `cursor` pages on.
   */
  listRecordTakedowns(
    page: { cursor?: string; limit?: number } = {},
  ): Promise<{ takedowns: RecordTakedownInfo[]; cursor?: string }> {
    return this.#authed(this.#pds, "GET", "/xrpc/app.social.server.listRecordTakedowns", {
      query: page,
    });
  }

  /**
   * Reports an account (`{did}`) or a record (`{uri, cid}`, the version seen) to the server's
   * operator (`com.atproto.moderation.createReport`, spec 4.1 rule 8); `reason` is optional
   * text (at most 2,000 characters). The subject must be on this account host (400
   * `InvalidRequest` otherwise); over `PDS_REPORTS_PER_HOUR`, 429 with
   * {@link XrpcClientError.retryAfter}.
   */
  createReport(input: {
    subject: { did: string } | StrongRef;
    reasonType: ReportReasonType;
    reason?: string;
  }): Promise<CreatedReport> {
    const subject = "did" in input.subject
      ? { $type: "com.atproto.admin.defs#repoRef", did: input.subject.did }
      : { $type: "com.atproto.repo.strongRef", uri: input.subject.uri, cid: input.subject.cid };
    return this.#authed(this.#pds, "POST", "/xrpc/com.atproto.moderation.createReport", {
      body: {
        reasonType: input.reasonType,
        ...(input.reason === undefined ? {} : { reason: input.reason }),
        subject,
      },
    });
  }

  // --- account host writes ---

  /** Creates a post (optionally a reply, with an embed). */
  post(input: NewPost): Promise<CreatedRecord> {
    const record: Record<string, unknown> = {
      $type: COLLECTION_POST,
      text: input.text,
      langs: input.langs ?? [],
      createdAt: input.createdAt ?? new Date().toISOString(),
    };
    if (input.reply) {
      record.reply = { root: input.reply.root ?? input.reply.parent, parent: input.reply.parent };
    }
    if (input.embed) record.embed = input.embed;
    return this.createRecord(COLLECTION_POST, record);
  }

  /** Likes a post. */
  like(subject: StrongRef): Promise<CreatedRecord> {
    return this.createRecord(COLLECTION_LIKE, { subject, createdAt: new Date().toISOString() });
  }

  /** Reposts a post. */
  repost(subject: StrongRef): Promise<CreatedRecord> {
    return this.createRecord(COLLECTION_REPOST, { subject, createdAt: new Date().toISOString() });
  }

  /** Follows an account. */
  follow(did: string): Promise<CreatedRecord> {
    return this.createRecord(COLLECTION_FOLLOW, {
      subject: did,
      createdAt: new Date().toISOString(),
    });
  }

  /**
   * Blocks an account (spec 2.14): a public `app.social.graph.block` record; the index then hides
   * each account's content from the other (spec 4.2 rule 10). Undo with {@link unblock}.
   */
  block(did: string): Promise<CreatedRecord> {
    return this.createRecord(COLLECTION_BLOCK, {
      subject: did,
      createdAt: new Date().toISOString(),
    });
  }

  /** Unblocks: deletes the block record `blockUri`. */
  unblock(blockUri: string): Promise<{ commit?: { cid: string; rev: string } }> {
    return this.deleteRecord(blockUri);
  }

  /** Deletes a follow (or like, repost, post) record by its URI: unfollow, unlike, unrepost. */
  deleteRecord(uri: string): Promise<{ commit?: { cid: string; rev: string } }> {
    const [, , repo, collection, rkey] = uri.split("/");
    return this.#authed(this.#pds, "POST", "/xrpc/com.atproto.repo.deleteRecord", {
      body: { repo, collection, rkey },
    });
  }

  /** Unfollows: deletes the follow record `followUri`. */
  unfollow(followUri: string): Promise<{ commit?: { cid: string; rev: string } }> {
    return this.deleteRecord(followUri);
  }

  /** Overlays `fields` on the profile record; omitted fields are kept, `null` removes one. */
  updateProfile(fields: ProfileUpdate): Promise<CreatedRecord> {
    return this.#authed(this.#pds, "POST", "/xrpc/com.atproto.repo.putRecord", {
      body: async () => ({
        repo: (await this.#session.require()).did,
        collection: COLLECTION_PROFILE,
        rkey: PROFILE_RKEY,
        record: { $type: COLLECTION_PROFILE, ...fields },
      }),
    });
  }

  /** Creates a record of `collection` in the logged-in account's repository. */
  createRecord(collection: string, record: Record<string, unknown>): Promise<CreatedRecord> {
    return this.#authed(this.#pds, "POST", "/xrpc/com.atproto.repo.createRecord", {
      body: async () => ({ repo: (await this.#session.require()).did, collection, record }),
    });
  }

  /** Uploads a blob (at most 1 MiB, spec 4.1 rule 4). */
  async uploadBlob(bytes: Uint8Array, mimeType: string): Promise<BlobRef> {
    const res = await this.#authed<{ blob: BlobRef }>(
      this.#pds,
      "POST",
      "/xrpc/com.atproto.repo.uploadBlob",
      {
        raw: { bytes, mimeType },
      },
    );
    return res.blob;
  }

  // --- index queries ---

  /** Home timeline of the logged-in account (private). */
  timeline(page: { cursor?: string; limit?: number } = {}): Promise<{ posts: Post[] } & Page> {
    return this.#authed(this.#appview, "GET", "/api/timeline/home", {
      query: async () => ({ did: (await this.#session.require()).did, ...page }),
    });
  }

  /**
   * Profile by handle (unknown handles give the synthetic empty profile). With `viewerDid`, no
   * posts when the viewer and the account block either way (spec 4.2 rule 10); the same
   * `viewerDid` applies the block rule in the other public reads below.
   */
  profile(handle: string, viewerDid?: string): Promise<Profile> {
    return this.#call(this.#appview, "GET", `/api/profile/${encodeURIComponent(handle)}`, {
      query: { viewerDid },
    });
  }

  /** Profile by DID. */
  profileByDid(did: string, viewerDid?: string): Promise<Profile> {
    return this.#call(this.#appview, "GET", "/api/profile", { query: { did, viewerDid } });
  }

  /** Full-text search, newest first. */
  search(q: string, limit?: number, viewerDid?: string): Promise<{ posts: Post[]; q: string }> {
    return this.#call(this.#appview, "GET", "/api/search", { query: { q, limit, viewerDid } });
  }

  /** One post with its immediate parent and root. */
  getPost(uri: string, viewerDid?: string): Promise<ThreadResponse> {
    return this.#call(this.#appview, "GET", `/api/post/${uri}`, { query: { viewerDid } });
  }

  /** A thread: ancestors root-first, replies oldest first. */
  thread(uri: string, viewerDid?: string): Promise<ThreadFullResponse> {
    return this.#call(this.#appview, "GET", "/api/thread", { query: { uri, viewerDid } });
  }

  /** Notifications of the logged-in account, newest first (private). */
  notifications(
    page: { cursor?: string; limit?: number } = {},
  ): Promise<{ notifications: Notification[] } & Page> {
    return this.#authed(this.#appview, "GET", "/api/notifications", {
      query: async () => ({ did: (await this.#session.require()).did, ...page }),
    });
  }

  /** Unread notification count (private). */
  notificationCount(): Promise<{ count: number }> {
    return this.#authed(this.#appview, "GET", "/api/notifications/count", {
      query: async () => ({ did: (await this.#session.require()).did }),
    });
  }

  /** Marks notifications indexed at or before `seenAt` read (all unread when null). */
  markSeen(seenAt: string | null): Promise<{ ok: boolean; updated: number }> {
    return this.#authed(this.#appview, "POST", "/api/notifications/seen", {
      body: async () => ({ did: (await this.#session.require()).did, seenAt }),
    });
  }

  /** Followers of `did` as actor cards. */
  followers(did: string, page: { cursor?: string; limit?: number; viewerDid?: string } = {}) {
    return this.#call<{ profiles: ActorProfile[] } & Page>(this.#appview, "GET", "/api/followers", {
      query: { did, ...page },
    });
  }

  /** Accounts `did` follows, as actor cards. */
  following(did: string, page: { cursor?: string; limit?: number; viewerDid?: string } = {}) {
    return this.#call<{ profiles: ActorProfile[] } & Page>(this.#appview, "GET", "/api/following", {
      query: { did, ...page },
    });
  }

  /** The accounts the logged-in account muted, newest first (private, spec 4.2 rule 11). */
  mutes(page: { cursor?: string; limit?: number } = {}) {
    return this.#authed<{ profiles: ActorProfile[] } & Page>(this.#appview, "GET", "/api/mutes", {
      query: async () => ({ did: (await this.#session.require()).did, ...page }),
    });
  }

  /** Whether the logged-in account muted `did` (private, spec 4.2 rule 11). */
  isMuted(did: string): Promise<{ muted: boolean }> {
    return this.#authed(this.#appview, "GET", `/api/mutes/${encodeURIComponent(did)}`, {
      query: async () => ({ did: (await this.#session.require()).did }),
    });
  }

  /** Mutes `did` for the logged-in account (private; not a record, the index keeps it). */
  mute(did: string): Promise<MuteResult> {
    return this.#authed(this.#appview, "POST", "/api/mutes", {
      body: async () => ({ did: (await this.#session.require()).did, subject: did }),
    });
  }

  /** Unmutes `did` for the logged-in account. */
  unmute(did: string): Promise<UnmuteResult> {
    return this.#authed(this.#appview, "DELETE", `/api/mutes/${encodeURIComponent(did)}`, {
      query: async () => ({ did: (await this.#session.require()).did }),
    });
  }

  /**
   * The logged-in account's like and repost records of the posts `uris` and its follow records
   * of the accounts `actors` (at most 100 of each): what to show as liked, reposted, followed,
   * and the record URI {@link deleteRecord} takes to undo it.
   */
  async viewerState(input: { uris?: string[]; actors?: string[] }): Promise<ViewerState> {
    const { did } = await this.#session.require();
    return this.#call(this.#appview, "GET", "/api/viewer", {
      query: { did, uris: input.uris?.join(","), actors: input.actors?.join(",") },
    });
  }

  // --- plumbing ---

  async #refreshSession(refreshJwt: string): Promise<Session> {
    const session = await this.#call<Session>(
      this.#pds,
      "POST",
      "/xrpc/com.atproto.server.refreshSession",
      {
        token: refreshJwt,
      },
    );
    return pick(session);
  }

  /** An authenticated call under the refresh contract (spec 5.4). */
  #authed<T>(base: string, method: string, path: string, opts: AuthedOptions): Promise<T> {
    return this.#session.run(async (session) =>
      await this.#call<T>(base, method, path, {
        token: session.accessJwt,
        body: typeof opts.body === "function" ? await opts.body() : opts.body,
        query: typeof opts.query === "function" ? await opts.query() : opts.query,
        raw: opts.raw,
      })
    );
  }

  async #call<T>(base: string, method: string, path: string, opts: CallOptions = {}): Promise<T> {
    const url = new URL(base + path);
    for (const [key, value] of Object.entries(opts.query ?? {})) {
      if (value !== undefined && value !== null) url.searchParams.set(key, String(value));
    }
    const headers = new Headers();
    if (opts.token) headers.set("authorization", `Bearer ${opts.token}`);
    let body: BodyInit | undefined;
    if (opts.raw) {
      headers.set("content-type", opts.raw.mimeType);
      body = opts.raw.bytes as Uint8Array<ArrayBuffer>;
    } else if (opts.body !== undefined) {
      headers.set("content-type", "application/json");
      body = JSON.stringify(opts.body);
    }
    const res = await this.#fetch(url, { method, headers, body });
    const text = await res.text();
    let json: unknown = null;
    try {
      json = text === "" ? null : JSON.parse(text);
    } catch {
      if (res.ok) throw new XrpcClientError(res.status, "InvalidResponse", "Response is not JSON");
    }
    if (!res.ok) {
      const err = json as { error?: unknown; message?: unknown } | null;
      // Seconds only (the servers never send an HTTP date); a browser sees the header because
      // both servers expose it to cross-origin callers (runtime/cors.ts).
      const retryAfter = res.headers.get("retry-after")?.trim() ?? "";
      throw new XrpcClientError(
        res.status,
        typeof err?.error === "string" ? err.error : `HTTP${res.status}`,
        typeof err?.message === "string" ? err.message : text.slice(0, 200),
        /^\d{1,9}$/.test(retryAfter) ? Number(retryAfter) : undefined,
      );
    }
    return json as T;
  }
}

interface CallOptions {
  token?: string;
  body?: unknown;
  query?: Query;
  raw?: { bytes: Uint8Array; mimeType: string };
}

interface AuthedOptions {
  body?: unknown | (() => Promise<unknown>);
  query?: Query | (() => Promise<Query>);
  raw?: { bytes: Uint8Array; mimeType: string };
}

function pick(s: Session): Session {
  return { did: s.did, handle: s.handle, accessJwt: s.accessJwt, refreshJwt: s.refreshJwt };
}

export { LoginRequiredError as LogInAgainError };
