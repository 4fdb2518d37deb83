/**
 * Sequence numbers and durable commit events (spec 6.1 rules 1-2).
 *
 * Each commit's event is written in the same Deno KV atomic operation as the commit, at the seq
 * after the stored head, with a versionstamp check on the head key: there is no commit without
 * an event and no seq without a commit, and the seq is gapless. A process-wide queue (entered by
 * the writer while it holds its per-repository lock) is the global seq lock: one group of
 * commits at a time reads the head and commits, so commit order equals seq order; the check
 * keeps two processes sharing one KV just as safe.
 *
 * An event is stored as the DAG-CBOR bytes of the `#commit` frame body, split into chunks under
 * the KV value limit, so the stream can send `header bytes + body bytes` without re-encoding.
 *
 * @module
 */

import { decodeCbor } from "../../shared/cbor.ts";
import type { CID } from "../../shared/cid.ts";
import { CborWriter } from "../repo/cbor_writer.ts";
import { seqEventChunkKey, seqHeadKey } from "../store/keys.ts";
import { isStoredFrame, readEventBodies } from "./event_log.ts";

/** One record operation of a commit event (docs/protocol.md 6.2 `repoOp`). */
export interface CommitEventOp {
  action: "create" | "update" | "delete";
  /** `<collection>/<rkey>`. */
  path: string;
  /** New record CID; null for deletes. */
  cid: CID | null;
  /** Previous record CID for updates and deletes. */
  prev?: CID;
}

/** The `#commit` frame body of a stored event. */
export interface CommitEvent {
  seq: number;
  rebase: false;
  tooBig: false;
  /** Account DID. */
  repo: string;
  /** CID of the commit block (inside `blocks`). */
  commit: CID;
  rev: string;
  /** Rev of the previous commit; null for the first commit. */
  since: string | null;
  /**
   * CAR bytes: root = commit; the commit, the new MST nodes, the unchanged nodes of each op's
   * covering proof (docs/protocol.md 8.4) and the new records.
   */
  blocks: Uint8Array;
  ops: CommitEventOp[];
  blobs: CID[];
  /** MST root of the previous commit; absent for the first commit. */
  prevData?: CID;
  /** When the event was sequenced (ISO 8601). */
  time: string;
}

/** A stored event: its seq, the decoded body and the exact body bytes. */
export interface SequencedCommit {
  seq: number;
  event: CommitEvent;
  /** DAG-CBOR encoding of `event` (the frame body as sent on the wire). */
  body: Uint8Array;
  /**
   * The commit's new records, decoded (IPLD form), by CID string: present on events committed
   * by this process, so in-process listeners (the push) need not parse `event.blocks` again.
   */
  records?: ReadonlyMap<string, unknown>;
}

/** A listener of committed events; called in seq order, synchronously after the KV commit. */
export type CommitListener = (commit: SequencedCommit) => void;

/** Largest chunk of an event body in one KV value (the value limit is 64 KiB). */
const EVENT_CHUNK_BYTES = 60_000;
/**
 * How long a group keeps trying while another process moves the seq head between our read and
 * our commit (then its writes fail). A fixed 20 attempts without a pause ran out in about 50 ms
 * against a busy second process: its group commits landed back to back, and every retry read
 * the head just before the next one (a 500 for createRecord, spec 6.1, seen in the two-process
 * crash test).
 */
const SEQ_RETRY_MS = 5_000;
/** Largest random pause between two attempts (ms); it grows with the attempts up to this. */
const SEQ_BACKOFF_MAX_MS = 20;
/** Budget of one grouped atomic operation (Deno KV: 1,000 mutations, ~800 KB). */
const GROUP_MAX_MUTATIONS = 900;
const GROUP_MAX_BYTES = 600_000;
/** Deno KV refuses an atomic operation of more than 100 checks; the seq head takes one. */
const GROUP_MAX_CHECKS = 99;
/** Key bytes of one grouped operation (Deno KV refuses more than 81,920). */
const GROUP_MAX_KEY_BYTES = 75_000;
/** Key bytes of one event chunk key and of the seq head key (check and set), about. */
const EVENT_KEY_BYTES = 24;

/** What a writer hands to {@link Sequencer.commit}. */
export interface CommitRequest {
  /** Adds the commit's own checks and mutations to the atomic operation. */
  fill: (op: Deno.AtomicOperation) => void;
  /** The event body without `seq`. */
  event: Omit<CommitEvent, "seq">;
  /** The new records by CID string, handed to listeners ({@link SequencedCommit.records}). */
  records?: ReadonlyMap<string, unknown>;
  /** Mutations and bytes `fill` adds (to size the group; the event's own are added here). */
  mutations: number;
  bytes: number;
  /** Checks `fill` adds (default 1): a group holds at most {@link GROUP_MAX_CHECKS}. */
  checks?: number;
  /** Bytes of the keys `fill` checks and writes (default 0), to size the group. */
  keyBytes?: number;
}

/** A committed event with the versionstamp of its atomic operation. */
export type CommitOutcome = SequencedCommit & { versionstamp: string };

interface Pending {
  request: CommitRequest;
  resolve: (outcome: CommitOutcome | null) => void;
  reject: (err: unknown) => void;
}

/**
 * Sequencer of one KV store. An account host builds one in `createPdsContext` (`ctx.sequencer`),
 * shared by the writer and the stream.
 */
export class Sequencer {
  readonly #kv: Deno.Kv;
  readonly #listeners = new Set<CommitListener>();
  #queue: Pending[] = [];
  #pumping = false;
  #head: { seq: number; versionstamp: string | null } | null = null;

  constructor(kv: Deno.Kv) {
    this.#kv = kv;
  }

  /** Subscribes to events committed by this process; returns the unsubscribe function. */
  onCommit(listener: CommitListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** The highest stored seq (0 when none), read from KV. */
  async headSeq(): Promise<number> {
    const entry = await this.#kv.get<number>(seqHeadKey());
    return entry.value ?? 0;
  }

  /**
   * Commits the request's mutations together with its event at the next seq, in one atomic
   * operation. Requests arriving while a commit is in flight are grouped into the next atomic
   * operation (group commit: Deno KV commits are serial, so one operation per commit would cap
   * throughput at the commit latency), each with its own consecutive seq, in arrival order.
   *
   * Resolves to the sequenced event, or null when a check added by `fill` failed (the caller
   * reloads its state and tries again).
   */
  commit(request: CommitRequest): Promise<CommitOutcome | null> {
    return new Promise((resolve, reject) => {
      this.#queue.push({ request, resolve, reject });
      if (!this.#pumping) void this.#pump();
    });
  }

  async #pump(): Promise<void> {
    this.#pumping = true;
    try {
      while (this.#queue.length > 0) {
        const group = this.#takeGroup();
        try {
          const outcomes = await this.#commitGroup(group.map((p) => p.request));
          if (outcomes !== null) {
            group.forEach((p, i) => p.resolve(outcomes[i]));
            continue;
          }
          // Some writer's own check failed: commit one by one to tell which.
          for (const p of group) {
            const one = await this.#commitGroup([p.request]);
            p.resolve(one === null ? null : one[0]);
          }
        } catch (err) {
          for (const p of group) p.reject(err);
        }
      }
    } finally {
      this.#pumping = false;
    }
  }

  #takeGroup(): Pending[] {
    let mutations = 0;
    let bytes = 0;
    let checks = 0;
    let keyBytes = 2 * EVENT_KEY_BYTES;
    let n = 0;
    for (const p of this.#queue) {
      // Each event also costs its chunks and the seq head.
      const eventBytes = p.request.event.blocks.length + 300 + p.request.event.ops.length * 150;
      const m = p.request.mutations + 1 + Math.ceil(eventBytes / EVENT_CHUNK_BYTES);
      const b = p.request.bytes + eventBytes;
      const c = p.request.checks ?? 1;
      const k = (p.request.keyBytes ?? 0) + (m - p.request.mutations) * EVENT_KEY_BYTES;
      if (
        n > 0 &&
        (mutations + m > GROUP_MAX_MUTATIONS || bytes + b > GROUP_MAX_BYTES ||
          checks + c > GROUP_MAX_CHECKS || keyBytes + k > GROUP_MAX_KEY_BYTES)
      ) break;
      mutations += m;
      bytes += b;
      checks += c;
      keyBytes += k;
      n++;
    }
    return this.#queue.splice(0, n);
  }

  /** One atomic operation for `requests` at consecutive seqs; null when a writer check failed. */
  async #commitGroup(requests: CommitRequest[]): Promise<CommitOutcome[] | null> {
    const deadline = Date.now() + SEQ_RETRY_MS;
    for (let attempt = 0;; attempt++) {
      const head = this.#head ?? await this.#readHead();
      const op = this.#kv.atomic();
      const events: SequencedCommit[] = requests.map((request, i) => {
        const seq = head.seq + 1 + i;
        const event = { seq, ...request.event } as CommitEvent;
        const body = encodeCommitEventBody(event);
        request.fill(op);
        for (let pos = 0, c = 0; pos < body.length || c === 0; pos += EVENT_CHUNK_BYTES, c++) {
          op.set(seqEventChunkKey(seq, c), body.subarray(pos, pos + EVENT_CHUNK_BYTES));
        }
        return request.records === undefined
          ? { seq, event, body }
          : { seq, event, body, records: request.records };
      });
      const last = head.seq + requests.length;
      op.check({ key: seqHeadKey(), versionstamp: head.versionstamp });
      op.set(seqHeadKey(), last);
      const res = await retryWhileLocked(() => op.commit());
      if (res.ok) {
        this.#head = { seq: last, versionstamp: res.versionstamp };
        const outcomes = events.map((e) => ({ ...e, versionstamp: res.versionstamp }));
        for (const committed of events) {
          for (const listener of this.#listeners) {
            try {
              listener(committed);
            } catch {
              // A listener's failure must not fail writes that already committed.
            }
          }
        }
        return outcomes;
      }
      const fresh = await this.#readHead();
      if (fresh.versionstamp === head.versionstamp) return null;
      if (Date.now() > deadline) {
        throw new Error(
          `Sequencer could not commit: the seq head kept moving (${attempt + 1} tries)`,
        );
      }
      // Another process committed in between: a random pause lets the two take turns.
      const pause = Math.random() * Math.min(SEQ_BACKOFF_MAX_MS, 1 + attempt);
      await new Promise((resolve) => setTimeout(resolve, pause));
    }
  }

  /**
   * Reads the stored commit events with seq greater than `after`, in order, among at most
   * `limit` stored events: the events stored as whole frames (`#identity`, `#account`, `#sync`)
   * are left out.
   */
  async readEvents(after: number, limit = 500): Promise<SequencedCommit[]> {
    const stored = await readEventBodies(this.#kv, after, limit);
    return stored.filter(({ body }) => !isStoredFrame(body))
      .map(({ seq, body }) => ({ seq, event: decodeEvent(body), body }));
  }

  async #readHead(): Promise<{ seq: number; versionstamp: string | null }> {
    const entry = await retryWhileLocked(() => this.#kv.get<number>(seqHeadKey()));
    this.#head = { seq: entry.value ?? 0, versionstamp: entry.versionstamp };
    return this.#head;
  }
}

/**
 * The canonical DAG-CBOR of a `#commit` body (the bytes `encodeCbor(event)` gives: keys
 * length-first, absent optional fields skipped), written in one pass.
 */
export function encodeCommitEventBody(event: CommitEvent): Uint8Array {
  const w = new CborWriter(event.blocks.length + 300 + event.ops.length * 120);
  w.head(5, event.prevData === undefined ? 11 : 12);
  w.text("ops");
  w.head(4, event.ops.length);
  for (const op of event.ops) {
    w.head(5, op.prev === undefined ? 3 : 4);
    w.text("cid");
    w.cidOrNull(op.cid);
    w.text("path");
    w.text(op.path);
    if (op.prev !== undefined) {
      w.text("prev");
      w.cid(op.prev);
    }
    w.text("action");
    w.text(op.action);
  }
  w.text("rev");
  w.text(event.rev);
  w.text("seq");
  w.int(event.seq);
  w.text("repo");
  w.text(event.repo);
  w.text("time");
  w.text(event.time);
  w.text("blobs");
  w.head(4, event.blobs.length);
  for (const b of event.blobs) w.cid(b);
  w.text("since");
  if (event.since === null) w.null();
  else w.text(event.since);
  w.text("blocks");
  w.bytes(event.blocks);
  w.text("commit");
  w.cid(event.commit);
  w.text("rebase");
  w.bool(event.rebase);
  w.text("tooBig");
  w.bool(event.tooBig);
  if (event.prevData !== undefined) {
    w.text("prevData");
    w.cid(event.prevData);
  }
  return w.finish();
}

/** Decodes the stored body of an event. */
export function decodeEvent(body: Uint8Array): CommitEvent {
  return decodeCbor(body, { maxSize: 16 * 1024 * 1024 }) as CommitEvent;
}

/** How long a write waits for another process's lock on a local KV file before failing. */
const LOCKED_RETRY_MS = 5_000;

/**
 * Runs `fn`, retrying while the local KV file is locked by another process (SQLite BUSY: the
 * transaction was rolled back, nothing applied), with a short growing delay, for at most
 * {@link LOCKED_RETRY_MS}. Two account-host processes may share one KV file.
 */
export async function retryWhileLocked<T>(fn: () => Promise<T>): Promise<T> {
  const deadline = Date.now() + LOCKED_RETRY_MS;
  for (let attempt = 0;; attempt++) {
    try {
      return await fn();
    } catch (err) {
      const locked = err instanceof Error && /database is locked|SQLITE_BUSY/i.test(err.message);
      if (!locked || Date.now() > deadline) throw err;
      await new Promise((r) => setTimeout(r, Math.min(50, 1 + attempt * 2) * Math.random() + 1));
    }
  }
}
