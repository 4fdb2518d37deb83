/**
 * `com.atproto.sync.*` HTTP methods (docs/protocol.md 5): repository export, blocks,
 * latest commit, record proofs, repository listing and blobs. All unauthenticated GETs.
 *
 * @module
 */

import { type Context, Hono } from "hono";
import { formatCid, parseCid } from "../../shared/cid.ts";
import { isValidNsid, isValidRecordKey } from "../../shared/syntax.ts";
import { isValidTid } from "../../shared/tid.ts";
import type { PdsContext, PdsEnv } from "../context.ts";
import { isLookupDid } from "../accounts/accounts.ts";
import {
  exportRepoCar,
  getBlocksCar,
  getRecordProofCar,
  listRepos,
  requireRepoRoot,
} from "../repo/reader.ts";
import { blobIsReferenced } from "../blobs/blob_gc.ts";
import { getBlob } from "../blobs/blob_store.ts";
import { heldRecordCids } from "../moderation/record_takedown.ts";
import { ConcurrencyGate, GateFullError } from "../concurrency_gate.ts";
import { XrpcError } from "./errors.ts";
import { refuseInactiveRepo, sessionStatus } from "./account_checks.ts";
import { parseLimit, toXrpcError } from "./repo.ts";

const NSID = "com.atproto.sync";
const CAR_TYPE = "application/vnd.ipld.car";
/** Most CIDs in one `getBlocks` request. */
const MAX_GET_BLOCKS = 1000;
/**
 * Repository exports (`getRepo`) running at once, and waiting behind them. An export holds
 * every block of the repository in memory while it builds the CAR, and the method needs no
 * authentication: without a bound, a few dozen parallel requests for a large repository would
 * exhaust a small host's memory. Beyond both, a request is answered 429 at once.
 */
export const EXPORTS_RUNNING = 4;
export const EXPORTS_WAITING = 32;

/** A gate of `getRepo` exports (`ctx.exportGate`, one per account host). */
export function createExportGate(): ConcurrencyGate {
  return new ConcurrencyGate({ running: EXPORTS_RUNNING, waiting: EXPORTS_WAITING });
}

/** Routes of `com.atproto.sync.*` (except `subscribeRepos`). */
export function syncRoutes(ctx: PdsContext): Hono<PdsEnv> {
  const app = new Hono<PdsEnv>();
  const exports = ctx.exportGate;

  app.get(`/xrpc/${NSID}.getRepo`, async (c) => {
    const did = requireDid(c);
    await refuseInactiveRepo(ctx, did);
    const since = c.req.query("since") || undefined;
    if (since !== undefined && !isValidTid(since)) {
      throw new XrpcError(400, "InvalidRequest", `Parameter since is not a TID: ${q(since)}`);
    }
    // A request whose client went away leaves the queue (its export never runs).
    const signal = c.req.raw.signal;
    let release: () => void;
    try {
      release = await exports.acquire(signal);
    } catch (err) {
      // 499, as nginx logs it: nobody reads this response.
      if (signal.aborted && err === signal.reason) return new Response(null, { status: 499 });
      if (!(err instanceof GateFullError)) throw err;
      throw new XrpcError(
        429,
        "RateLimitExceeded",
        `Too many repository exports at once (${err.message}); retry in 1 second`,
        { "Retry-After": "1" },
      );
    }
    // The place goes back here unless the CAR's body takes it over.
    let handedOver = false;
    try {
      const bytes = await domain(exportRepoCar(ctx.blocks, did, since));
      if (signal.aborted) return new Response(null, { status: 499 });
      if (c.req.method === "HEAD") return new Response(null, { headers: carHeaders(bytes.length) });
      // The CAR stays in memory until it is sent: the place is held until then, or until the
      // server is done with the response (sent, or the client gone), whichever comes first.
      const served = (c.env as Partial<Deno.ServeHandlerInfo> | undefined)?.completed;
      handedOver = true;
      return carBody(bytes, release, {}, served);
    } finally {
      if (!handedOver) release();
    }
  });

  app.get(`/xrpc/${NSID}.getBlocks`, async (c) => {
    const did = requireDid(c);
    await refuseInactiveRepo(ctx, did);
    const cids = c.req.queries("cids") ?? [];
    if (cids.length === 0) throw new XrpcError(400, "InvalidRequest", "Parameter cids is required");
    if (cids.length > MAX_GET_BLOCKS) {
      throw new XrpcError(
        400,
        "InvalidRequest",
        `Too many cids: ${cids.length} (at most ${MAX_GET_BLOCKS})`,
      );
    }
    for (const cid of cids) canonicalCid(cid); // 400 for one that is no CID
    // A record the operator took down (docs/behaviour.md 4.1 rule 15) is not served, whatever
    // the caches of this process still hold of the commit that wrote it.
    const held = await heldRecordCids(ctx.kv, did, cids.map(canonicalCid));
    if (held.length > 0) {
      throw new XrpcError(400, "BlockNotFound", `Could not find blocks: ${held.join(", ")}`);
    }
    return car(await domain(getBlocksCar(ctx.blocks, did, cids)));
  });

  app.get(`/xrpc/${NSID}.getLatestCommit`, async (c) => {
    const did = requireDid(c);
    await refuseInactiveRepo(ctx, did);
    const root = await domain(requireRepoRoot(ctx.kv, did));
    return c.json({ cid: root.commitCid, rev: root.rev });
  });

  app.get(`/xrpc/${NSID}.getRecord`, async (c) => {
    const did = requireDid(c);
    await refuseInactiveRepo(ctx, did);
    const collection = requireParam(c, "collection");
    const rkey = requireParam(c, "rkey");
    if (!isValidNsid(collection)) throw invalid("collection", collection);
    if (!isValidRecordKey(rkey)) throw invalid("rkey", rkey);
    return car(await domain(getRecordProofCar(ctx.blocks, did, collection, rkey)));
  });

  app.get(`/xrpc/${NSID}.listRepos`, async (c) => {
    const limit = parseLimit(c.req.query("limit"), 500, 1000);
    const cursor = c.req.query("cursor") || undefined;
    // The cursor is the last DID returned; anything else (say, too long for a KV key) is refused.
    if (cursor !== undefined && !isLookupDid(cursor)) throw invalid("cursor", cursor);
    const page = await listRepos(ctx.kv, { limit, cursor });
    // Each entry says whether the account is active, and why not (docs/protocol.md 5); a
    // repository whose account is being deleted is left out. The cursor stays the last DID read.
    const repos = [];
    for (const repo of page.repos) {
      const status = await ctx.accountStatuses.get(repo.did);
      if (status === null) continue;
      repos.push({ ...repo, ...sessionStatus(status) });
    }
    return c.json(page.cursor === undefined ? { repos } : { repos, cursor: page.cursor });
  });

  app.get(`/xrpc/${NSID}.getBlob`, async (c) => {
    const did = requireDid(c);
    await refuseInactiveRepo(ctx, did);
    const cid = canonicalCid(requireParam(c, "cid"));
    // An upload no record references yet is not served (see blobIsReferenced).
    const blob = await blobIsReferenced(ctx.kv, did, cid) ? await getBlob(ctx.kv, did, cid) : null;
    if (blob === null) throw new XrpcError(400, "BlobNotFound", `Blob not found: ${q(cid)}`);
    return new Response(blob.bytes as Uint8Array<ArrayBuffer>, {
      headers: {
        "Content-Type": blob.mimeType,
        "Content-Length": String(blob.bytes.length),
        "X-Content-Type-Options": "nosniff",
        "Content-Disposition": `attachment; filename="${cid}"`,
        "Content-Security-Policy": "default-src 'none'; sandbox",
        "Cache-Control": "public, max-age=31536000, immutable",
      },
    });
  });

  return app;
}

/**
 * Longest wait for a client to take the next piece of an export (ms), and the slowest average
 * rate it may read at beyond that (bytes/s): a client that stops reading, or reads a trickle,
 * gives its place back (the connection is closed) instead of holding it, and the CAR in memory,
 * for as long as it likes. A 10 MB export may take 30 s + 10 MB / 64 KiB/s, about 3 minutes.
 */
export const EXPORT_SEND_IDLE_MS = 30_000;
export const EXPORT_SEND_MIN_RATE = 64 * 1024;
/** Piece of a CAR body handed to the server at a time. */
const BODY_PIECE_BYTES = 64 * 1024;

/**
 * A CAR response whose body is handed over piece by piece as the client reads it; `done` is
 * called once: when the last piece was taken, when the client went away or `served` settled
 * (the server is done with the response), when it took no piece for `limits.idleMs`, or when
 * the whole took longer than `idleMs` plus the size at `limits.minRate` (in both last cases the
 * body ends early and the server closes the connection).
 */
export function carBody(
  bytes: Uint8Array,
  done: () => void,
  limits: { idleMs?: number; minRate?: number } = {},
  served?: Promise<unknown>,
): Response {
  const idleMs = limits.idleMs ?? EXPORT_SEND_IDLE_MS;
  const minRate = limits.minRate ?? EXPORT_SEND_MIN_RATE;
  let offset = 0;
  let idle: ReturnType<typeof setTimeout> | undefined;
  let deadline: ReturnType<typeof setTimeout> | undefined;
  let finished = false;
  const finish = () => {
    if (finished) return;
    finished = true;
    clearTimeout(idle);
    clearTimeout(deadline);
    done();
  };
  // The server is done with the response (`ServeHandlerInfo.completed`): a body it dropped
  // unread must not keep the place, its timers or the bytes.
  served?.then(finish, finish);
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      // Ended short of its Content-Length, the body makes the server drop the connection.
      // (Failing the stream instead would print its error to stderr, outside the JSON log.)
      const cut = () => {
        if (finished) return;
        controller.close();
        finish();
      };
      idle = setTimeout(cut, idleMs);
      deadline = setTimeout(cut, idleMs + Math.ceil((bytes.length / minRate) * 1000));
    },
    pull(controller) {
      const end = Math.min(offset + BODY_PIECE_BYTES, bytes.length);
      controller.enqueue(bytes.slice(offset, end));
      offset = end;
      if (offset < bytes.length) {
        idle?.refresh();
        return;
      }
      controller.close();
      finish();
    },
    cancel: finish,
  }, { highWaterMark: 0 });
  return new Response(body, { headers: carHeaders(bytes.length) });
}

function carHeaders(length: number): Record<string, string> {
  return { "Content-Type": CAR_TYPE, "Content-Length": String(length) };
}

function car(bytes: Uint8Array): Response {
  return new Response(bytes as Uint8Array<ArrayBuffer>, { headers: carHeaders(bytes.length) });
}

async function domain<T>(p: Promise<T>): Promise<T> {
  try {
    return await p;
  } catch (err) {
    throw toXrpcError(err);
  }
}

function requireParam(c: Context, name: string): string {
  const value = c.req.query(name);
  if (value === undefined || value === "") {
    throw new XrpcError(400, "InvalidRequest", `Parameter ${name} is required`);
  }
  return value;
}

function requireDid(c: Context): string {
  const did = requireParam(c, "did");
  if (!isLookupDid(did)) throw invalid("did", did);
  return did;
}

/**
 * The stored spelling (base32 CIDv1) of a CID parameter, which may come in any base the CID
 * parser reads (a base58btc `z...` one, say); 400 `InvalidRequest` when it is no CID.
 */
function canonicalCid(cid: string): string {
  try {
    return formatCid(parseCid(cid));
  } catch {
    throw invalid("cid", cid);
  }
}

function invalid(name: string, value: string): XrpcError {
  return new XrpcError(400, "InvalidRequest", `Invalid ${name}: ${q(value)}`);
}

function q(value: string): string {
  return JSON.stringify(value.length > 100 ? value.slice(0, 100) + "..." : value);
}
