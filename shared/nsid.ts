/**
 * Protocol identifiers used by both servers: record collections of the `app.social.*`
 * namespace and the `$type` values of known embeds. Defined once here; never repeat the literal.
 *
 * @module
 */

/** Post record collection (spec 2.10). */
export const COLLECTION_POST = "app.social.feed.post";
/** Like record collection: a strong reference to the liked post. */
export const COLLECTION_LIKE = "app.social.feed.like";
/** Repost record collection: a strong reference to the reposted post. */
export const COLLECTION_REPOST = "app.social.feed.repost";
/** Follow record collection: the followed DID in `subject`. */
export const COLLECTION_FOLLOW = "app.social.graph.follow";
/**
 * Block record collection: the blocked DID in `subject` (spec 2.14). The index hides each of the
 * two accounts' content from the other (spec 4.2 rule 10).
 */
export const COLLECTION_BLOCK = "app.social.graph.block";
/** Profile record collection; the single record has rkey {@link PROFILE_RKEY}. */
export const COLLECTION_PROFILE = "app.social.actor.profile";
/** The record key of the one profile record of a repository. */
export const PROFILE_RKEY = "self";

/** Every collection the service writes and indexes. */
export const SOCIAL_COLLECTIONS: readonly string[] = Object.freeze([
  COLLECTION_POST,
  COLLECTION_LIKE,
  COLLECTION_REPOST,
  COLLECTION_FOLLOW,
  COLLECTION_BLOCK,
  COLLECTION_PROFILE,
]);

/** Jetstream `wantedCollections` filter for the whole namespace. */
export const SOCIAL_COLLECTION_GLOB = "app.social.*";

/** Known embed variants (spec 2.2). Unknown `$type` values are kept verbatim. */
export const EMBED_IMAGES = "app.social.embed.images";
export const EMBED_EXTERNAL = "app.social.embed.external";
export const EMBED_RECORD = "app.social.embed.record";
export const EMBED_RECORD_WITH_MEDIA = "app.social.embed.recordWithMedia";

/** `$type` of a blob reference (spec 2.3). */
export const BLOB_TYPE = "blob";
