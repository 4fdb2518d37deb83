/**
 * Session handling of the client: pluggable storage and the refresh contract of spec 5.4.
 *
 * - On an expired or invalid access token (the index's 401 `TokenInvalid`, the account host's
 *   400 `ExpiredToken`) the failed request is repeated exactly once after a refresh.
 * - Concurrent refreshes are coalesced into one `refreshSession` call.
 * - A failed refresh clears the session and surfaces as {@link LoginRequiredError}.
 *
 * @module
 */

import type { Session } from "./client_types.ts";

/** Where the client keeps its session. Memory by default; scripts may use a file. */
export interface SessionStore {
  load(): Session | null | Promise<Session | null>;
  save(session: Session | null): void | Promise<void>;
}

/** Keeps the session in memory only. */
export class MemorySessionStore implements SessionStore {
  #session: Session | null;
  constructor(session: Session | null = null) {
    this.#session = session;
  }
  load(): Session | null {
    return this.#session;
  }
  save(session: Session | null): void {
    this.#session = session;
  }
}

/**
 * An error answered by a server: HTTP status and the `{error, message}` body, and for a rate
 * limit (429) the seconds its `Retry-After` header asks to wait, when it sent one.
 */
export class XrpcClientError extends Error {
  override name = "XrpcClientError";
  constructor(
    readonly status: number,
    readonly error: string,
    message: string,
    readonly retryAfter?: number,
  ) {
    super(message);
  }
}

/** The session is gone (refresh failed or never logged in): the user must log in again. */
export class LoginRequiredError extends Error {
  override name = "LoginRequiredError";
}

/** True when an answer means "refresh the token pair and try again" (spec 5.4). */
export function needsRefresh(err: unknown): boolean {
  if (!(err instanceof XrpcClientError)) return false;
  return (err.status === 401 && err.error === "TokenInvalid") ||
    (err.status === 400 && err.error === "ExpiredToken");
}

/**
 * Holds the current session and runs authenticated calls under the refresh contract.
 * `refresh` performs the `refreshSession` call with a refresh token.
 */
export class SessionManager {
  readonly #store: SessionStore;
  readonly #refresh: (refreshJwt: string) => Promise<Session>;
  #refreshing: Promise<Session> | null = null;
  #refreshCount = 0;

  constructor(store: SessionStore, refresh: (refreshJwt: string) => Promise<Session>) {
    this.#store = store;
    this.#refresh = refresh;
  }

  /** Number of `refreshSession` calls made so far (for diagnostics and tests). */
  get refreshCount(): number {
    return this.#refreshCount;
  }

  /** The stored session, or null. */
  async current(): Promise<Session | null> {
    return await this.#store.load();
  }

  /** Stores a session obtained by logging in or creating an account. */
  async set(session: Session | null): Promise<void> {
    await this.#store.save(session);
  }

  /** The session, or {@link LoginRequiredError} when there is none. */
  async require(): Promise<Session> {
    const session = await this.#store.load();
    if (!session) throw new LoginRequiredError("Not logged in: log in again");
    return session;
  }

  /**
   * Runs `call` with the access token; when it fails with a refreshable error, refreshes once
   * (coalesced with concurrent refreshes) and repeats it exactly once.
   */
  async run<T>(call: (session: Session) => Promise<T>): Promise<T> {
    const session = await this.require();
    try {
      return await call(session);
    } catch (err) {
      if (!needsRefresh(err)) throw err;
      const fresh = await this.#refreshAfter(session);
      return await call(fresh);
    }
  }

  /** Refreshes unless another call already replaced the token that failed. */
  #refreshAfter(failed: Session): Promise<Session> {
    // Claimed synchronously: callers arriving while it runs must join, not start another.
    this.#refreshing ??= (async () => {
      const current = await this.#store.load();
      if (!current) throw new LoginRequiredError("Session was cleared: log in again");
      if (current.accessJwt !== failed.accessJwt) return current;
      return await this.#doRefresh(current.refreshJwt);
    })().finally(() => {
      this.#refreshing = null;
    });
    return this.#refreshing;
  }

  async #doRefresh(refreshJwt: string): Promise<Session> {
    this.#refreshCount++;
    let fresh: Session;
    try {
      fresh = await this.#refresh(refreshJwt);
    } catch (err) {
      if (err instanceof XrpcClientError) {
        await this.#store.save(null);
        throw new LoginRequiredError(`Session refresh failed (${err.error}): log in again`);
      }
      throw err;
    }
    await this.#store.save(fresh);
    return fresh;
  }
}
