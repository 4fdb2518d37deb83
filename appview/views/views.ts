/**
 * The read side of the index: every view over one database connection, each with its
 * statements prepared once (when the app is built, not per request).
 *
 * @module
 */

import type { DatabaseSync } from "node:sqlite";
import { GraphView } from "./graph.ts";
import { NotificationView } from "./notifications.ts";
import { PostHydrator } from "./posts.ts";
import { ProfileView } from "./profile.ts";
import { SafetyView } from "./safety.ts";
import { SearchView } from "./search.ts";
import { ThreadView } from "./thread.ts";
import { TimelineView } from "./timeline.ts";
import { ViewerView } from "./viewer.ts";

/** Every read view of the index. */
export interface Views {
  readonly posts: PostHydrator;
  readonly timeline: TimelineView;
  readonly profiles: ProfileView;
  readonly search: SearchView;
  readonly threads: ThreadView;
  readonly notifications: NotificationView;
  readonly graph: GraphView;
  readonly viewer: ViewerView;
  readonly safety: SafetyView;
}

/** Prepares every view over `db`. */
export function createViews(db: DatabaseSync): Views {
  const posts = new PostHydrator(db);
  const safety = new SafetyView(db);
  return {
    posts,
    timeline: new TimelineView(db, posts),
    profiles: new ProfileView(db, safety),
    search: new SearchView(db, posts),
    threads: new ThreadView(db, posts, safety),
    notifications: new NotificationView(db),
    graph: new GraphView(db),
    viewer: new ViewerView(db),
    safety,
  };
}
