/**
 * A stream consumer's connection: a WebSocket client that reconnects with capped exponential
 * backoff and jitter, resets the backoff once a connection has stayed up, closes a connection
 * that stays silent for the idle timeout, and abandons one whose close handshake never ends. What
 * arrives, and what to do once a connection is gone, is the consumer's ({@link SocketHost}).
 *
 * @module
 */

import { type Logger, redactUrl } from "../../../shared/log.ts";
import { type ConnectReason, messageOf, type StreamProtocol } from "./stream_protocol.ts";
import { STATUS_INTERVAL_MS, type StatusPublisher } from "./stream_status.ts";

/** Reconnect delays: the n-th attempt waits about `initialMs * 2^n`, capped at `maxMs`. */
export interface BackoffOptions {
  initialMs: number;
  maxMs: number;
}

/** Default reconnect delays: 0.5 s doubling up to 30 s. */
export const DEFAULT_BACKOFF: BackoffOptions = Object.freeze({ initialMs: 500, maxMs: 30_000 });
/** A connection open this long resets the backoff (so a flapping server still backs off). */
export const STABLE_CONNECTION_MS = 10_000;
/** How long `close()` waits for the socket's close handshake. */
export const CLOSE_TIMEOUT_MS = 2_000;
/**
 * Default of `StreamConsumerOptions.idleTimeoutMs`: long enough that a quiet account host
 * costs one reconnect (from the cursor, nothing replayed twice) every few minutes.
 */
export const IDLE_TIMEOUT_MS = 300_000;

/**
 * Delay before reconnect attempt `attempt` (0-based): "equal jitter", half of the capped
 * exponential step fixed and half random, so delays grow yet clients do not reconnect in step.
 */
export function backoffDelay(
  attempt: number,
  opts: BackoffOptions,
  random: () => number = Math.random,
): number {
  const step = Math.min(opts.maxMs, opts.initialMs * 2 ** Math.min(attempt, 30));
  return Math.round(step / 2 + random() * (step / 2));
}

/** What a {@link StreamSocket} asks of the consumer that owns it. */
export interface SocketHost {
  /** Whether the consumer is closing: no new connection then. */
  closing(): boolean;
  /** Whether the stream is paused for flow control: what still arrives is dropped. */
  paused(): boolean;
  /** A message arrived on the current connection. */
  receive(data: string | ArrayBuffer): void;
  /** The current connection closed (or was abandoned); `wasOpen` when it had opened. */
  gone(wasOpen: boolean, url: string, how: Record<string, unknown>): void;
}

/** Options of {@link StreamSocket}. */
export interface StreamSocketOptions {
  protocol: StreamProtocol;
  log: Logger;
  /** Where the connection's state, cursor and last error are shown. */
  status: StatusPublisher;
  host: SocketHost;
  backoff: BackoffOptions;
  random: () => number;
  idleTimeoutMs: number;
}

/** The reconnecting WebSocket of a stream consumer. */
export class StreamSocket {
  readonly #protocol: StreamProtocol;
  readonly #log: Logger;
  readonly #status: StatusPublisher;
  readonly #host: SocketHost;
  readonly #backoff: BackoffOptions;
  readonly #random: () => number;
  readonly #idleTimeoutMs: number;
  #socket: WebSocket | null = null;
  #socketClosed: Promise<void> = Promise.resolve();
  #openedAt = 0;
  #attempt = 0;
  #reconnectTimer: ReturnType<typeof setTimeout> | null = null;
  #idleTimer: ReturnType<typeof setInterval> | null = null;
  /** When the current socket was made or last delivered a message (performance.now()). */
  #lastActivity = 0;

  constructor(opts: StreamSocketOptions) {
    this.#protocol = opts.protocol;
    this.#log = opts.log;
    this.#status = opts.status;
    this.#host = opts.host;
    this.#backoff = opts.backoff;
    this.#random = opts.random;
    this.#idleTimeoutMs = opts.idleTimeoutMs;
  }

  /** Whether a connection is open or opening. */
  get connected(): boolean {
    return this.#socket !== null;
  }

  /** Starts the idle check and connects. */
  start(): void {
    // Checked a few times per timeout: a timestamp per message is cheaper than a timer each.
    const every = Math.max(10, Math.min(STATUS_INTERVAL_MS, Math.floor(this.#idleTimeoutMs / 4)));
    this.#idleTimer = setInterval(() => this.#checkIdle(), every);
    this.connect("start");
  }

  /** Stops reconnecting and closes the connection, waiting at most {@link CLOSE_TIMEOUT_MS}. */
  async close(): Promise<void> {
    if (this.#reconnectTimer !== null) clearTimeout(this.#reconnectTimer);
    if (this.#idleTimer !== null) clearInterval(this.#idleTimer);
    this.#reconnectTimer = this.#idleTimer = null;
    const socket = this.#socket;
    if (socket !== null) {
      try {
        socket.close(1000);
      } catch { /* already closing */ }
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([
        this.#socketClosed,
        new Promise<void>((r) => (timer = setTimeout(r, CLOSE_TIMEOUT_MS))),
      ]);
      clearTimeout(timer);
    }
  }

  connect(reason: ConnectReason): void {
    this.#reconnectTimer = null;
    if (this.#host.closing()) return;
    this.#status.setState("connecting");
    const target = this.#protocol.connectUrl(this.#status.cursor, reason);
    // Logs and /healthz show the URL without credentials or API keys in its query.
    const url = redactUrl(target);
    let socket: WebSocket;
    try {
      const headers = this.#protocol.connectHeaders?.();
      socket = new WebSocket(target, headers ? { headers } : undefined);
    } catch (e) {
      const error = messageOf(e).replaceAll(target, url);
      this.#status.lastError = `Cannot connect to ${url}: ${error}`;
      this.#log.error("Cannot open stream connection", { url, error });
      this.scheduleReconnect();
      return;
    }
    socket.binaryType = "arraybuffer";
    this.#socket = socket;
    this.#lastActivity = performance.now();
    let resolveClosed!: () => void;
    this.#socketClosed = new Promise((r) => (resolveClosed = r));
    socket.onopen = () => {
      if (this.#socket !== socket) return;
      this.#openedAt = performance.now();
      this.#log.info("Stream connected", { url, cursor: this.#status.cursor });
      this.#status.setState("live");
    };
    socket.onmessage = (event: MessageEvent) => {
      // Once paused, what still arrives is dropped: the stream replays it from the cursor.
      if (this.#socket !== socket || this.#host.paused()) return;
      this.#lastActivity = performance.now();
      this.#host.receive(event.data);
    };
    socket.onerror = (event: Event) => {
      const message = (event as ErrorEvent).message || "WebSocket error";
      if (this.#socket === socket) this.#status.lastError = message.replaceAll(target, url);
    };
    socket.onclose = (event: CloseEvent) => {
      resolveClosed();
      this.#socketGone(socket, url, { code: event.code, reason: event.reason });
    };
  }

  /** `socket` closed (or was abandoned): the host applies what it delivered and reconnects. */
  #socketGone(socket: WebSocket, url: string, how: Record<string, unknown>): void {
    if (this.#socket !== socket) return;
    this.#socket = null;
    const wasOpen = this.#openedAt > 0;
    if (wasOpen && performance.now() - this.#openedAt >= STABLE_CONNECTION_MS) this.#attempt = 0;
    this.#openedAt = 0;
    this.#host.gone(wasOpen, url, how);
  }

  /**
   * Closes the current socket. Deno's client reports a socket closed only once the server answers
   * the close frame, so a server that never does (hung, or cut off without a TCP reset) would
   * leave the consumer waiting for good: after {@link CLOSE_TIMEOUT_MS} the socket is abandoned
   * and treated as closed.
   */
  closeSocket(reason: string): void {
    const socket = this.#socket;
    if (socket === null) return;
    const url = redactUrl(socket.url);
    try {
      socket.close(1000, reason);
    } catch { /* already closing */ }
    const timer = setTimeout(() => {
      if (this.#socket !== socket || this.#host.closing()) return;
      this.#log.warn("Stream did not close in time; abandoning the connection", {
        timeoutMs: CLOSE_TIMEOUT_MS,
      });
      this.#socketGone(socket, url, { abandoned: true });
    }, CLOSE_TIMEOUT_MS);
    this.#socketClosed.then(() => clearTimeout(timer));
  }

  /** Closes a connection silent for the idle timeout; the consumer reconnects from its cursor. */
  #checkIdle(): void {
    if (this.#socket === null || this.#host.paused() || this.#host.closing()) return;
    const silentMs = performance.now() - this.#lastActivity;
    if (silentMs < this.#idleTimeoutMs) return;
    this.#log.info("Stream silent; reconnecting from the stored cursor", {
      silentMs: Math.round(silentMs),
      opened: this.#openedAt > 0,
      cursor: this.#status.cursor,
    });
    this.#lastActivity = performance.now(); // one close per timeout, even if it hangs
    this.closeSocket("no message within the idle timeout");
  }

  scheduleReconnect(): void {
    if (this.#host.closing() || this.#reconnectTimer !== null) return;
    const delay = backoffDelay(this.#attempt++, this.#backoff, this.#random);
    this.#status.setState("backoff");
    this.#log.info("Reconnecting after backoff", { delayMs: delay, attempt: this.#attempt });
    this.#reconnectTimer = setTimeout(() => this.connect("reconnect"), delay);
  }
}
