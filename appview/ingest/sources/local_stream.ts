/**
 * Local-stream consumer (spec 6.2): a WebSocket client of the account host's
 * `com.atproto.sync.subscribeRepos` (`config.pdsStreamUrl`).
 *
 * - Frames are decoded strictly and bounded in size (`decodeFrame`); a `#commit` becomes the
 *   single-operation form through `opsFromCommitEvent` (blocks read from the CAR, CID links in
 *   binary or string form) and is applied through the one write path; an `#identity` becomes an
 *   authoritative handle op, an `#account` an account status op (spec 6.2 rules 6-7).
 * - Each commit carries its `rev` to the write path, which applies it only when that rev is newer
 *   than the latest rev applied for the repository (`RevGate` `"newer"`): a commit a push already
 *   applied is passed over, and the stream stays the authority on each repository's order.
 * - The `seq` cursor lives in its own row (`CURSOR_LOCAL_SEQ`, spec 6.2 rule 2) and is stored in
 *   the same transaction as the ops it covers; on reconnect the stream resumes after it (a fresh
 *   index starts at cursor 0, replaying every retained event), and
 *   frames with `seq` at or below it (replay/live overlap, spec 6.1 rule 3) are dropped.
 * - `#info` `OutdatedCursor` is logged and the stream goes on (the account host replays from
 *   storage, spec 6.1 rule 5). Error frames (`ConsumerTooSlow`, ...) are logged and the connection
 *   is dropped and retried with backoff.
 * - `FutureCursor` (the stored cursor is beyond the account host's head: the host was restored
 *   from an older backup, docs/behaviour.md 6.2 rule 10) is said once in the log, the cursor is
 *   moved back to the host's head (named by its message; 0, a full replay of what it retains,
 *   when it names none), the stream resumes from there, and once that cursor is stored the hooks'
 *   `restored` reconciles the accounts by backfill (`ingest/backfill/`).
 * - A `#sync` frame (`{seq, did, rev, blocks, time}`: "my repository is now at this commit") asks
 *   the hooks' `sync` for a backfill of the repository; the backfill does nothing when the index
 *   already holds that rev (rule 8). Only `did` and `rev` are read, and checked.
 * - Hostile or broken frames (not CBOR, truncated, a CAR block that does not match its CID,
 *   huge declared lengths) are skipped with a log line; a commit that cannot be converted is
 *   passed over (its `seq` still advances the cursor) so one bad event never blocks the stream.
 *
 * @module
 */

import { decodeFrame, FRAME_OP_ERROR } from "../../../shared/frame.ts";
import {
  type IndexOp,
  OpsError,
  opsFromCommitEvent,
  opsFromJetstream,
} from "../../../shared/ops.ts";
import { validateRecord } from "../../../shared/records.ts";
import { isValidDid } from "../../../shared/syntax.ts";
import { isValidTid } from "../../../shared/tid.ts";
import type { AppviewContext } from "../../context.ts";
import { CONSUMER_LOCAL, CURSOR_LOCAL_SEQ } from "../../db/state.ts";
import { StreamConsumer, type StreamConsumerOptions } from "./stream_consumer.ts";
import type {
  DecodedMessage,
  StreamControl,
  StreamParser,
  StreamProtocol,
} from "./stream_protocol.ts";

/** Largest frame accepted: 5 MiB (atproto frame limit). */
export const MAX_LOCAL_FRAME_BYTES = 5 * 1024 * 1024;
/** `#info` name of a cursor older than the account host's retention (spec 6.1 rule 5). */
export const INFO_OUTDATED_CURSOR = "OutdatedCursor";
/** Error name of a cursor beyond the account host's head (spec 6.1 rule 4). */
export const ERROR_FUTURE_CURSOR = "FutureCursor";

/** What the local stream asks of the backfill worker (`ingest/backfill/backfiller.ts`). */
export interface LocalStreamHooks {
  /** The host's head (null: unknown) is behind `cursor`: it was restored from a backup. */
  restored(restore: { cursor: number; head: number | null }): void;
  /**
   * A `#sync` frame: the repository `did` is now at `rev`. The frame's cursor moves only once the
   * returned work is done (`StreamControl.waitFor`).
   */
  sync(did: string, rev: string): Promise<void>;
}

/** Options of {@link createLocalStreamConsumer}. */
export interface LocalStreamOptions extends StreamConsumerOptions {
  /** `subscribeRepos` WebSocket URL. Default `ctx.config.pdsStreamUrl`. */
  url?: string;
  /** Default {@link MAX_LOCAL_FRAME_BYTES}. */
  maxFrameBytes?: number;
  /** The backfill worker, when one runs (restores and `#sync` frames). */
  hooks?: LocalStreamHooks;
}

/** The `subscribeRepos` side of the local-stream consumer. */
export class LocalStreamProtocol implements StreamProtocol {
  readonly consumer = CONSUMER_LOCAL;
  readonly cursorName = CURSOR_LOCAL_SEQ;
  readonly #url: string;
  readonly #maxFrameBytes: number;
  readonly #ingestSecret: string | null;
  readonly #hooks: LocalStreamHooks | undefined;

  /**
   * The cursor-independent, CPU-heavy half of {@link decode} ({@link parseLocalFrame}), run by
   * the consumer in a worker thread so decoding overlaps with the index writes.
   */
  readonly parser: StreamParser;

  /**
   * `ingestSecret` (`APPVIEW_INGEST_SECRET`, shared with the account host) is presented as
   * `Authorization: Bearer <secret>`: the account host keeps connection slots for it, so that
   * other clients filling its stream cap cannot lock the index out.
   */
  constructor(
    url: string,
    opts: { maxFrameBytes?: number; ingestSecret?: string | null; hooks?: LocalStreamHooks } = {},
  ) {
    const maxFrameBytes = opts.maxFrameBytes ?? MAX_LOCAL_FRAME_BYTES;
    this.#url = url;
    this.#maxFrameBytes = maxFrameBytes;
    this.#ingestSecret = opts.ingestSecret ?? null;
    this.#hooks = opts.hooks;
    const options: LocalParseOptions = { maxFrameBytes };
    const hooks = opts.hooks;
    this.parser = {
      workerUrl: new URL("./local_parse_worker.ts", import.meta.url),
      options,
      accept: (parsed, cursor, control) =>
        acceptLocalFrame(parsed as LocalFrame, cursor, control, hooks),
    };
  }

  connectUrl(cursor: number | null): string {
    // No stored cursor means a fresh index: replay everything the account host retains
    // (cursor 0) rather than only live events, so nothing committed before the first
    // connection is missed (the push path is best effort).
    const url = new URL(this.#url);
    url.searchParams.set("cursor", String(cursor ?? 0));
    return url.href;
  }

  connectHeaders(): Record<string, string> | undefined {
    return this.#ingestSecret === null
      ? undefined
      : { authorization: `Bearer ${this.#ingestSecret}` };
  }

  decode(
    data: string | ArrayBuffer,
    cursor: number | null,
    control: StreamControl,
  ): DecodedMessage | null {
    return acceptLocalFrame(
      parseLocalFrame(data, this.#maxFrameBytes),
      cursor,
      control,
      this.#hooks,
    );
  }
}

/** Options of {@link parseLocalFrame} (sent to the parse worker). */
export interface LocalParseOptions {
  maxFrameBytes: number;
}

/**
 * A `subscribeRepos` message parsed without the consumer's state: what {@link acceptLocalFrame}
 * needs to decide, log and apply. Plain data, so it crosses from the parse worker as is.
 */
export type LocalFrame =
  | { t: "text"; length: number }
  | { t: "undecodable"; error: ErrorInfo; bytes: number }
  | { t: "error"; error: unknown; message: unknown }
  | { t: "info"; name: unknown; message: unknown }
  | { t: "bad-seq"; type: unknown; seq: string }
  | {
    t: "event";
    seq: number;
    ops: IndexOp[];
    commit?: { did: string; rev: string; since?: string | null };
    sync?: { did: string; rev: string };
  }
  | { t: "unconvertible"; seq: number; type: unknown; error: ErrorInfo };

/** An error as plain data (what the logger prints of an `Error`). */
export interface ErrorInfo {
  name: string;
  message: string;
}

function errorInfo(e: unknown): ErrorInfo {
  return e instanceof Error
    ? { name: e.name, message: e.message }
    : { name: "Error", message: String(e) };
}

/**
 * The CPU-heavy part of decoding a message, independent of the cursor: the frame (strict
 * DAG-CBOR, bounded), the CAR (each record block checked against its CID) and the ops. Never
 * throws: bad input becomes a {@link LocalFrame} that says why.
 */
export function parseLocalFrame(data: string | ArrayBuffer, maxFrameBytes: number): LocalFrame {
  if (typeof data === "string") return { t: "text", length: data.length };
  let frame;
  try {
    frame = decodeFrame(new Uint8Array(data), { maxSize: maxFrameBytes });
  } catch (e) {
    return { t: "undecodable", error: errorInfo(e), bytes: data.byteLength };
  }
  const { header, body } = frame;
  if (header.op === FRAME_OP_ERROR) return { t: "error", error: body.error, message: body.message };
  if (header.t === "#info") return { t: "info", name: body.name, message: body.message };
  const seq = body.seq;
  if (typeof seq !== "number" || !Number.isSafeInteger(seq) || seq < 1) {
    return { t: "bad-seq", type: header.t, seq: String(seq) };
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
        // Absent (not known: no gap check) or null (the repository's first commit) or a TID.
        const since = body.since;
        if (
          since !== undefined && since !== null && (typeof since !== "string" || !isValidTid(since))
        ) {
          throw new OpsError(`Invalid since: ${String(since).slice(0, 100)}`);
        }
        return { t: "event", seq, ops: checkRecords(ops), commit: { did, rev, since } };
      }
      case "#identity":
        return { t: "event", seq, ops: identityOps(body) };
      case "#account":
        // The account host's status of its own account (spec 6.2 rule 7): the same body as a
        // Jetstream account event's `account`.
        return {
          t: "event",
          seq,
          ops: opsFromJetstream({ did: body.did, kind: "account", account: body }),
        };
      case "#sync": {
        const { did, rev } = body;
        if (typeof did !== "string" || !isValidDid(did)) {
          throw new OpsError(`Invalid did: ${String(did).slice(0, 100)}`);
        }
        if (typeof rev !== "string" || !isValidTid(rev)) {
          throw new OpsError(`Invalid rev: ${String(rev).slice(0, 100)}`);
        }
        return { t: "event", seq, ops: [], sync: { did, rev } };
      }
      default:
        return { t: "event", seq, ops: [] };
    }
  } catch (e) {
    return { t: "unconvertible", seq, type: header.t, error: errorInfo(e) };
  }
}

/**
 * The handle op of an `#identity` frame. The account host speaks for its own accounts, so the op
 * is authoritative (`HandleOp.authoritative`): a handle it moved to another account moves in the
 * index too, as by the push.
 */
function identityOps(body: Record<string, unknown>): IndexOp[] {
  const ops = opsFromJetstream({
    did: body.did,
    kind: "identity",
    identity: { did: body.did, handle: body.handle },
  });
  return ops.map((op) => op.kind === "handle" ? { ...op, authoritative: true } : op);
}

/**
 * Validates the records of `ops` here, in the parse worker, and marks those accepted
 * (`RecordOp.checked`), so the index's main thread, where every op is written, does not spend its
 * time on it. A record that fails is left unmarked: the write path checks it again, then skips it
 * and counts why.
 */
function checkRecords(ops: IndexOp[]): IndexOp[] {
  return ops.map((op) =>
    op.kind === "record" && op.record !== null && validateRecord(op.collection, op.record).ok
      ? { ...op, checked: true }
      : op
  );
}

/**
 * The part of decoding that needs the consumer: drops frames at or below `cursor`, logs and
 * reports bad input, drops the connection on an error frame, rewinds to the host's head on
 * `FutureCursor`, and hands `#sync` frames to the hooks.
 */
export function acceptLocalFrame(
  frame: LocalFrame,
  cursor: number | null,
  control: StreamControl,
  hooks?: LocalStreamHooks,
): DecodedMessage | null {
  const { log } = control;
  switch (frame.t) {
    case "text":
      log.warn("Text frame skipped: subscribeRepos frames are binary", { length: frame.length });
      control.fail("Text frame skipped");
      return null;
    case "undecodable":
      log.warn("Frame skipped: it cannot be decoded", { error: frame.error, bytes: frame.bytes });
      control.fail(`Frame skipped: ${frame.error.message}`);
      return null;
    case "error": {
      if (frame.error === ERROR_FUTURE_CURSOR && cursor !== null && control.rewind !== undefined) {
        futureCursor(frame.message, cursor, control, hooks);
        return null;
      }
      const reason = `Stream error ${frame.error}: ${frame.message ?? ""}`.trimEnd();
      log.error("Stream sent an error frame", { error: frame.error, message: frame.message });
      control.disconnect(reason);
      return null;
    }
    case "info":
      if (frame.name === INFO_OUTDATED_CURSOR) {
        log.warn("Cursor is older than the stream's retention; continuing from stored replay", {
          cursor,
          message: frame.message,
        });
      } else {
        log.info("Stream info", { name: frame.name, message: frame.message });
      }
      return null;
    case "bad-seq":
      log.warn("Frame skipped: invalid seq", { type: frame.type, seq: frame.seq });
      control.fail(`Frame skipped: invalid seq ${frame.seq}`);
      return null;
  }
  const seq = frame.seq;
  if (cursor !== null && seq <= cursor) {
    log.debug("Duplicate frame dropped", { seq, cursor });
    return null;
  }
  if (frame.t === "unconvertible") {
    log.warn("Event skipped: it cannot be converted", {
      seq,
      type: frame.type,
      error: frame.error,
    });
    control.fail(`Event ${seq} skipped: ${frame.error.message}`);
    return { ops: [], cursor: seq };
  }
  if (frame.sync !== undefined && hooks !== undefined) {
    const work = hooks.sync(frame.sync.did, frame.sync.rev);
    if (control.waitFor !== undefined) control.waitFor(work);
    else {
      work.catch((e) => log.error("Cannot hand a #sync frame to the backfill", { error: e }));
    }
  }
  if (frame.commit === undefined) return { ops: frame.ops, cursor: seq };
  return { ops: frame.ops, cursor: seq, commit: { ...frame.commit, mode: "newer" } };
}

/**
 * The account host's head is behind `cursor` (module notes): said once, the cursor moved back to
 * the head, the hooks told. The host's message names its head ("... beyond the latest seq N");
 * when it does not (another implementation), the stream replays what the host retains.
 */
function futureCursor(
  message: unknown,
  cursor: number,
  control: StreamControl,
  hooks: LocalStreamHooks | undefined,
): void {
  const named = typeof message === "string" ? /latest seq (\d{1,15})\b/.exec(message) : null;
  const head = named === null ? null : Number(named[1]);
  const resume = head !== null && head < cursor ? head : 0;
  control.log.warn(
    "Account host is behind the index's cursor (restored from a backup?): resuming from its head and reconciling its repositories",
    { cursor, head, resumeFrom: resume, message },
  );
  control.rewind!(resume, `Account host restored: cursor ${cursor} beyond its head ${head ?? "?"}`)
    .then(() => hooks?.restored({ cursor, head }), (e) => {
      control.log.error("Cannot move the cursor back to the account host's head", { error: e });
      control.disconnect(`Cannot store cursor ${resume}`);
    });
}

/** Builds the local-stream consumer of the index (call `start()`, later `close()`). */
export function createLocalStreamConsumer(
  ctx: AppviewContext,
  opts: LocalStreamOptions = {},
): StreamConsumer {
  const protocol = new LocalStreamProtocol(opts.url ?? ctx.config.pdsStreamUrl, {
    maxFrameBytes: opts.maxFrameBytes,
    ingestSecret: ctx.config.ingestSecret,
    hooks: opts.hooks,
  });
  return new StreamConsumer(ctx, protocol, opts);
}
