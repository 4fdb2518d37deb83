/**
 * The browser's session store: the token pair in `localStorage`, so a session survives a reload
 * and is shared by the tabs of one origin. The client's refresh contract (spec 5.4) writes the
 * rotated pair back here.
 *
 * @module
 */

import type { Session, SessionStore } from "../shared/client.ts";

/** `localStorage` key of the session. */
export const SESSION_KEY = "social.session";

/** Keeps the session in `localStorage`; a value that is not a session reads as none. */
export class LocalSessionStore implements SessionStore {
  readonly #storage: Storage;
  constructor(storage: Storage = localStorage) {
    this.#storage = storage;
  }

  load(): Session | null {
    const raw = this.#storage.getItem(SESSION_KEY);
    if (raw === null) return null;
    try {
      const s = JSON.parse(raw);
      const ok = typeof s?.did === "string" && typeof s.handle === "string" &&
        typeof s.accessJwt === "string" && typeof s.refreshJwt === "string";
      return ok
        ? { did: s.did, handle: s.handle, accessJwt: s.accessJwt, refreshJwt: s.refreshJwt }
        : null;
    } catch {
      return null;
    }
  }

  save(session: Session | null): void {
    if (session === null) this.#storage.removeItem(SESSION_KEY);
    else this.#storage.setItem(SESSION_KEY, JSON.stringify(session));
  }
}
