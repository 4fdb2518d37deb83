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

import type { LogFields } from "../../../shared/log.ts";
import { SOCIAL_COLLECTION_GLOB } from "../../../shared/nsid.ts";
import { type IndexOp, opsFromJetstream } from "../../../shared/ops.ts";
import { isValidTid } from "../../../shared/tid.ts";
import type { AppviewContext } from "../../context.ts";
import { CONSUMER_PUBLIC, CURSOR_PUBLIC_TIME_US } from "../../db/state.ts";
import { StreamConsumer, type StreamConsumerOptions } from "./stream_consumer.ts";
import {
  type ConnectReason,
  type DecodedMessage,
  messageOf,
  type StreamControl,
  type StreamParser,
  type StreamProtocol,
} from "./stream_protocol.ts";

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

  /**
   * The cursor-independent, CPU-heavy half of {@link decode} ({@link parseJetstreamEvent}: the
   * JSON text, its checks and the ops), run by the consumer in a worker thread so that it
   * overlaps with the index writes.
   */
  readonly parser: StreamParser = {
    workerUrl: new URL("./jetstream_parse_worker.ts", import.meta.url),
    options: null,
    accept: (parsed, cursor, control) =>
      acceptJetstreamEvent(parsed as JetstreamParsed, cursor, control),
  };

  decode(
    data: string | ArrayBuffer,
    cursor: number | null,
    control: StreamControl,
  ): DecodedMessage | null {
    return acceptJetstreamEvent(parseJetstreamEvent(data), cursor, control);
  }
}

/**
 * A Jetstream message parsed without the consumer's state (structured-cloneable: errors are
 * kept as their name and message, which is what a log line shows of them).
 */
export type JetstreamParsed =
  | { t: "event"; timeUs: number; ops: IndexOp[]; commit?: { did: string; rev: string } }
  | {
    t: "skip";
    /** Logged at warn level by {@link acceptJetstreamEvent}. */
    msg: string;
    fields: LogFields;
    /** Recorded as the consumer's last error. */
    reason: string;
    /** Set when the event had a valid `time_us`: the cursor still moves past it. */
    timeUs?: number;
  };

/** An error as a log line shows it (`formatLogLine`), cloneable to the consumer's thread. */
function errorFields(e: unknown): { name: string; message: string } | string {
  return e instanceof Error ? { name: e.name, message: e.message } : String(e);
}

/** Parses one Jetstream message: everything but the cursor (see {@link JetstreamParsed}). */
export function parseJetstreamEvent(data: string | ArrayBuffer): JetstreamParsed {
  if (typeof data !== "string") {
    return {
      t: "skip",
      msg: "Binary event skipped: Jetstream events are JSON text",
      fields: { bytes: data.byteLength },
      reason: "Binary event skipped",
    };
  }
  if (data.length > MAX_JETSTREAM_EVENT_CHARS) {
    return {
      t: "skip",
      msg: "Event skipped: too large",
      fields: { length: data.length },
      reason: `Event skipped: ${data.length} characters`,
    };
  }
  let event: unknown;
  try {
    event = JSON.parse(data);
  } catch (e) {
    return {
      t: "skip",
      msg: "Event skipped: not valid JSON",
      fields: { error: errorFields(e), length: data.length },
      reason: `Event skipped: ${messageOf(e)}`,
    };
  }
  const timeUs = (event as { time_us?: unknown } | null)?.time_us;
  if (typeof timeUs !== "number" || !Number.isSafeInteger(timeUs) || timeUs < 0) {
    return {
      t: "skip",
      msg: "Event skipped: invalid time_us",
      fields: { time_us: String(timeUs) },
      reason: `Event skipped: invalid time_us ${String(timeUs)}`,
    };
  }
  try {
    const ops = opsFromJetstream(event);
    const { kind, did, commit } = event as { kind: unknown; did: string; commit?: unknown };
    const rev = kind === "commit" ? (commit as { rev?: unknown }).rev : undefined;
    return typeof rev === "string" && isValidTid(rev)
      ? { t: "event", timeUs, ops, commit: { did, rev } }
      : { t: "event", timeUs, ops };
  } catch (e) {
    return {
      t: "skip",
      msg: "Event skipped: it cannot be converted",
      fields: { time_us: timeUs, error: errorFields(e) },
      reason: `Event ${timeUs} skipped: ${messageOf(e)}`,
      timeUs,
    };
  }
}

/** The rest of decoding a parsed Jetstream message: the cursor, the commit, the log line. */
export function acceptJetstreamEvent(
  parsed: JetstreamParsed,
  cursor: number | null,
  control: StreamControl,
): DecodedMessage | null {
  if (parsed.t === "skip") {
    control.log.warn(parsed.msg, parsed.fields);
    control.fail(parsed.reason);
    if (parsed.timeUs === undefined) return null;
    return { ops: [], cursor: cursor === null ? parsed.timeUs : Math.max(cursor, parsed.timeUs) };
  }
  const next = cursor === null ? parsed.timeUs : Math.max(cursor, parsed.timeUs);
  return parsed.commit === undefined
    ? { ops: parsed.ops, cursor: next }
    : { ops: parsed.ops, cursor: next, commit: { ...parsed.commit, mode: "newer-or-equal" } };
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
