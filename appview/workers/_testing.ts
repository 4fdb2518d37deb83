/**
 * Test helpers for the index's workers: DNS answers for handle verification, where the real DNS
 * does not run in tests.
 *
 * @module
 */

import type { TxtLookup } from "./did_resolver.ts";

/**
 * A {@link TxtLookup} answering `_atproto.<handle>` with one `did=<did>` record, the DID taken
 * from `didOf(handle)` (a map or a function); other names have no TXT record.
 */
export function atprotoTxtRecords(
  didOf: Readonly<Record<string, string>> | ((handle: string) => string | undefined),
): TxtLookup {
  const find = typeof didOf === "function" ? didOf : (handle: string) => didOf[handle];
  return (name) => {
    const did = name.startsWith("_atproto.") ? find(name.slice("_atproto.".length)) : undefined;
    return Promise.resolve(did === undefined ? [] : [[`did=${did}`]]);
  };
}
