/**
 * The read side of the index on PostgreSQL (issue 40): every view of `views/views.ts` with the
 * same methods, parameters and results, each method async, built for few round trips (plan in
 * each module). They share the SQLite views' pure parts: cursors (`cursor.ts`), presentation
 * (`present.ts`), the safety filters' SQL (`safety.ts`), the search words (`search.ts`).
 *
 * @module
 */

import type { AsyncViews } from "../../db/store.ts";
import { PgGraphView } from "./graph.ts";
import { PgNotificationView } from "./notifications.ts";
import { PgPostHydrator } from "./posts.ts";
import { PgProfileView } from "./profile.ts";
import type { PgSql } from "../../db/pg/open.ts";
import { PgSafetyView } from "./safety.ts";
import { PgSearchView } from "./search.ts";
import { PgThreadView } from "./thread.ts";
import { PgTimelineView } from "./timeline.ts";
import { PgViewerView } from "./viewer.ts";

export type { PgClient } from "./query.ts";

/** Every read view of the index on PostgreSQL: the index store's `AsyncViews`. */
export interface PgViews extends AsyncViews {
  readonly posts: PgPostHydrator;
  readonly timeline: PgTimelineView;
  readonly profiles: PgProfileView;
  readonly search: PgSearchView;
  readonly threads: PgThreadView;
  readonly notifications: PgNotificationView;
  readonly graph: PgGraphView;
  readonly viewer: PgViewerView;
  readonly safety: PgSafetyView;
}

/** Every view over the pool (or connection) `sql`, which parses int8 as numbers (`query.ts`). */
export function createPgViews(sql: PgSql): PgViews {
  const posts = new PgPostHydrator(sql);
  return {
    posts,
    timeline: new PgTimelineView(sql),
    profiles: new PgProfileView(sql),
    search: new PgSearchView(sql),
    threads: new PgThreadView(sql, posts),
    notifications: new PgNotificationView(sql),
    graph: new PgGraphView(sql),
    viewer: new PgViewerView(sql),
    safety: new PgSafetyView(sql),
  };
}
