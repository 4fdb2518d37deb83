/**
 * Record AT-URIs: `at://<authority>/<collection>/<rkey>` (docs/protocol.md 11.4).
 *
 * @module
 */

import {
  isValidAtUri,
  isValidDid,
  isValidHandle,
  isValidNsid,
  isValidRecordKey,
} from "./syntax.ts";

/** The three parts of a record AT-URI. */
export interface AtUri {
  /** DID (preferred in stored data) or handle. */
  authority: string;
  /** Collection NSID, e.g. `app.social.feed.post`. */
  collection: string;
  /** Record key, usually a TID. */
  rkey: string;
}

/** Thrown when a string is not a record AT-URI or its parts are invalid. */
export class AtUriError extends Error {
  /** Always `"AtUriError"`. */
  override readonly name = "AtUriError";
}

const AT_URI_PREFIX = "at://";

/**
 * Parses a record AT-URI. All three parts are required and each must be valid: authority a DID
 * or handle, collection an NSID, rkey a record key. No trailing slash, query or fragment.
 *
 * @example
 * ```ts
 * parseAtUri("at://did:plc:abc/app.social.feed.post/3jzfcijpj2z2a");
 * // { authority: "did:plc:abc", collection: "app.social.feed.post", rkey: "3jzfcijpj2z2a" }
 * ```
 *
 * @throws {AtUriError} naming the value
 */
export function parseAtUri(s: string): AtUri {
  if (typeof s !== "string" || !isValidAtUri(s)) {
    throw new AtUriError(`Invalid AT-URI: ${preview(s)}`);
  }
  const [authority, collection, rkey] = s.slice(AT_URI_PREFIX.length).split("/");
  if (collection === undefined || rkey === undefined) {
    throw new AtUriError(`AT-URI is not a record URI (needs collection and rkey): ${preview(s)}`);
  }
  return { authority, collection, rkey };
}

/**
 * Formats a record AT-URI from its parts, validating each.
 *
 * @example
 * ```ts
 * formatAtUri("did:plc:abc", "app.social.feed.post", "3jzfcijpj2z2a");
 * // "at://did:plc:abc/app.social.feed.post/3jzfcijpj2z2a"
 * ```
 *
 * @throws {AtUriError} naming the invalid part
 */
export function formatAtUri(authority: string, collection: string, rkey: string): string {
  if (!isValidDid(authority) && !isValidHandle(authority)) {
    throw new AtUriError(`Invalid AT-URI authority: ${preview(authority)}`);
  }
  if (!isValidNsid(collection)) {
    throw new AtUriError(`Invalid AT-URI collection: ${preview(collection)}`);
  }
  if (!isValidRecordKey(rkey)) {
    throw new AtUriError(`Invalid AT-URI record key: ${preview(rkey)}`);
  }
  return `${AT_URI_PREFIX}${authority}/${collection}/${rkey}`;
}

function preview(value: unknown): string {
  const s = typeof value === "string" ? value : String(value);
  return JSON.stringify(s.length > 120 ? s.slice(0, 120) + "..." : s);
}
