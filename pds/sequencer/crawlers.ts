/**
 * Asking relays to crawl this host (`com.atproto.sync.requestCrawl`, docs/behaviour.md 6.1 rule
 * 11): each relay of `PDS_CRAWLERS` gets `POST {relay}/xrpc/com.atproto.sync.requestCrawl` with
 * `{hostname}` (the host of `PDS_PUBLIC_URL`) when the host starts, and again on the first commit
 * after a quiet period of {@link CRAWL_NOTIFY_INTERVAL_MS}, as the reference host's `Crawlers`
 * does. Requests run in the background (a commit never waits for one), at most one per relay at
 * a time, each bounded by a timeout; a failure is logged with the relay's origin and the answer's
 * status, never more.
 *
 * @module
 */

import type { Logger } from "../../shared/log.ts";
import type { Sequencer } from "./sequencer.ts";

/** Least time between two notifications (the reference host's 20 minutes). */
export const CRAWL_NOTIFY_INTERVAL_MS = 20 * 60_000;
/** How long one requestCrawl may take (ms). */
export const CRAWL_REQUEST_TIMEOUT_MS = 10_000;
/** Most bytes of a relay's answer read (then the rest is dropped). */
const MAX_ANSWER_BYTES = 1024;

/** Options of {@link Crawlers}. */
export interface CrawlersOptions {
  /** Relay origins (`PDS_CRAWLERS`). */
  crawlers: readonly string[];
  /** The host's public URL; its host (with a port, if any) is the `hostname` sent. */
  publicUrl: string;
  log: Logger;
  /** Milliseconds since the epoch (injectable for tests). */
  now?: () => number;
  intervalMs?: number;
  timeoutMs?: number;
}

/** The relays to notify; {@link start} then {@link close}. */
export class Crawlers {
  readonly #crawlers: readonly string[];
  readonly #hostname: string;
  readonly #log: Logger;
  readonly #now: () => number;
  readonly #intervalMs: number;
  readonly #timeoutMs: number;
  readonly #inFlight = new Map<string, Promise<void>>();
  readonly #abort = new AbortController();
  #lastNotified = -Infinity;
  #unsubscribe: (() => void) | null = null;
  #requests = 0;

  constructor(opts: CrawlersOptions) {
    this.#crawlers = opts.crawlers;
    this.#hostname = new URL(opts.publicUrl).host;
    this.#log = opts.log;
    this.#now = opts.now ?? Date.now;
    this.#intervalMs = opts.intervalMs ?? CRAWL_NOTIFY_INTERVAL_MS;
    this.#timeoutMs = opts.timeoutMs ?? CRAWL_REQUEST_TIMEOUT_MS;
  }

  /** Requests sent so far (tests, diagnostics). */
  get requests(): number {
    return this.#requests;
  }

  /** Notifies the relays now and on the commits of `sequencer` after each quiet period. */
  start(sequencer: Sequencer): void {
    if (this.#crawlers.length === 0 || this.#unsubscribe !== null) return;
    this.#unsubscribe = sequencer.onCommit(() => this.notifyOfUpdate());
    this.notifyOfUpdate();
  }

  /** Something changed: notifies the relays unless they were notified within the interval. */
  notifyOfUpdate(): void {
    const now = this.#now();
    if (this.#abort.signal.aborted || now - this.#lastNotified < this.#intervalMs) return;
    this.#lastNotified = now;
    for (const crawler of this.#crawlers) {
      if (this.#inFlight.has(crawler)) continue; // still asking: one request per relay
      const request = this.#requestCrawl(crawler).finally(() => this.#inFlight.delete(crawler));
      this.#inFlight.set(crawler, request);
    }
  }

  /** Resolves once no request is in flight (tests). */
  async settled(): Promise<void> {
    while (this.#inFlight.size > 0) await Promise.all(this.#inFlight.values());
  }

  /** Stops listening and ends the requests in flight. */
  async close(): Promise<void> {
    this.#unsubscribe?.();
    this.#unsubscribe = null;
    this.#abort.abort();
    await this.settled();
  }

  async #requestCrawl(crawler: string): Promise<void> {
    this.#requests++;
    try {
      const res = await fetch(`${crawler}/xrpc/com.atproto.sync.requestCrawl`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ hostname: this.#hostname }),
        redirect: "manual",
        signal: AbortSignal.any([this.#abort.signal, AbortSignal.timeout(this.#timeoutMs)]),
      });
      await drain(res);
      if (res.ok) {
        this.#log.info("requestCrawl accepted", { crawler, hostname: this.#hostname });
      } else {
        this.#log.warn("requestCrawl refused", { crawler, status: res.status });
      }
    } catch (err) {
      if (this.#abort.signal.aborted) return; // shutting down
      const timeout = err instanceof DOMException && err.name === "TimeoutError";
      this.#log.warn("requestCrawl failed", {
        crawler,
        error: timeout
          ? `no answer within ${this.#timeoutMs} ms`
          : err instanceof Error
          ? err.message
          : String(err),
      });
    }
  }
}

/** Reads and drops at most {@link MAX_ANSWER_BYTES} of an answer, then lets the rest go. */
async function drain(res: Response): Promise<void> {
  if (res.body === null) return;
  const reader = res.body.getReader();
  try {
    let bytes = 0;
    while (bytes < MAX_ANSWER_BYTES) {
      const { done, value } = await reader.read();
      if (done) return;
      bytes += value.length;
    }
  } finally {
    await reader.cancel().catch(() => {});
  }
}
