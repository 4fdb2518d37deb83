/**
 * Placeholder handles: what the index shows for an author whose handle is not known yet
 * (spec 2.1, 2.7): a truncated DID with an ellipsis and no leading `@`. A placeholder always
 * starts with `did:` (a real handle cannot hold a colon), which is what the partial index
 * `posts_unknown_handle` and `PLACEHOLDER_HANDLE_SQL` rely on.
 *
 * @module
 */

/** Characters of the DID kept in a placeholder (`did:plc:` plus ten). */
export const PLACEHOLDER_DID_CHARS = 18;
/** The ellipsis that ends every placeholder. */
export const PLACEHOLDER_ELLIPSIS = "\u2026";

/**
 * Returns the placeholder handle of `did`: its first {@link PLACEHOLDER_DID_CHARS} characters and
 * an ellipsis. Always truncated (even a short DID gets the ellipsis), so a placeholder is never
 * mistaken for a real handle.
 *
 * @example
 * ```ts
 * placeholderHandle("did:plc:abcdefghijklmnopqrstuvwx"); // "did:plc:abcdefghij…"
 * ```
 */
export function placeholderHandle(did: string): string {
  return did.slice(0, PLACEHOLDER_DID_CHARS) + PLACEHOLDER_ELLIPSIS;
}

/** Reports whether `handle` is a placeholder made by {@link placeholderHandle}. */
export function isPlaceholderHandle(handle: string): boolean {
  return handle.startsWith("did:") && handle.endsWith(PLACEHOLDER_ELLIPSIS);
}
