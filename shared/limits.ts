/**
 * The limits a client checks before it sends (and the servers enforce): post and profile text
 * in grapheme clusters, images per post, blob bytes. A module with no imports, so the browser
 * bundle takes only these numbers.
 *
 * @module
 */

/** Post text limit in grapheme clusters (spec 8; docs/behaviour.md 10.10). */
export const MAX_POST_GRAPHEMES = 160;
/** Profile display name limit in grapheme clusters. */
export const MAX_DISPLAY_NAME_GRAPHEMES = 64;
/** Profile description limit in grapheme clusters. */
export const MAX_DESCRIPTION_GRAPHEMES = 256;
/** Most images in an images embed. */
export const MAX_IMAGES = 4;
/** Largest blob `uploadBlob` takes, in bytes (spec 4.1 rule 4). */
export const MAX_BLOB_BYTES = 1024 * 1024;
