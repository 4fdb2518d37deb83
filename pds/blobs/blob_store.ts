/**
 * Blobs (spec 4.1 rule 4, 8): uploads are read as a stream and refused as soon as they pass
 * 1 MiB; accepted bytes are stored in Deno KV in chunks under the 64 KiB value limit. The chunks
 * are written first and the metadata last, and readers go through the metadata, so a blob is
 * either complete or invisible. A blob of up to ten chunks is one atomic operation; a larger one
 * takes two, the first of which sets an upload marker (`blobUploadKey`) that the second deletes
 * with the metadata, so the sweep (`blob_gc.ts`) finds the chunks of an upload interrupted in
 * between.
 *
 * @module
 */

import { cidForRaw, formatCid } from "../../shared/cid.ts";
import { BLOB_TYPE } from "../../shared/nsid.ts";
import { readStreamLimited } from "../../shared/bytes.ts";
import { MAX_BLOB_BYTES } from "../../shared/limits.ts";
import { blobChunkKey, blobMetaKey, blobUploadKey } from "../store/keys.ts";

/** Largest accepted blob: 1 MiB (defined once in `shared/limits.ts`, which clients read too). */
export { MAX_BLOB_BYTES };
/** Bytes per stored chunk. */
const CHUNK_BYTES = 60_000;
/** Chunks of the largest blob. */
export const MAX_BLOB_CHUNKS = Math.ceil(MAX_BLOB_BYTES / CHUNK_BYTES);
/** Chunks per atomic operation (keeps each operation under Deno KV's ~800 KB). */
const CHUNKS_PER_OP = 10;
const DEFAULT_MIME = "application/octet-stream";
const MIME_RE = /^[a-z0-9][a-z0-9!#$&^_.+-]{0,126}\/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}$/;

/** The upload passed the size limit; nothing was stored. */
export class BlobTooLargeError extends Error {
  override readonly name = "BlobTooLargeError";
  constructor(readonly limit: number) {
    super(`Blob is larger than ${limit} bytes`);
  }
}

/** A blob reference in lex JSON form (spec 2.3). */
export interface BlobRefJson {
  $type: "blob";
  ref: { $link: string };
  mimeType: string;
  size: number;
}

/** Stored metadata of a blob. */
export interface BlobMeta {
  mimeType: string;
  size: number;
  chunks: number;
  createdAt: string;
}

/**
 * Reads a body stream of at most `maxBytes`, cancelling it as soon as more arrives.
 *
 * @throws {BlobTooLargeError} past the limit.
 */
export function readLimited(
  body: ReadableStream<Uint8Array> | null,
  maxBytes = MAX_BLOB_BYTES,
): Promise<Uint8Array> {
  return readStreamLimited(body, maxBytes, () => new BlobTooLargeError(maxBytes));
}

/** The MIME type to store for a `Content-Type` header value (parameters dropped). */
export function normalizeMimeType(contentType: string | null | undefined): string {
  const base = (contentType ?? "").split(";")[0].trim().toLowerCase();
  return MIME_RE.test(base) ? base : DEFAULT_MIME;
}

/** Attempts at storing a blob while other uploads or deletions of it change its keys. */
const MAX_STORE_ATTEMPTS = 5;

/**
 * Stores a blob of `did` (idempotent for equal bytes) and returns its reference.
 *
 * `betweenOps` (tests) runs between the two operations of a blob of more than ten chunks.
 */
export async function putBlob(
  kv: Deno.Kv,
  did: string,
  bytes: Uint8Array,
  opts: { mimeType: string; now: number; betweenOps?: () => Promise<void> },
): Promise<BlobRefJson> {
  const cid = formatCid(cidForRaw(bytes));
  const ref: BlobRefJson = {
    $type: BLOB_TYPE,
    ref: { $link: cid },
    mimeType: opts.mimeType,
    size: bytes.length,
  };
  const createdAt = new Date(opts.now).toISOString();
  for (let attempt = 0; attempt < MAX_STORE_ATTEMPTS; attempt++) {
    const existing = await kv.get<BlobMeta>(blobMetaKey(did, cid));
    if (existing.value !== null) {
      // Uploaded again: a fresh upload time, so the sweep (`blob_gc.ts`) does not take it
      // before the record it is for, and a new versionstamp, so a deletion racing this upload
      // fails. When another upload or a deletion changed it meanwhile, look again.
      const touched = await kv.atomic().check(existing)
        .set(existing.key, { ...existing.value, createdAt }).commit();
      if (touched.ok) return { ...ref, mimeType: existing.value.mimeType };
      continue;
    }
    if (await storeChunks(kv, did, cid, bytes, opts.mimeType, createdAt, opts.betweenOps)) {
      return ref;
    }
    // Another upload of the same bytes is storing it: a random pause, so that two uploads do
    // not keep replacing each other's first chunks in step.
    await new Promise((r) => setTimeout(r, (attempt + 1) * (5 + Math.random() * 20)));
  }
  throw new Error(`Storing blob ${cid} failed: other uploads or deletions of it kept interfering`);
}

/**
 * Writes the chunks and then the metadata of a blob; false when, between two operations,
 * another upload of the same bytes or a deletion changed the chunks the first one wrote (the
 * marker key is shared by every upload of the blob, so it cannot tell them apart: the first
 * chunk's versionstamp can). Publishing the metadata then could expose a blob missing chunks.
 */
async function storeChunks(
  kv: Deno.Kv,
  did: string,
  cid: string,
  bytes: Uint8Array,
  mimeType: string,
  createdAt: string,
  betweenOps?: () => Promise<void>,
): Promise<boolean> {
  const chunks = Math.max(1, Math.ceil(bytes.length / CHUNK_BYTES));
  const meta: BlobMeta = { mimeType, size: bytes.length, chunks, createdAt };
  let firstVersion: string | null = null;
  for (let first = 0; first < chunks; first += CHUNKS_PER_OP) {
    const op = kv.atomic();
    const end = Math.min(chunks, first + CHUNKS_PER_OP);
    if (firstVersion !== null) {
      op.check({ key: blobChunkKey(did, cid, 0), versionstamp: firstVersion });
    }
    for (let i = first; i < end; i++) {
      op.set(blobChunkKey(did, cid, i), bytes.slice(i * CHUNK_BYTES, (i + 1) * CHUNK_BYTES));
    }
    if (end < chunks && first === 0) op.set(blobUploadKey(did, cid), { createdAt });
    if (end === chunks) {
      op.set(blobMetaKey(did, cid), meta);
      if (first > 0) op.delete(blobUploadKey(did, cid));
    }
    const res = await op.commit();
    if (!res.ok) return false;
    if (first === 0) {
      firstVersion = res.versionstamp;
      if (end < chunks) await betweenOps?.();
    }
  }
  return true;
}

/** Reads a complete blob, or null when there is none. */
export async function getBlob(
  kv: Deno.Kv,
  did: string,
  cid: string,
): Promise<{ bytes: Uint8Array; mimeType: string } | null> {
  const meta = (await kv.get<BlobMeta>(blobMetaKey(did, cid))).value;
  if (meta === null) return null;
  const bytes = new Uint8Array(meta.size);
  let pos = 0;
  for (let first = 0; first < meta.chunks; first += 10) {
    const keys = [];
    for (let i = first; i < Math.min(meta.chunks, first + 10); i++) {
      keys.push(blobChunkKey(did, cid, i));
    }
    const entries = await kv.getMany<Uint8Array[]>(keys);
    for (const e of entries) {
      if (e.value === null) throw new Error(`Blob ${cid} is missing a chunk`);
      bytes.set(e.value, pos);
      pos += e.value.length;
    }
  }
  if (pos !== meta.size) throw new Error(`Blob ${cid} has ${pos} bytes, expected ${meta.size}`);
  return { bytes, mimeType: meta.mimeType };
}
