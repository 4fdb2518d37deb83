/**
 * Post keys: the (author DID, record key) pair that names a post in the index's tables, read from
 * a post's AT-URI. The write path (likes, reposts, replies) and the read side both use it.
 *
 * @module
 */

import { COLLECTION_POST } from "../../shared/nsid.ts";

/** A post named by its author's DID and its record key. */
export interface PostKey {
  readonly did: string;
  readonly rkey: string;
}

const POST_URI_INFIX = `/${COLLECTION_POST}/`;

/**
 * The (DID, rkey) of a post URI `at://<did>/app.social.feed.post/<rkey>`; null for any other URI
 * (another collection, a handle authority), which names no post the index can hold.
 */
export function postKeyOf(uri: string): PostKey | null {
  if (!uri.startsWith("at://did:")) return null;
  const end = uri.indexOf("/", 5);
  if (end === -1 || !uri.startsWith(POST_URI_INFIX, end)) return null;
  const rkey = uri.slice(end + POST_URI_INFIX.length);
  if (rkey === "" || rkey.includes("/")) return null;
  return { did: uri.slice(5, end), rkey };
}
