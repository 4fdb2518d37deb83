/**
 * Blob references of records (spec 2.3): a record may only reference a blob its account
 * uploaded, with the MIME type and size the upload stored, and image fields (`avatar`, `banner`,
 * `image`, `thumb`) only images. Refused as the reference account host does: 400 `BlobNotFound`,
 * `InvalidMimeType`, or `InvalidRecord` for a size that is not the stored one.
 *
 * @module
 */

import { CID, formatCid } from "../../shared/cid.ts";
import { BLOB_TYPE } from "../../shared/nsid.ts";
import { hasRecordSchema } from "../../shared/records.ts";
import { blobMetaKey } from "../store/keys.ts";
import { RepoError } from "../repo/errors.ts";
import type { BlobMeta } from "./blob_store.ts";

/** A blob reference found in a record (IPLD form). */
export interface FoundBlob {
  /** The blob CID string. */
  cid: string;
  /** "" when the reference has none. */
  mimeType: string;
  /** -1 when the reference has none. */
  size: number;
  /** Where in the record, for messages (`avatar`, `embed.images[0].image`). */
  path: string;
  /** The field must hold an image (an image field of a record with a schema). */
  image: boolean;
}

/** A referenced blob's stored metadata with its versionstamp (for the commit's check). */
export interface CheckedBlob {
  key: Deno.KvKey;
  versionstamp: string;
  meta: BlobMeta;
}

/** Fields whose blobs must be images (the lexicons' `accept: ["image/*"]`). */
const IMAGE_FIELDS = new Set(["avatar", "banner", "image", "thumb"]);
/** `getMany` reads at most 10 keys. */
const READ_BATCH = 10;

/**
 * Every blob reference in a record of `collection` (IPLD form: refs are CIDs), in document order.
 * In a collection without a schema here (docs/behaviour.md 4.1 rule 14), as on the reference
 * account host, only objects typed `$type: "blob"` are blobs (an untyped `{ref}` may be anything
 * in another application's record), and no field must hold an image.
 */
export function findBlobRefs(collection: string, value: unknown): FoundBlob[] {
  const found: FoundBlob[] = [];
  walk(value, "", { found, schemaless: !hasRecordSchema(collection) });
  return found;
}

function walk(
  value: unknown,
  path: string,
  into: { found: FoundBlob[]; schemaless: boolean },
): void {
  if (value === null || typeof value !== "object" || value instanceof Uint8Array) return;
  if (value instanceof CID) return;
  if (Array.isArray(value)) {
    value.forEach((v, i) => walk(v, `${path}[${i}]`, into));
    return;
  }
  const obj = value as Record<string, unknown>;
  // The validation of a record with a schema also accepts a reference without `$type` (spec 2.3
  // gives it as optional when read): it is a blob all the same, checked and indexed like a typed
  // one.
  const typed = obj.$type === BLOB_TYPE || (obj.$type === undefined && !into.schemaless);
  if (obj.ref instanceof CID && typed) {
    into.found.push({
      cid: formatCid(obj.ref),
      mimeType: typeof obj.mimeType === "string" ? obj.mimeType : "",
      size: typeof obj.size === "number" ? obj.size : -1,
      path,
      image: !into.schemaless && IMAGE_FIELDS.has(path.slice(path.lastIndexOf(".") + 1)),
    });
    return;
  }
  for (const [k, v] of Object.entries(obj)) walk(v, path === "" ? k : `${path}.${k}`, into);
}

/**
 * Checks that every blob in `blobs` was uploaded by `did` with the referenced MIME type and size,
 * and that image fields reference images. Returns each distinct blob's stored metadata and
 * versionstamp, which the commit checks so that a blob deleted meanwhile cannot be referenced.
 *
 * @throws {RepoError} `BlobNotFound`, `InvalidMimeType`, `InvalidRecord`.
 */
export async function checkBlobRefs(
  kv: Deno.Kv,
  did: string,
  blobs: readonly FoundBlob[],
): Promise<Map<string, CheckedBlob>> {
  const cids = [...new Set(blobs.map((b) => b.cid))];
  const checked = new Map<string, CheckedBlob>();
  for (let i = 0; i < cids.length; i += READ_BATCH) {
    const keys = cids.slice(i, i + READ_BATCH).map((cid) => blobMetaKey(did, cid));
    const entries = await kv.getMany<BlobMeta[]>(keys);
    for (const entry of entries) {
      if (entry.value === null || entry.versionstamp === null) continue;
      checked.set(entry.key[2] as string, {
        key: entry.key,
        versionstamp: entry.versionstamp,
        meta: entry.value,
      });
    }
  }
  for (const blob of blobs) {
    const stored = checked.get(blob.cid)?.meta;
    if (stored === undefined) {
      throw new RepoError("BlobNotFound", `Could not find blob ${blob.cid} (at ${blob.path})`);
    }
    if (blob.mimeType === "" || blob.size < 0) {
      throw new RepoError(
        "InvalidRecord",
        `Blob ${blob.cid} at ${blob.path} needs the mimeType and size of its upload`,
      );
    }
    if (blob.mimeType !== stored.mimeType) {
      throw new RepoError(
        "InvalidMimeType",
        `Blob ${blob.cid} at ${blob.path} was uploaded as ${stored.mimeType}, not ${blob.mimeType}`,
      );
    }
    if (blob.size !== stored.size) {
      throw new RepoError(
        "InvalidRecord",
        `Blob ${blob.cid} at ${blob.path} is ${stored.size} bytes, not ${blob.size}`,
      );
    }
    if (blob.image && !stored.mimeType.startsWith("image/")) {
      throw new RepoError(
        "InvalidMimeType",
        `Blob ${blob.cid} at ${blob.path} must be an image, not ${stored.mimeType}`,
      );
    }
  }
  return checked;
}
