/**
 * Loading data for a screen: one request (`useLoad`) or a list paged by cursor as the member
 * scrolls (`usePaged`), each with loading, error and retry states. An expired session anywhere
 * sends the member back to the login screen with the reason.
 *
 * @module
 */

import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { LoginRequiredError, XrpcClientError } from "../shared/client.ts";
import { useApp } from "./state.ts";

/** "in 30 minutes": how long `seconds` is, rounded up, as a member reads it. */
export function waitText(seconds: number): string {
  if (seconds < 60) return `in ${seconds} ${seconds === 1 ? "second" : "seconds"}`;
  const minutes = Math.ceil(seconds / 60);
  if (minutes < 60) return `in ${minutes} ${minutes === 1 ? "minute" : "minutes"}`;
  const hours = Math.ceil(minutes / 60);
  return `in ${hours} ${hours === 1 ? "hour" : "hours"}`;
}

/**
 * A message for a failed request, fit to show a member (rendered as text). A 429 says when to try
 * again from the server's `Retry-After` (both servers expose it to the web app's origin).
 */
export function errorText(err: unknown): string {
  if (err instanceof XrpcClientError) {
    if (err.status === 429) {
      const when = err.retryAfter === undefined ? "in a little while" : waitText(err.retryAfter);
      return `Too many attempts: try again ${when}.`;
    }
    if (err.status >= 500) return `The server had a problem (${err.error}). Try again shortly.`;
    return err.message || err.error;
  }
  if (err instanceof TypeError) {
    return "Could not reach the server. Check the connection and try again.";
  }
  return err instanceof Error ? err.message : String(err);
}

/** Handles a failed call: a lost session logs out with its reason; true when it was that. */
export function useSessionGuard(): (err: unknown) => boolean {
  const app = useApp();
  return useCallback((err: unknown) => {
    if (err instanceof LoginRequiredError) {
      app.signedOut("Your session has ended. Log in again.");
      return true;
    }
    return false;
  }, [app]);
}

/** State of one load. */
export type Load<T> =
  | { status: "loading" }
  | { status: "error"; error: string }
  | { status: "ok"; data: T };

/** Runs `fn` when `deps` change; `reload` runs it again. */
export function useLoad<T>(
  fn: () => Promise<T>,
  deps: unknown[],
): [Load<T>, () => void, (data: T) => void] {
  const [state, setState] = useState<Load<T>>({ status: "loading" });
  const [round, setRound] = useState(0);
  const guard = useSessionGuard();
  useEffect(() => {
    let live = true;
    setState({ status: "loading" });
    fn().then(
      (data) => live && setState({ status: "ok", data }),
      (err) => {
        if (!live || guard(err)) return;
        setState({ status: "error", error: errorText(err) });
      },
    );
    return () => {
      live = false;
    };
  }, [...deps, round]);
  return [state, () => setRound((r) => r + 1), (data: T) => setState({ status: "ok", data })];
}

/** A page of a list. */
export interface PageOf<T> {
  items: T[];
  cursor: string | null;
}

/** State of a paged list. */
export interface Paged<T> {
  items: T[];
  /** First page still loading. */
  loading: boolean;
  /** A later page loading. */
  loadingMore: boolean;
  error: string | null;
  /** No more pages. */
  done: boolean;
  loadMore(): void;
  /** Starts again from the first page. */
  reload(): void;
  /** Changes the loaded items in place (after a delete). */
  update(fn: (items: T[]) => T[]): void;
  /** Attach to an element at the list's end: it loads the next page when it scrolls into view. */
  sentinel: (el: Element | null) => void;
}

/** A list loaded page by page with `fetchPage(cursor)`; restarts when `deps` change. */
export function usePaged<T>(
  fetchPage: (cursor: string | null) => Promise<PageOf<T>>,
  deps: unknown[],
): Paged<T> {
  const [items, setItems] = useState<T[]>([]);
  const [cursor, setCursor] = useState<string | null>(null);
  const [loading, setLoading] = useState(true);
  const [loadingMore, setLoadingMore] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const [done, setDone] = useState(false);
  const [round, setRound] = useState(0);
  const busy = useRef(false);
  const generation = useRef(0);
  const guard = useSessionGuard();

  const load = useCallback((from: string | null, gen: number) => {
    if (busy.current) return;
    busy.current = true;
    setError(null);
    if (from === null) setLoading(true);
    else setLoadingMore(true);
    fetchPage(from).then(
      (page) => {
        if (gen !== generation.current) return;
        setItems((old) => (from === null ? page.items : [...old, ...page.items]));
        setCursor(page.cursor);
        setDone(page.cursor === null);
      },
      (err) => {
        if (gen !== generation.current || guard(err)) return;
        setError(errorText(err));
      },
    ).finally(() => {
      if (gen !== generation.current) return;
      busy.current = false;
      setLoading(false);
      setLoadingMore(false);
    });
  }, deps);

  useEffect(() => {
    const gen = ++generation.current;
    busy.current = false;
    setItems([]);
    setCursor(null);
    setDone(false);
    load(null, gen);
  }, [...deps, round]);

  const state = useRef({ cursor, done, error, loading });
  state.current = { cursor, done, error, loading };
  const loadMore = useCallback(() => {
    const s = state.current;
    if (s.done || s.loading || s.cursor === null) return;
    load(s.cursor, generation.current);
  }, [load]);

  const observer = useRef<IntersectionObserver | null>(null);
  const target = useRef<Element | null>(null);
  const sentinel = useCallback((el: Element | null) => {
    observer.current?.disconnect();
    observer.current = null;
    target.current = el;
    if (el === null) return;
    observer.current = new IntersectionObserver((entries) => {
      if (entries.some((e) => e.isIntersecting) && state.current.error === null) loadMore();
    }, { rootMargin: "800px 0px" });
    observer.current.observe(el);
  }, [loadMore]);
  useEffect(() => () => observer.current?.disconnect(), []);
  // An observer reports only changes: when a page arrived and the end is still in view (a tall
  // screen, a short page), observing afresh reports it again and the next page loads.
  useEffect(() => {
    const o = observer.current;
    const t = target.current;
    if (o === null || t === null || loading || loadingMore) return;
    o.unobserve(t);
    o.observe(t);
  }, [items.length, loading, loadingMore]);

  return {
    items,
    loading,
    loadingMore,
    error,
    done,
    loadMore,
    reload: () => setRound((r) => r + 1),
    update: (fn) => setItems(fn),
    sentinel,
  };
}
