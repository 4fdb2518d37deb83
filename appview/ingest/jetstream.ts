/**
 * Public-stream consumer (spec 6.3; docs/behaviour.md 10.8 "Public stream"): a Jetstream JSON client
 * of `config.jetstreamUrl` (`?wantedCollections=app.social.*`), disabled when that is null.
 *
 * The cursor is Jetstream's `time_us` (microseconds, about 1.7e15), stored in its own row
 * (`CURSOR_PUBLIC_TIME_US`, never the local stream's) in the transaction of the ops it covers.
 * On start and after a connection lost in an unknown state (error, close by the server, idle
 * timeout) it is rewound a few seconds, as Jetstream advises; redelivered events are harmless
 * because the write path is idempotent. Resuming after a flow-control pause it is not rewound:
 * the consumer closed that connection itself after applying all it received, and Jetstream
 * replays from the cursor on (`time_us` at or after it), so the stream goes on where it stopped.
 * Rewinding there made a backlog denser than the queue bound per rewind (about 1,000 events/s
 * at the default 5,000 messages) replay only applied events on every resume (issue 36). The
 * cursor never moves backwards. Identity events become `HandleOp`s. Malformed events are
 * skipped with a log line.
 *
 * A commit event carries its repository commit's `rev`: the write path applies it only when that
 * rev is at least the latest rev applied for the repository (`RevGate` `"newer-or-equal"`: the
 * events of one multi-op commit share a rev), so a rewound or late event never undoes a newer
 * commit. An event without a valid rev cannot be placed and is applied as before, ungated.
 *
 * @module
 */

import { SOCIAL_COLLECTION_GLOB } from "../../shared/nsid.ts";
import { opsFromJetstream } from "../../shared/ops.ts";
import { isValidTid } from "../../shared/tid.ts";
import type { AppviewContext } from "../context.ts";
import { CONSUMER_PUBLIC, CURSOR_PUBLIC_TIME_US } from "../db/state.ts";
import {
  type ConnectReason,
  type DecodedMessage,
  messageOf,
  StreamConsumer,
  type StreamConsumerOptions,
  type StreamControl,
  type StreamProtocol,
} from "./stream_consumer.ts";

/**
 * How far the cursor is rewound on start and after a lost connection (not when resuming after a
 * flow-control pause): 5 seconds, in microseconds.
 */
export const JETSTREAM_REWIND_US = 5_000_000;
/** Largest event accepted (characters of JSON text). */
export const MAX_JETSTREAM_EVENT_CHARS = 2 * 1024 * 1024;

/** Options of {@link createJetstreamConsumer}. */
export interface JetstreamOptions extends StreamConsumerOptions {
  /** Jetstream `/subscribe` URL. Default `ctx.config.jetstreamUrl`. */
  url?: string;
}

/** The Jetstream side of the public-stream consumer. */
export class JetstreamProtocol implements StreamProtocol {
  readonly consumer = CONSUMER_PUBLIC;
  readonly cursorName = CURSOR_PUBLIC_TIME_US;
  readonly #url: string;

  constructor(url: string) {
    this.#url = url;
  }

  connectUrl(cursor: number | null, reason: ConnectReason): string {
    const url = new URL(this.#url);
    url.searchParams.set("wantedCollections", SOCIAL_COLLECTION_GLOB);
    if (cursor !== null) {
      const rewind = reason === "resume" ? 0 : JETSTREAM_REWIND_US;
      url.searchParams.set("cursor", String(Math.max(0, cursor - rewind)));
    } else {
      url.searchParams.delete("cursor");
    }
    return url.href;
  }

  decode(
    data: string | ArrayBuffer,
    cursor: number | null,
    control: StreamControl,
  ): DecodedMessage | null {
    const { log } = control;
    if (typeof data !== "string") {
      log.warn("Binary event skipped: Jetstream events are JSON text", { bytes: data.byteLength });
      control.fail("Binary event skipped");
      return null;
    }
    if (data.length > MAX_JETSTREAM_EVENT_CHARS) {
      log.warn("Event skipped: too large", { length: data.length });
      control.fail(`Event skipped: ${data.length} characters`);
      return null;
    }
    let event: unknown;
    try {
      event = JSON.parse(data);
    } catch (e) {
      log.warn("Event skipped: not valid JSON", { error: e, length: data.length });
      control.fail(`Event skipped: ${messageOf(e)}`);
      return null;
    }
    const timeUs = (event as { time_us?: unknown } | null)?.time_us;
    if (typeof timeUs !== "number" || !Number.isSafeInteger(timeUs) || timeUs < 0) {
      log.warn("Event skipped: invalid time_us", { time_us: String(timeUs) });
      control.fail(`Event skipped: invalid time_us ${String(timeUs)}`);
      return null;
    }
    const next = cursor === null ? timeUs : Math.max(cursor, timeUs);
    try {
      const ops = opsFromJetstream(event);
      const { kind, did, commit } = event as { kind: unknown; did: string; commit?: unknown };
      const rev = kind === "commit" ? (commit as { rev?: unknown }).rev : undefined;
      return typeof rev === "string" && isValidTid(rev)
        ? { ops, cursor: next, commit: { did, rev, mode: "newer-or-equal" } }
        : { ops, cursor: next };
    } catch (e) {
      log.warn("Event skipped: it cannot be converted", { time_us: timeUs, error: e });
      control.fail(`Event ${timeUs} skipped: ${messageOf(e)}`);
      return { ops: [], cursor: next };
    }
  }
}

/**
 * Builds the public-stream consumer, or null when no Jetstream URL is configured (the caller then
 * reports the consumer as disabled).
 */
export function createJetstreamConsumer(
  ctx: AppviewContext,
  opts: JetstreamOptions = {},
): StreamConsumer | null {
  const url = opts.url ?? ctx.config.jetstreamUrl;
  if (url === null) return null;
  return new StreamConsumer(ctx, new JetstreamProtocol(url), opts);
}
