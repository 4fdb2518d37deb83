/**
 * Fitting an image into the account host's blob limit in the browser: phone photos are larger
 * than 1 MiB, so an image over the limit (or of a type the servers do not show) is drawn on a
 * canvas and re-encoded as JPEG, first at lower quality, then smaller, until it fits.
 *
 * @module
 */

import { MAX_BLOB_BYTES } from "../../shared/limits.ts";

/** An image ready to upload. */
export interface FittedImage {
  blob: Blob;
  mimeType: string;
  width: number;
  height: number;
  /** Bytes of the file as chosen. */
  originalBytes: number;
  /** Whether it was re-encoded to fit. */
  scaled: boolean;
}

/** The image could not be read or made to fit; the message says which, for the member. */
export class ImageFitError extends Error {
  override name = "ImageFitError";
}

const KEPT_TYPES = new Set(["image/jpeg", "image/png", "image/webp", "image/gif"]);
/** Longest side a scaled photo starts from: more than any timeline shows. */
const START_SIDE = 2048;
const QUALITIES = [0.86, 0.75, 0.62];
const SHRINK = 0.75;
const MIN_SIDE = 160;

/** Fits `file` under `maxBytes` (the blob limit by default). */
export async function fitImage(file: Blob, maxBytes = MAX_BLOB_BYTES): Promise<FittedImage> {
  let bitmap: ImageBitmap;
  try {
    bitmap = await createImageBitmap(file);
  } catch {
    throw new ImageFitError("This file is not an image the browser can read");
  }
  const { width, height } = bitmap;
  try {
    if (file.size <= maxBytes && KEPT_TYPES.has(file.type)) {
      return {
        blob: file,
        mimeType: file.type,
        width,
        height,
        originalBytes: file.size,
        scaled: false,
      };
    }
    let scale = Math.min(1, START_SIDE / Math.max(width, height));
    while (Math.max(width, height) * scale >= MIN_SIDE) {
      const w = Math.max(1, Math.round(width * scale));
      const h = Math.max(1, Math.round(height * scale));
      const canvas = new OffscreenCanvas(w, h);
      const g = canvas.getContext("2d");
      if (g === null) throw new ImageFitError("This browser cannot scale images");
      g.fillStyle = "#fff"; // JPEG has no transparency
      g.fillRect(0, 0, w, h);
      g.drawImage(bitmap, 0, 0, w, h);
      for (const quality of QUALITIES) {
        const blob = await canvas.convertToBlob({ type: "image/jpeg", quality });
        if (blob.size <= maxBytes) {
          return {
            blob,
            mimeType: "image/jpeg",
            width: w,
            height: h,
            originalBytes: file.size,
            scaled: true,
          };
        }
      }
      scale *= SHRINK;
    }
    throw new ImageFitError(`This image cannot be made smaller than ${formatBytes(maxBytes)}`);
  } finally {
    bitmap.close();
  }
}

/** `bytes` as a member reads it: "1.4 MB", "820 KB". */
export function formatBytes(bytes: number): string {
  if (bytes >= 1_000_000) return `${(bytes / 1_000_000).toFixed(1)} MB`;
  return `${Math.max(1, Math.round(bytes / 1000))} KB`;
}
