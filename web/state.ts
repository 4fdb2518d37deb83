/**
 * What every screen shares: the one client, the session, and how an authentication failure
 * returns the member to the login screen.
 *
 * @module
 */

import { createContext } from "preact";
import { useContext } from "preact/hooks";
import type { Post, Session, SocialClient } from "../shared/client.ts";
import type { WebConfig } from "./config.ts";

/** The app's shared state. */
export interface AppState {
  client: SocialClient;
  config: WebConfig;
  /** The logged-in member, or null. */
  session: Session | null;
  /** After sign-up or login. */
  signedIn(session: Session): void;
  /** Ends the session; `message` is shown on the login screen (why the member must log in). */
  signedOut(message?: string): void;
  /** Why the member was sent to the login screen, if they were. */
  notice: string | null;
  /** Opens the reply dialog for `post`. */
  reply(post: Post): void;
  /** Unread notifications, as last counted. */
  unread: number;
  /** Counts unread notifications again now. */
  refreshUnread(): void;
}

/** Context of {@link AppState}. */
export const AppContext = createContext<AppState | null>(null);

/** The app's shared state (inside `<App>`). */
export function useApp(): AppState {
  const state = useContext(AppContext);
  if (state === null) throw new Error("useApp outside <App>");
  return state;
}
