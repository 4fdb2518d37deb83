/**
 * Deleting blobs nobody needs: a blob goes when the last record referencing it is deleted or
 * replaced (as in the reference account host), and an upload no record ever referenced goes
 * after {@link UPLOAD_GRACE_MS}, so uploads cannot fill the disk unnoticed.
 *
 * References are indexed by the write path (`blobRefKey`, in the commit's atomic operation).
 * Records written before the index existed are indexed once by {@link buildBlobRefIndex}; until
 * it has finished ({@link blobRefIndexBuilt}) nothing is deleted.
 *
 * A blob is deleted in one atomic operation (metadata and every chunk) that checks the
 * metadata's versionstamp. A commit newly referencing a blob rewrites that metadata in its own
 * atomic operation, so a reference made between our look at the references and our delete makes
 * the delete fail instead of leaving a record pointing at nothing.
 *
 * A record the operator took down is held with its blobs (`moderation/record_takedown.ts`, a
 * `recordTakedownBlobKey` per blob): such a blob is kept like a referenced one, for the record's
 * restore, but not served ({@link blobIsReferenced} counts only live records). Storing a hold
 * rewrites the blob's metadata like a referencing commit does, with the same effect on a deletion
 * racing it.
 *
 * The chunks of an upload interrupted before its metadata was written (a crash between the two
 * atomic operations of a large blob, `blob_store.ts`) are found by their upload marker and
 * deleted after the same grace time ({@link sweepInterruptedUploads}).
 *
 * @module
 */

import type { Logger } from "../../shared/log.ts";
import { PeriodicTask } from "../periodic_task.ts";
import { decodeCbor } from "../../shared/cbor.ts";
import {
  blobChunkKey,
  blobMetaKey,
  blobMetaPrefix,
  blobRefIndexKey,
  blobRefKey,
  blobRefPrefix,
  blobUploadKey,
  blobUploadPrefix,
  kvKeyBytes,
  recordTakedownBlobPrefix,
  repoRecordAllPrefix,
} from "../store/keys.ts";
import { type BlobMeta, MAX_BLOB_CHUNKS } from "./blob_store.ts";
import { findBlobRefs } from "./blob_refs.ts";

/** An upload no record references is deleted this long after it was stored (one day). */
export const UPLOAD_GRACE_MS = 24 * 60 * 60 * 1000;
/** How often the sweep runs by default (one hour). */
export const DEFAULT_SWEEP_INTERVAL_MS = 60 * 60 * 1000;
const INDEX_VERSION = 1;
/** Records per backfill atomic operation: one check each (Deno KV allows 100). */
const BACKFILL_BATCH = 50;
/** Reference keys per backfill operation (Deno KV allows 1,000 mutations). */
const BACKFILL_MUTATIONS = 500;
/** Key bytes per backfill operation (Deno KV allows 81,920). */
const BACKFILL_KEY_BYTES = 50_000;
/** Reference keys per piece of one record too large for an operation of its own (each key is
 * at most about 1 KB: a DID, a CID and a collection/rkey path). */
const BACKFILL_PIECE = 50;

/** Whether every record's blob references are indexed (blobs may be deleted). */
export async function blobRefIndexBuilt(kv: Deno.Kv): Promise<boolean> {
  const marker = await kv.get<{ version: number }>(blobRefIndexKey());
  return (marker.value?.version ?? 0) >= INDEX_VERSION;
}

/** Whether a record references blob `cid` of `did` (one reference key is enough). */
async function hasBlobRef(kv: Deno.Kv, did: string, cid: string): Promise<boolean> {
  for await (const _ of kv.list({ prefix: blobRefPrefix(did, cid) }, { limit: 1 })) return true;
  return false;
}

/** Whether a record the operator took down, held for its restore, references blob `cid`. */
async function hasBlobHold(kv: Deno.Kv, did: string, cid: string): Promise<boolean> {
  const holds = kv.list({ prefix: recordTakedownBlobPrefix(did, cid) }, { limit: 1 });
  for await (const _ of holds) return true;
  return false;
}

/** Stores whose reference index is known to be built (it is never unbuilt). */
const indexBuilt = new WeakSet<Deno.Kv>();

/**
 * Whether blob `cid` of `did` may be served by `getBlob`: a record references it. An upload no
 * record references is not served (the reference account host keeps uploads apart until a record
 * takes them), so the host is not a file host for whatever is uploaded. Until the reference index
 * is built (the first start after an upgrade from a version without it) references are not known,
 * and every stored blob counts as referenced.
 */
export async function blobIsReferenced(kv: Deno.Kv, did: string, cid: string): Promise<boolean> {
  if (await hasBlobRef(kv, did, cid)) return true;
  if (indexBuilt.has(kv)) return false;
  if (!await blobRefIndexBuilt(kv)) return true;
  indexBuilt.add(kv);
  return false;
}

/**
 * Deletes blob `cid` of `did` when no record references it, no record taken down by the operator
 * is held with it (and, with `storedBefore`, only when it was stored before that time) and no
 * upload of it is half stored. True when it was deleted.
 */
export async function deleteBlobIfUnreferenced(
  kv: Deno.Kv,
  did: string,
  cid: string,
  opts: { storedBefore?: number } = {},
): Promise<boolean> {
  const meta = await kv.get<BlobMeta>(blobMetaKey(did, cid));
  if (meta.value === null) return false;
  if (opts.storedBefore !== undefined && !(Date.parse(meta.value.createdAt) < opts.storedBefore)) {
    return false;
  }
  if (await hasBlobRef(kv, did, cid) || await hasBlobHold(kv, did, cid)) return false;
  // No upload of the same bytes may be half stored: its first operation has written chunks
  // this deletion would take, and its second would then publish a blob missing them.
  const op = kv.atomic().check(meta).check({ key: blobUploadKey(did, cid), versionstamp: null })
    .delete(meta.key);
  for (let i = 0; i < meta.value.chunks; i++) op.delete(blobChunkKey(did, cid, i));
  return (await op.commit()).ok;
}

/**
 * Indexes the blob references of every stored record, once (a no-op when built). Records are
 * indexed in operations of bounded mutations and key bytes, each checking its records'
 * versionstamps, so a record changed or deleted meanwhile is read again rather than indexed as
 * still referencing its blobs. Returns the records read.
 */
export async function buildBlobRefIndex(
  kv: Deno.Kv,
  now: number,
  signal?: AbortSignal,
): Promise<number> {
  if (await blobRefIndexBuilt(kv)) return 0;
  let read = 0;
  let batch: RecordRefs[] = [];
  let mutations = 0;
  let keyBytes = 0;
  const flush = async () => {
    await indexRecords(kv, batch);
    batch = [];
    mutations = keyBytes = 0;
  };
  for await (const entry of kv.list<{ bytes: Uint8Array }>({ prefix: repoRecordAllPrefix() })) {
    // Stopped: not marked built, so the next run indexes again (indexing twice is harmless).
    if (signal?.aborted) return read;
    read++;
    const refs = recordRefs(entry);
    if (refs.keys.length === 0) continue;
    const bytes = kvKeyBytes(entry.key) + refs.keys.reduce((n, k) => n + kvKeyBytes(k), 0);
    if (
      batch.length > 0 &&
      (batch.length >= BACKFILL_BATCH || mutations + refs.keys.length > BACKFILL_MUTATIONS ||
        keyBytes + bytes > BACKFILL_KEY_BYTES)
    ) await flush();
    batch.push(refs);
    mutations += refs.keys.length;
    keyBytes += bytes;
  }
  await flush();
  await kv.set(blobRefIndexKey(), { version: INDEX_VERSION, builtAt: new Date(now).toISOString() });
  return read;
}

/** A stored record and the reference keys of the blobs it references. */
interface RecordRefs {
  entry: Deno.KvEntry<{ bytes: Uint8Array }>;
  keys: Deno.KvKey[];
}

function recordRefs(entry: Deno.KvEntry<{ bytes: Uint8Array }>): RecordRefs {
  const [, did, collection, rkey] = entry.key as string[];
  const keys = blobsOf(collection, entry.value.bytes).map((cid) =>
    blobRefKey(did, cid, `${collection}/${rkey}`)
  );
  return { entry, keys };
}

/**
 * Writes the reference keys of `records` in one operation checking each record; a record
 * changed meanwhile is read again. A record too large for one operation (only one is ever
 * batched alone) is written in pieces, each checking that record.
 */
async function indexRecords(kv: Deno.Kv, records: RecordRefs[]): Promise<void> {
  let pending = records;
  while (pending.length > 0 && fitsOneOperation(pending)) {
    const op = kv.atomic();
    for (const r of pending) {
      op.check(r.entry);
      for (const key of r.keys) op.set(key, true);
    }
    if ((await op.commit()).ok) return;
    pending = await reread(kv, pending);
  }
  for (const record of pending) {
    let current: RecordRefs | undefined = record;
    while (current !== undefined) {
      let ok = true;
      for (let i = 0; i < current.keys.length && ok; i += BACKFILL_PIECE) {
        const op = kv.atomic().check(current.entry);
        for (const key of current.keys.slice(i, i + BACKFILL_PIECE)) op.set(key, true);
        ok = (await op.commit()).ok;
      }
      current = ok ? undefined : (await reread(kv, [current]))[0];
    }
  }
}

function fitsOneOperation(records: RecordRefs[]): boolean {
  let mutations = 0;
  let keyBytes = 0;
  for (const r of records) {
    mutations += r.keys.length;
    keyBytes += kvKeyBytes(r.entry.key) + r.keys.reduce((n, k) => n + kvKeyBytes(k), 0);
  }
  return mutations <= BACKFILL_MUTATIONS && keyBytes <= BACKFILL_KEY_BYTES;
}

/** The records of `records` that still exist, read again. */
async function reread(kv: Deno.Kv, records: RecordRefs[]): Promise<RecordRefs[]> {
  const fresh: RecordRefs[] = [];
  for (let i = 0; i < records.length; i += 10) {
    const keys = records.slice(i, i + 10).map((r) => r.entry.key);
    for (const e of await kv.getMany<{ bytes: Uint8Array }[]>(keys)) {
      if (e.value !== null) fresh.push(recordRefs(e as Deno.KvEntry<{ bytes: Uint8Array }>));
    }
  }
  return fresh;
}

/** The distinct blob CIDs a stored record block references. */
function blobsOf(collection: string, bytes: Uint8Array): string[] {
  try {
    return [...new Set(findBlobRefs(collection, decodeCbor(bytes)).map((b) => b.cid))];
  } catch {
    return []; // an undecodable block references nothing we could serve anyway
  }
}

/** Deletes every upload stored before `now - graceMs` that no record references. */
export async function sweepUnreferencedBlobs(
  kv: Deno.Kv,
  opts: { now: number; graceMs?: number; signal?: AbortSignal },
): Promise<number> {
  if (!await blobRefIndexBuilt(kv)) return 0;
  const storedBefore = opts.now - (opts.graceMs ?? UPLOAD_GRACE_MS);
  let deleted = 0;
  for await (const entry of kv.list<BlobMeta>({ prefix: blobMetaPrefix() })) {
    if (opts.signal?.aborted) break;
    if (!(Date.parse(entry.value.createdAt) < storedBefore)) continue;
    const [, did, cid] = entry.key as string[];
    if (await deleteBlobIfUnreferenced(kv, did, cid, { storedBefore })) deleted++;
  }
  return deleted;
}

/**
 * Deletes the chunks and marker of every upload interrupted before `now - graceMs` (its marker
 * is older and it has no metadata). Each deletion checks the marker's versionstamp and that the
 * metadata is still absent, so an upload of the same blob started meanwhile is left alone.
 * Returns the uploads deleted.
 */
export async function sweepInterruptedUploads(
  kv: Deno.Kv,
  opts: { now: number; graceMs?: number; signal?: AbortSignal },
): Promise<number> {
  const startedBefore = opts.now - (opts.graceMs ?? UPLOAD_GRACE_MS);
  let deleted = 0;
  for await (const entry of kv.list<{ createdAt: string }>({ prefix: blobUploadPrefix() })) {
    if (opts.signal?.aborted) break;
    if (!(Date.parse(entry.value.createdAt) < startedBefore)) continue;
    const [, did, cid] = entry.key as string[];
    const op = kv.atomic().check(entry).delete(entry.key);
    const meta = await kv.get(blobMetaKey(did, cid));
    // With metadata the upload finished (a marker cannot outlive that): only the marker goes.
    if (meta.value === null) {
      op.check({ key: meta.key, versionstamp: null });
      for (let i = 0; i < MAX_BLOB_CHUNKS; i++) op.delete(blobChunkKey(did, cid, i));
    }
    if ((await op.commit()).ok && meta.value === null) deleted++;
  }
  return deleted;
}

/** Builds the reference index when needed, then sweeps at start and every `intervalMs`. */
export class BlobSweeper extends PeriodicTask {
  constructor(opts: {
    kv: Deno.Kv;
    log: Logger;
    now: () => number;
    intervalMs?: number;
    graceMs?: number;
  }) {
    const graceMs = opts.graceMs ?? UPLOAD_GRACE_MS;
    super({
      intervalMs: opts.intervalMs ?? DEFAULT_SWEEP_INTERVAL_MS,
      log: opts.log,
      failure: "sweeping unreferenced blobs failed",
      run: async (signal) => {
        if (!await blobRefIndexBuilt(opts.kv)) {
          const records = await buildBlobRefIndex(opts.kv, opts.now(), signal);
          if (signal.aborted) return;
          opts.log.info("indexed blob references of stored records", { records });
        }
        const deleted = await sweepUnreferencedBlobs(opts.kv, {
          now: opts.now(),
          graceMs,
          signal,
        });
        if (deleted > 0) opts.log.info("deleted unreferenced uploads", { deleted, graceMs });
        const interrupted = await sweepInterruptedUploads(opts.kv, {
          now: opts.now(),
          graceMs,
          signal,
        });
        if (interrupted > 0) {
          opts.log.info("deleted the chunks of interrupted uploads", { uploads: interrupted });
        }
      },
    });
  }
}
