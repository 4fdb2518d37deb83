/**
 * Full-text search (spec 4.2, docs/behaviour.md 12): FTS5 over post text, newest first. The user's
 * input is never FTS5 syntax: it is split on white space and every word becomes a quoted string
 * (inner quotes doubled), joined by spaces (an implicit AND). Quotes, operators (`AND`, `NEAR`,
 * `-`, `*`, `^`, column filters) and unbalanced parentheses are plain text, so no input makes
 * the query fail. Control characters count as white space. Words without a letter or digit are dropped (the tokenizer would ignore them).
 *
 * Order: `posts_fts` rowids are `posts.id`, which grows with indexing order, so `ORDER BY rowid
 * DESC` is newest first without sorting every match; the cursor is the last rowid returned.
 *
 * @module
 */

import type { DatabaseSync, StatementSync } from "node:sqlite";
import type { PostHydrator } from "./posts.ts";
import type { PostRow } from "./present.ts";
import { actorIdSql } from "../db/schema.ts";
import { inactiveSql, unavailableSql } from "./safety.ts";

/** Most words of a query that are used; the rest are ignored. */
export const MAX_SEARCH_TERMS = 16;
/** Longest word kept (longer words are cut): a bound on the work of one query. */
export const MAX_TERM_LENGTH = 64;

const HAS_WORD_CHAR = /[\p{L}\p{N}]/u;
const AUTHOR_OF_MATCH = "(SELECT author FROM posts WHERE id = f.rowid)";

/** One page of search results. */
export interface SearchPage {
  rows: PostRow[];
  /** Row id of the last result when more may follow. */
  next: number | null;
}

/**
 * The words of user input that are searched, in order: split on white space, without the words
 * that have no letter or digit, each cut to {@link MAX_TERM_LENGTH} characters, at most
 * {@link MAX_SEARCH_TERMS}. Shared with the PostgreSQL search (`pg/search.ts`).
 */
export function searchTerms(input: string): string[] {
  const terms: string[] = [];
  // Control characters (NUL ends an FTS5 string early) separate words like white space.
  for (const word of input.replace(/\p{Cc}/gu, " ").split(/\s+/u)) {
    if (word === "" || !HAS_WORD_CHAR.test(word)) continue;
    terms.push([...word].slice(0, MAX_TERM_LENGTH).join(""));
    if (terms.length === MAX_SEARCH_TERMS) break;
  }
  return terms;
}

/**
 * Turns user input into an FTS5 query of quoted plain terms; null when nothing searchable is
 * left (the result is then empty).
 */
export function toFtsQuery(input: string): string | null {
  const terms = searchTerms(input);
  return terms.length === 0 ? null : terms.map((t) => `"${t.replaceAll('"', '""')}"`).join(" ");
}

/** Searches posts with a statement prepared once. */
export class SearchView {
  readonly #posts: PostHydrator;
  readonly #match: StatementSync;
  readonly #matchForViewer: StatementSync;

  constructor(db: DatabaseSync, posts: PostHydrator) {
    this.#posts = posts;
    // Each match's author is read by the post's primary key, then the inactive-account seek
    // (spec 4.2 rule 12) and, with a viewer, the block seeks.
    this.#match = db.prepare(
      `SELECT f.rowid AS id FROM posts_fts f
       WHERE posts_fts MATCH ?1 AND f.rowid < ?2
         AND NOT ${inactiveSql(AUTHOR_OF_MATCH)}
       ORDER BY f.rowid DESC LIMIT ?3`,
    );
    this.#matchForViewer = db.prepare(
      `SELECT f.rowid AS id FROM posts_fts f
       WHERE posts_fts MATCH ?1 AND f.rowid < ?2
         AND NOT ${unavailableSql(actorIdSql("?4"), AUTHOR_OF_MATCH)}
       ORDER BY f.rowid DESC LIMIT ?3`,
    );
  }

  /**
   * Posts matching every word of `q`, newest first, below the row id `before` (null: top), none
   * by an inactive account (spec 4.2 rule 12); with `viewerDid`, none by an account the viewer
   * blocks or is blocked by (rule 10).
   */
  search(
    q: string,
    opts: { limit: number; before: number | null; viewerDid?: string | null },
  ): SearchPage {
    const query = toFtsQuery(q);
    if (query === null) return { rows: [], next: null };
    const before = opts.before ?? Number.MAX_SAFE_INTEGER;
    const found = opts.viewerDid
      ? this.#matchForViewer.all(query, before, opts.limit + 1, opts.viewerDid)
      : this.#match.all(query, before, opts.limit + 1);
    const ids = (found as { id: number }[]).map((r) => r.id);
    const more = ids.length > opts.limit;
    if (more) ids.length = opts.limit;
    return { rows: this.#posts.byIds(ids), next: more ? ids[ids.length - 1] : null };
  }
}
