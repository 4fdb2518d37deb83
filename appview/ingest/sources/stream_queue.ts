/**
 * A stream consumer's queue of received messages, with what flow control needs: the size of each
 * message not applied yet (queued here or still in the parse worker), the bounds above which the
 * consumer pauses the stream, and the paused flag (`stream_consumer.ts`, module comment). Messages
 * leave the queue folded into the input of one `applyOps` call ({@link foldMessages}).
 *
 * @module
 */

import type { IndexOp } from "../../../shared/ops.ts";
import type { CommitSpan } from "../apply_ops.ts";
import type { DecodedMessage } from "./stream_protocol.ts";

/**
 * Most messages folded into one `applyOps` call (with {@link MAX_BATCH_OPS}, one transaction of
 * the writer's default batch size: larger transactions write fewer WAL pages per op).
 */
export const MAX_BATCH_MESSAGES = 20_000;
/** Ops after which a batch is applied even if more messages are queued. */
export const MAX_BATCH_OPS = 20_000;
/**
 * Default of `StreamConsumerOptions.maxQueuedMessages` (it applies only to a consumer that
 * yields, i.e. one beside the HTTP API): a fraction of a second of catch-up; receiving a burst of
 * that many held the event loop about 0.1 s (about 20 us each, measured under load).
 */
export const MAX_QUEUED_MESSAGES = 5_000;
/**
 * Default of `StreamConsumerOptions.maxQueuedBytes`: what the waiting messages may hold
 * (characters of text frames, bytes of binary ones), so that a stream of large messages cannot
 * fill memory within the count bound. 16 MiB is about 40,000 Jetstream events of the public
 * ingest benchmark's mix (about 400 characters each).
 */
export const MAX_QUEUED_BYTES = 16 * 1024 * 1024;

/** One `applyOps` call's worth of decoded messages ({@link foldMessages}). */
export interface FoldedMessages {
  ops: IndexOp[];
  /** The commit of each decoded message that has one, as spans of `ops`. */
  commits: CommitSpan[];
  /** Cursor of the last message decoded (the given one when none moved it). */
  cursor: number | null;
  /** Index of the first message not folded. */
  next: number;
  /** Whether any message was decoded (not dropped). */
  moved: boolean;
}

/**
 * Folds queued messages from `start` into the input of one `applyOps` call, as a consumer drains
 * its queue: at most {@link MAX_BATCH_MESSAGES} messages (or `maxOps`, when larger), stopping
 * once `maxOps` ops (default
 * {@link MAX_BATCH_OPS}) are reached; each message decoded with the cursor of the messages before
 * it; dropped ones (`decode` returns null) skipped.
 */
export function foldMessages<T>(
  messages: readonly T[],
  start: number,
  cursor: number | null,
  decode: (message: T, cursor: number | null) => DecodedMessage | null,
  maxOps: number = MAX_BATCH_OPS,
): FoldedMessages {
  const ops: IndexOp[] = [];
  const commits: CommitSpan[] = [];
  let moved = false;
  let i = start;
  const end = Math.min(messages.length, start + Math.max(MAX_BATCH_MESSAGES, maxOps));
  for (; i < end && ops.length < maxOps; i++) {
    const decoded = decode(messages[i], cursor);
    if (decoded === null) continue;
    const first = ops.length;
    for (const op of decoded.ops) ops.push(op);
    if (decoded.commit !== undefined) {
      commits.push({ start: first, end: ops.length, commit: decoded.commit });
    }
    cursor = decoded.cursor;
    moved = true;
  }
  return { ops, commits, cursor, next: i, moved };
}

/** A received message: raw, or already parsed by the protocol's worker. */
export type QueuedMessage = { raw: string | ArrayBuffer } | { parsed: unknown };

/** Bounds of the messages waiting to be applied (flow control). */
export interface QueueLimits {
  /** Messages (queued or in the parse worker). */
  maxMessages: number;
  /** Their total size (characters of text, bytes of binary). */
  maxBytes: number;
}

/** Received messages waiting to be applied, and their sizes. */
export class MessageQueue {
  readonly #limits: QueueLimits;
  /** Received messages; those before {@link #head} are applied. */
  #queue: QueuedMessage[] = [];
  #head = 0;
  /**
   * Size of each received message not applied yet (queued or in the parse worker), in the order
   * received, which is the order they are applied in; those before {@link #sizesHead} are gone.
   */
  #sizes: number[] = [];
  #sizesHead = 0;
  /** Sum of the sizes from {@link #sizesHead}. */
  #waitingBytes = 0;
  /** The connection was closed for flow control: reconnect once the queue is applied. */
  paused = false;

  constructor(limits: QueueLimits) {
    this.#limits = limits;
  }

  /** Messages queued here and not folded yet. */
  get size(): number {
    return this.#queue.length - this.#head;
  }

  /** Total size of the received messages not applied yet. */
  get waitingBytes(): number {
    return this.#waitingBytes;
  }

  /** Counts a received message (queued here or sent to the parse worker) until it is folded. */
  received(size: number): void {
    this.#sizes.push(size);
    this.#waitingBytes += size;
  }

  push(message: QueuedMessage): void {
    this.#queue.push(message);
  }

  /** Whether `waiting` messages, or the bytes waiting, exceed the bounds. */
  overLimit(waiting: number): boolean {
    return waiting > this.#limits.maxMessages || this.#waitingBytes > this.#limits.maxBytes;
  }

  /** Forgets every message (the connection is dropped: the stream replays from the cursor). */
  clear(): void {
    this.#queue = [];
    this.#head = 0;
    this.#sizes = [];
    this.#sizesHead = 0;
    this.#waitingBytes = 0;
  }

  /**
   * Folds queued messages into one batch ({@link foldMessages}) and takes them off the queue;
   * null when nothing is queued.
   */
  take(
    cursor: number | null,
    decode: (message: QueuedMessage, cursor: number | null) => DecodedMessage | null,
    maxOps: number,
  ): FoldedMessages | null {
    const queue = this.#queue;
    if (this.#head >= queue.length) return null;
    const folded = foldMessages(queue, this.#head, cursor, decode, maxOps);
    // A decode may drop the connection, which empties the queue: keep the fresh one.
    if (this.#queue === queue) {
      this.#forgetSizes(folded.next - this.#head);
      this.#head = folded.next;
      if (folded.next >= queue.length) {
        this.#queue = [];
        this.#head = 0;
      }
    }
    return folded;
  }

  /** The `count` oldest waiting messages were folded into a batch: they no longer count. */
  #forgetSizes(count: number): void {
    const end = Math.min(this.#sizes.length, this.#sizesHead + count);
    for (let i = this.#sizesHead; i < end; i++) this.#waitingBytes -= this.#sizes[i];
    this.#sizesHead = end;
    if (end === this.#sizes.length) {
      this.#sizes = [];
      this.#sizesHead = 0;
    } else if (end > 4_096 && end * 2 > this.#sizes.length) {
      this.#sizes = this.#sizes.slice(end);
      this.#sizesHead = 0;
    }
  }
}
