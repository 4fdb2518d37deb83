/**
 * Local-stream consumer (spec 6.2): a WebSocket client of the account host's
 * `com.atproto.sync.subscribeRepos` (`config.pdsStreamUrl`).
 *
 * - Frames are decoded strictly and bounded in size (`decodeFrame`); a `#commit` becomes the
 *   single-operation form through `opsFromCommitEvent` (blocks read from the CAR, CID links in
 *   binary or string form) and is applied through the one write path.
 * - Each commit carries its `rev` to the write path, which applies it only when that rev is newer
 *   than the latest rev applied for the repository (`RevGate` `"newer"`): a commit a push already
 *   applied is passed over, and the stream stays the authority on each repository's order.
 * - The `seq` cursor lives in its own row (`CURSOR_LOCAL_SEQ`, spec 6.2 rule 2) and is stored in
 *   the same transaction as the ops it covers; on reconnect the stream resumes after it (a fresh
 *   index starts at cursor 0, replaying every retained event), and
 *   frames with `seq` at or below it (replay/live overlap, spec 6.1 rule 3) are dropped.
 * - `#info` `OutdatedCursor` is logged and the stream goes on (the account host replays from
 *   storage, spec 6.1 rule 5). Error frames (`FutureCursor`, `ConsumerTooSlow`) are logged and
 *   the connection is dropped and retried with backoff.
 * - Hostile or broken frames (not CBOR, truncated, a CAR block that does not match its CID,
 *   huge declared lengths) are skipped with a log line; a commit that cannot be converted is
 *   passed over (its `seq` still advances the cursor) so one bad event never blocks the stream.
 *
 * @module
 */

import { decodeFrame, FRAME_OP_ERROR } from "../../shared/frame.ts";
import { OpsError, opsFromCommitEvent, opsFromJetstream } from "../../shared/ops.ts";
import { isValidTid } from "../../shared/tid.ts";
import type { AppviewContext } from "../context.ts";
import { CONSUMER_LOCAL, CURSOR_LOCAL_SEQ } from "../db/state.ts";
import {
  type DecodedMessage,
  messageOf,
  StreamConsumer,
  type StreamConsumerOptions,
  type StreamControl,
  type StreamProtocol,
} from "./stream_consumer.ts";

/** Largest frame accepted: 5 MiB (atproto frame limit). */
export const MAX_LOCAL_FRAME_BYTES = 5 * 1024 * 1024;
/** `#info` name of a cursor older than the account host's retention (spec 6.1 rule 5). */
export const INFO_OUTDATED_CURSOR = "OutdatedCursor";

/** Options of {@link createLocalStreamConsumer}. */
export interface LocalStreamOptions extends StreamConsumerOptions {
  /** `subscribeRepos` WebSocket URL. Default `ctx.config.pdsStreamUrl`. */
  url?: string;
  /** Default {@link MAX_LOCAL_FRAME_BYTES}. */
  maxFrameBytes?: number;
}

/** The `subscribeRepos` side of the local-stream consumer. */
export class LocalStreamProtocol implements StreamProtocol {
  readonly consumer = CONSUMER_LOCAL;
  readonly cursorName = CURSOR_LOCAL_SEQ;
  readonly #url: string;
  readonly #maxFrameBytes: number;

  constructor(url: string, maxFrameBytes = MAX_LOCAL_FRAME_BYTES) {
    this.#url = url;
    this.#maxFrameBytes = maxFrameBytes;
  }

  connectUrl(cursor: number | null): string {
    // No stored cursor means a fresh index: replay everything the account host retains
    // (cursor 0) rather than only live events, so nothing committed before the first
    // connection is missed (the push path is best effort).
    const url = new URL(this.#url);
    url.searchParams.set("cursor", String(cursor ?? 0));
    return url.href;
  }

  decode(
    data: string | ArrayBuffer,
    cursor: number | null,
    control: StreamControl,
  ): DecodedMessage | null {
    const { log } = control;
    if (typeof data === "string") {
      log.warn("Text frame skipped: subscribeRepos frames are binary", { length: data.length });
      control.fail("Text frame skipped");
      return null;
    }
    let frame;
    try {
      frame = decodeFrame(new Uint8Array(data), { maxSize: this.#maxFrameBytes });
    } catch (e) {
      log.warn("Frame skipped: it cannot be decoded", { error: e, bytes: data.byteLength });
      control.fail(`Frame skipped: ${messageOf(e)}`);
      return null;
    }
    const { header, body } = frame;
    if (header.op === FRAME_OP_ERROR) {
      const reason = `Stream error ${body.error}: ${body.message ?? ""}`.trimEnd();
      log.error("Stream sent an error frame", { error: body.error, message: body.message });
      control.disconnect(reason);
      return null;
    }
    if (header.t === "#info") {
      if (body.name === INFO_OUTDATED_CURSOR) {
        log.warn("Cursor is older than the stream's retention; continuing from stored replay", {
          cursor,
          message: body.message,
        });
      } else {
        log.info("Stream info", { name: body.name, message: body.message });
      }
      return null;
    }
    const seq = body.seq;
    if (typeof seq !== "number" || !Number.isSafeInteger(seq) || seq < 1) {
      log.warn("Frame skipped: invalid seq", { type: header.t, seq: String(seq) });
      control.fail(`Frame skipped: invalid seq ${String(seq)}`);
      return null;
    }
    if (cursor !== null && seq <= cursor) {
      log.debug("Duplicate frame dropped", { seq, cursor });
      return null;
    }
    try {
      switch (header.t) {
        case "#commit": {
          const ops = opsFromCommitEvent(body);
          const rev = body.rev;
          if (typeof rev !== "string" || !isValidTid(rev)) {
            throw new OpsError(`Invalid rev: ${String(rev)}`);
          }
          const did = body.repo as string; // checked by opsFromCommitEvent
          return { ops, cursor: seq, commit: { did, rev, mode: "newer" } };
        }
        case "#identity":
          return {
            ops: opsFromJetstream({
              did: body.did,
              kind: "identity",
              identity: { did: body.did, handle: body.handle },
            }),
            cursor: seq,
          };
        default:
          return { ops: [], cursor: seq };
      }
    } catch (e) {
      log.warn("Event skipped: it cannot be converted", { seq, type: header.t, error: e });
      control.fail(`Event ${seq} skipped: ${messageOf(e)}`);
      return { ops: [], cursor: seq };
    }
  }
}

/** Builds the local-stream consumer of the index (call `start()`, later `close()`). */
export function createLocalStreamConsumer(
  ctx: AppviewContext,
  opts: LocalStreamOptions = {},
): StreamConsumer {
  const protocol = new LocalStreamProtocol(opts.url ?? ctx.config.pdsStreamUrl, opts.maxFrameBytes);
  return new StreamConsumer(ctx, protocol, opts);
}
