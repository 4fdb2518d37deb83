/**
 * Push ingest (spec 6.4; docs/behaviour.md 10.7 "Push ingest"): after each commit made by this
 * process, the account host POSTs it to `{APPVIEW_INTERNAL_URL}/internal/ingest-commit` with
 * `Authorization: Bearer <APPVIEW_INGEST_SECRET>` and the JSON body
 * `{did, handle, rev, since, commit, blocks, ops: [{action, collection, rkey, cid, record}]}`
 * (records in lex JSON, taken from the event's CAR blocks; `since` is the rev of the repository's
 * previous commit, null for its first, so the index applies a push only when it is exactly the
 * next commit and leaves late or early ones to the local stream). `blocks` is the event's CAR, the
 * very bytes of the `#commit` frame's `blocks` (the signed commit, the new tree nodes and the new
 * records), as lex JSON bytes `{"$bytes": "<base64>"}`: the index verifies the commit's signature
 * and each op against them and takes the records from them, so a push is as trustworthy as a
 * frame (issue 36). When a delete's path in the new tree runs through nodes the commit did not
 * rewrite, those are added (`push_proof.ts`), so the index can prove the key absent. `commit` is
 * the CID of the commit block in it.
 *
 * Best effort and off the write's latency path: the sequencer's listener only enqueues; lanes
 * (by DID, so one repository's commits stay in order) send with a short timeout. A failure is
 * logged once per outage (the first failure and the recovery), is never retried and never fails
 * the write: the index still gets the commit from the local stream (spec 6.2 rule 5). When the
 * queue is full the oldest waiting commit is dropped, for the same reason.
 *
 * An `http:` target (the usual internal address) is sent to with `Http1Client`
 * (`http1_client.ts`, keep-alive connections, about half of `fetch`'s CPU per request); an
 * `https:` one with `fetch`. A request on a kept connection the index had closed is sent once more
 * on a new one; the index's write path is idempotent, so a duplicate changes nothing.
 *
 * @module
 */

import { readCar } from "../../shared/car.ts";
import { decodeCbor } from "../../shared/cbor.ts";
import { formatCid } from "../../shared/cid.ts";
import { toLexJson } from "../../shared/lex_json.ts";
import type { Logger } from "../../shared/log.ts";
import type { BlockStore } from "../repo/block_store.ts";
import { Http1Client } from "./http1_client.ts";
import { blocksProvingDeletes } from "./push_proof.ts";
import type { CommitEvent, SequencedCommit, Sequencer } from "./sequencer.ts";

/** Path of the index's push endpoint. */
export const INGEST_COMMIT_PATH = "/internal/ingest-commit";

/** One op of a push body. */
export interface PushOp {
  action: "create" | "update" | "delete";
  collection: string;
  rkey: string;
  /** Record CID string; null for deletes. */
  cid: string | null;
  /** The record in lex JSON; null for deletes. */
  record: unknown;
}

/** The push body (docs/behaviour.md 10.7). */
export interface PushBody {
  did: string;
  handle: string | null;
  rev: string;
  /** Rev of the repository's previous commit; null for its first commit. */
  since: string | null;
  /** CID of the commit block (the root of `blocks`). */
  commit: string;
  /** The `#commit` frame's CAR as lex JSON bytes. */
  blocks: { $bytes: string };
  ops: PushOp[];
}

/** Options of {@link PushService}. */
export interface PushOptions {
  kv: Deno.Kv;
  /** The sequencer of the store's in-process commits. */
  sequencer: Sequencer;
  /** The blocks of the store (proofs of deletes). */
  blocks: BlockStore;
  /**
   * The current handle of an account of the store, or null (given by the stream services, so
   * that this module does not import the accounts module, which takes the context).
   */
  accountHandle(did: string): Promise<string | null>;
  log: Logger;
  /** Origin of the index (`APPVIEW_INTERNAL_URL`). */
  targetUrl: string;
  /** `APPVIEW_INGEST_SECRET`; null sends no Authorization header. */
  secret: string | null;
  /** Per-request timeout (default 2,000 ms). */
  timeoutMs?: number;
  /** Parallel lanes (default 4); a DID always uses the same lane. */
  lanes?: number;
  /** Most commits waiting per lane (default 2,500). */
  maxQueuePerLane?: number;
}

const DEFAULT_TIMEOUT_MS = 2000;
const DEFAULT_LANES = 4;
const DEFAULT_MAX_QUEUE = 2500;

/**
 * Builds the push body of a committed event. Records come from `records` (the decoded values the
 * writer kept, by CID string) when given, else from the event's CAR blocks.
 */
export function pushBodyOf(
  event: CommitEvent,
  handle: string | null,
  records?: ReadonlyMap<string, unknown>,
): PushBody {
  let blocks: Map<string, Uint8Array> | null = null;
  const ops = event.ops.map((op): PushOp => {
    const slash = op.path.indexOf("/");
    const collection = op.path.slice(0, slash);
    const rkey = op.path.slice(slash + 1);
    if (op.cid === null) return { action: op.action, collection, rkey, cid: null, record: null };
    const cid = formatCid(op.cid);
    const value = records?.get(cid);
    if (value !== undefined) {
      return { action: op.action, collection, rkey, cid, record: toLexJson(value) };
    }
    blocks ??= readCar(event.blocks).blocks;
    const bytes = blocks.get(cid);
    if (!bytes) throw new Error(`Commit ${formatCid(event.commit)} lacks the block of ${cid}`);
    return { action: op.action, collection, rkey, cid, record: toLexJson(decodeCbor(bytes)) };
  });
  return {
    did: event.repo,
    handle,
    rev: event.rev,
    since: event.since,
    commit: formatCid(event.commit),
    blocks: toLexJson(event.blocks) as { $bytes: string },
    ops,
  };
}

/** Pushes this process's commits to the index; {@link start} it, then {@link close} it. */
export class PushService {
  readonly #kv: Deno.Kv;
  readonly #sequencer: Sequencer;
  readonly #blocks: BlockStore;
  readonly #log: Logger;
  readonly #url: string;
  /** The client of an `http:` target (`fetch` serves `https:` ones), and the request path. */
  readonly #http: Http1Client | null;
  readonly #path: string;
  readonly #headers: Record<string, string>;
  readonly #timeoutMs: number;
  readonly #maxQueue: number;
  readonly #lanes: SequencedCommit[][];
  readonly #running: (Promise<void> | null)[];
  /** Controllers of the requests in flight (aborted by {@link close}). */
  readonly #inFlight = new Set<AbortController>();
  #unsubscribe: (() => void) | null = null;
  #closed = false;
  /** True between a failed push and the next successful one. */
  #down = false;
  #failedSinceDown = 0;
  #dropped = 0;
  #pushed = 0;
  /**
   * Handles by DID. A handle change ({@link forgetHandle}: the updateHandle route at once, and
   * every `#identity` event the broadcaster reads) drops the entry, so no push after the change
   * carries the old handle. Bounded; cleared when full.
   */
  readonly #handles = new Map<string, string | null>();

  readonly #accountHandle: (did: string) => Promise<string | null>;
  constructor(opts: PushOptions) {
    this.#kv = opts.kv;
    this.#sequencer = opts.sequencer;
    this.#accountHandle = opts.accountHandle;
    this.#blocks = opts.blocks;
    this.#log = opts.log;
    this.#url = opts.targetUrl.replace(/\/+$/, "") + INGEST_COMMIT_PATH;
    const target = new URL(this.#url);
    this.#http = target.protocol === "http:" ? new Http1Client(target.origin) : null;
    this.#path = target.pathname + target.search;
    this.#headers = { "content-type": "application/json" };
    if (opts.secret !== null) this.#headers.authorization = `Bearer ${opts.secret}`;
    this.#timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.#maxQueue = opts.maxQueuePerLane ?? DEFAULT_MAX_QUEUE;
    const lanes = opts.lanes ?? DEFAULT_LANES;
    this.#lanes = Array.from({ length: lanes }, () => []);
    this.#running = Array.from({ length: lanes }, () => null);
  }

  /** Number of commits pushed successfully. */
  get pushed(): number {
    return this.#pushed;
  }

  /** Listens to this process's commits. */
  start(): void {
    this.#unsubscribe ??= this.#sequencer.onCommit((c) => this.enqueue(c));
  }

  /** Queues a committed event for pushing (never throws, never waits). */
  enqueue(commit: SequencedCommit): void {
    if (this.#closed) return;
    const i = laneOf(commit.event.repo, this.#lanes.length);
    const lane = this.#lanes[i];
    if (lane.length >= this.#maxQueue) {
      lane.shift();
      if (this.#dropped++ === 0) {
        this.#log.warn("push queue to the index is full: dropping the oldest commits", {
          url: this.#url,
        });
      }
    }
    lane.push(commit);
    this.#running[i] ??= this.#runLane(i);
  }

  /** Resolves when every queued commit has been attempted. */
  async flush(): Promise<void> {
    while (this.#running.some((r) => r !== null)) {
      await Promise.all(this.#running);
    }
  }

  /** Stops listening, aborts requests in flight and drops what is queued. */
  async close(): Promise<void> {
    this.#closed = true;
    this.#unsubscribe?.();
    this.#unsubscribe = null;
    for (const lane of this.#lanes) lane.length = 0;
    for (const request of this.#inFlight) request.abort();
    await Promise.all(this.#running);
    this.#http?.close();
  }

  async #runLane(i: number): Promise<void> {
    const lane = this.#lanes[i];
    try {
      while (lane.length > 0 && !this.#closed) {
        const commit = lane.shift()!;
        await this.#push(commit);
      }
    } finally {
      this.#running[i] = null;
    }
  }

  /** Forgets the cached handle of `did` (its handle changed). */
  forgetHandle(did: string): void {
    this.#handles.delete(did);
  }

  async #handleOf(did: string): Promise<string | null> {
    const cached = this.#handles.get(did);
    if (cached !== undefined) return cached;
    const handle = await this.#accountHandle(did);
    if (handle !== null) {
      if (this.#handles.size >= MAX_CACHED_HANDLES) this.#handles.clear();
      this.#handles.set(did, handle);
    }
    return handle;
  }

  async #push(commit: SequencedCommit): Promise<void> {
    let problem: string;
    // One controller and one timer per request, cleared when it ends (an AbortSignal.timeout
    // would fire for every push, seconds after it completed).
    const request = new AbortController();
    const timer = setTimeout(
      () => request.abort(new DOMException("Push timed out", "TimeoutError")),
      this.#timeoutMs,
    );
    this.#inFlight.add(request);
    try {
      const handle = await this.#handleOf(commit.event.repo);
      const push = pushBodyOf(commit.event, handle, commit.records);
      const proven = await blocksProvingDeletes(this.#blocks, commit.event);
      if (proven !== null) push.blocks = toLexJson(proven) as PushBody["blocks"];
      const body = JSON.stringify(push);
      let status: number;
      if (this.#http !== null) {
        const bytes = encoder.encode(body);
        status = await this.#http.post(this.#path, this.#headers, bytes, request.signal);
      } else {
        const res = await fetch(this.#url, {
          method: "POST",
          headers: this.#headers,
          body,
          signal: request.signal,
        });
        await res.body?.cancel();
        status = res.status;
      }
      if (status >= 200 && status < 300) {
        this.#pushed++;
        if (this.#down) {
          this.#down = false;
          this.#log.info("push to the index recovered", {
            url: this.#url,
            failedCommits: this.#failedSinceDown,
          });
        }
        return;
      }
      problem = `HTTP ${status}`;
    } catch (err) {
      if (this.#closed) return;
      problem = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
    } finally {
      clearTimeout(timer);
      this.#inFlight.delete(request);
    }
    if (!this.#down) {
      this.#down = true;
      this.#failedSinceDown = 0;
      this.#log.warn("push to the index failed; the local stream still delivers commits", {
        url: this.#url,
        seq: commit.seq,
        error: problem,
      });
    }
    this.#failedSinceDown++;
  }
}

const MAX_CACHED_HANDLES = 10_000;
const encoder = new TextEncoder();

function laneOf(did: string, lanes: number): number {
  let h = 0;
  for (let i = 0; i < did.length; i++) h = (h * 31 + did.charCodeAt(i)) | 0;
  return (h >>> 0) % lanes;
}
