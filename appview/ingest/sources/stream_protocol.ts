/**
 * What a stream protocol (frame decoding, cursor rules, URL) gives the `StreamConsumer` of
 * `stream_consumer.ts`, and what the consumer lets it do: see `local_stream.ts` and
 * `jetstream.ts`. Its own module so the parse worker (`parse_worker.ts`) and the consumer both
 * import it without importing each other.
 *
 * @module
 */

import type { Logger } from "../../../shared/log.ts";
import type { IndexOp } from "../../../shared/ops.ts";
import type { CommitRef } from "../apply_ops.ts";

/** One decoded message: its ops, the stream cursor it moves to and the commit they make up. */
export interface DecodedMessage {
  ops: IndexOp[];
  cursor: number;
  /**
   * The repository commit the ops belong to: the write path applies them only when its rev fits
   * the repository's latest applied rev (`RevGate`). Absent for ungated ops (identity events).
   */
  commit?: CommitRef;
}

/** What a protocol may do to its connection while decoding. */
export interface StreamControl {
  readonly log: Logger;
  /** Records `reason` as the consumer's last error (shown by `/healthz`). */
  fail(reason: string): void;
  /** Records `reason` and drops the connection; the consumer reconnects with backoff. */
  disconnect(reason: string): void;
  /**
   * Stores `cursor` as the stream's cursor, also below the current one (the server's head is
   * behind it: a restored account host), then records `reason` and drops the connection; the
   * consumer reconnects from `cursor`. The batch being folded is applied after the cursor is
   * stored. (`StreamConsumer` gives it; a control without it cannot rewind.)
   *
   * Rejects when the cursor cannot be stored (nothing changed; the connection is dropped anyway).
   */
  rewind?(cursor: number, reason: string): Promise<void>;
  /**
   * `work` (a write the message asked for, such as queueing a backfill) must be done before the
   * cursor moves past the message: the consumer applies the batch holding the message only once
   * `work` has settled, and a rejected `work` fails the batch as a failed write does (nothing
   * applied, replayed from the stored cursor). Without it (a control that applies nothing), the
   * work just runs.
   */
  waitFor?(work: Promise<unknown>): void;
}

/**
 * The cursor-independent, CPU-heavy part of a protocol's decode, run in a worker thread
 * (`parse_worker.ts`): `decode(data, cursor, control)` must equal
 * `accept(<worker's parse of data>, cursor, control)`.
 */
export interface StreamParser {
  /** Worker module: answers each `ParseRequest` with a `ParseResult`, in order. */
  readonly workerUrl: URL;
  /** Sent with every batch to the worker (structured-cloneable). */
  readonly options: unknown;
  /** The rest of decoding, on the main thread, for one parsed message. */
  accept(parsed: unknown, cursor: number | null, control: StreamControl): DecodedMessage | null;
}

/**
 * Why a consumer connects, for {@link StreamProtocol.connectUrl}:
 * - `"start"`: the consumer starts, from its stored cursor;
 * - `"resume"`: after a flow-control pause: the consumer closed the connection itself and applied
 *   everything it had received, so its cursor is exactly where the stream must go on;
 * - `"reconnect"`: after a connection lost in an unknown state (an error, a close by the server,
 *   the idle timeout, a failed write).
 */
export type ConnectReason = "start" | "resume" | "reconnect";

/** The wire side of a stream consumer. */
export interface StreamProtocol {
  /** `consumer_status` name (`db/state.ts`). */
  readonly consumer: string;
  /** `cursors` name (`db/state.ts`). */
  readonly cursorName: string;
  /** URL to connect to, given the stored cursor (null when none) and why it connects. */
  connectUrl(cursor: number | null, reason: ConnectReason): string;
  /** Extra headers of the upgrade request (credentials), when the protocol has any. */
  connectHeaders?(): Record<string, string> | undefined;
  /**
   * Decodes one message. `cursor` is the highest cursor accepted so far (including messages of
   * the batch being built). Returns null to drop the message (having logged why), or its ops and
   * new cursor; a message that cannot be applied but must be passed over gives no ops.
   */
  decode(
    data: string | ArrayBuffer,
    cursor: number | null,
    control: StreamControl,
  ): DecodedMessage | null;
  /** When present, messages are parsed in a worker thread (see {@link StreamParser}). */
  readonly parser?: StreamParser;
}

/** The message of an error value. */
export function messageOf(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
