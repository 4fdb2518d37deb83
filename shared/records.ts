/**
 * Validation of the `app.social.*` repository records in lex JSON form (spec 2.2-2.5, 2.9-2.10).
 * The account host rejects records that fail (400 `InvalidRecord`); the index skips and counts
 * them. Validation never throws and never changes the record: a valid record is returned as the
 * same object, so unknown embed types survive byte-for-byte.
 *
 * Only the collections {@link hasRecordSchema} names have a schema here. The account host stores
 * records of any other collection without this validation (`validationStatus: "unknown"`,
 * docs/behaviour.md 4.1 rule 14); the index does not index them.
 *
 * Bounds, so hostile input stays cheap: post text at most {@link MAX_POST_GRAPHEMES} graphemes
 * and {@link MAX_POST_BYTES} UTF-8 bytes; display name {@link MAX_DISPLAY_NAME_GRAPHEMES} and
 * description {@link MAX_DESCRIPTION_GRAPHEMES} graphemes (byte bounds: 50 bytes per grapheme,
 * room for the longest emoji ZWJ sequences); at most {@link MAX_IMAGES} images and
 * {@link MAX_LANGS} language tags of at most 64 characters; an embed, of any type, at most
 * {@link MAX_EMBED_JSON_LENGTH} characters as JSON. Bytes are counted before graphemes.
 *
 * @module
 */

import {
  checkBlobRef,
  checkDatetime,
  checkStrongRef,
  checkText,
  type Fields,
  isCidString,
  isPlainObject,
  isRecordUri,
  show,
} from "./_checks.ts";
import { isValidDid } from "./syntax.ts";
import {
  COLLECTION_BLOCK,
  COLLECTION_FOLLOW,
  COLLECTION_LIKE,
  COLLECTION_POST,
  COLLECTION_PROFILE,
  COLLECTION_REPOST,
  EMBED_EXTERNAL,
  EMBED_IMAGES,
  EMBED_RECORD,
  EMBED_RECORD_WITH_MEDIA,
} from "./nsid.ts";

export { countGraphemes } from "./_checks.ts";

/** A strong reference to a record: its AT-URI and CID string (spec 2.9). */
export interface StrongRef {
  uri: string;
  cid: string;
}

/** A blob reference in lex JSON form (spec 2.3, 2.5); `mimeType`/`size` optional when read. */
export interface BlobRef {
  $type?: "blob";
  ref: { $link: string };
  mimeType?: string;
  size?: number;
}

/** `app.social.feed.post` (spec 2.10). `embed` keeps unknown members verbatim (spec 2.2). */
export interface PostRecord {
  $type?: string;
  text: string;
  reply?: { root: StrongRef; parent: StrongRef };
  embed?: { $type: string; [key: string]: unknown };
  /** Optional in the record; the index stores `[]` when absent. */
  langs?: string[];
  createdAt: string;
}

/** `app.social.feed.like`: the liked post. */
export interface LikeRecord {
  $type?: string;
  subject: StrongRef;
  createdAt: string;
}

/** `app.social.feed.repost`: the reposted post. */
export interface RepostRecord {
  $type?: string;
  subject: StrongRef;
  createdAt: string;
}

/** `app.social.graph.follow`: the followed DID. */
export interface FollowRecord {
  $type?: string;
  subject: string;
  createdAt: string;
}

/** `app.social.graph.block`: the blocked DID (spec 2.14). */
export interface BlockRecord {
  $type?: string;
  subject: string;
  createdAt: string;
}

/** `app.social.actor.profile`, rkey `self` (spec 2.5). */
export interface ProfileRecord {
  $type?: string;
  displayName?: string;
  description?: string;
  avatar?: BlobRef;
  banner?: BlobRef;
  createdAt?: string;
}

/** Result of {@link validateRecord}: the record itself (same object), or why it was refused. */
export type RecordValidation =
  | { ok: true; value: Record<string, unknown> }
  | { ok: false; reason: string };

import {
  MAX_DESCRIPTION_GRAPHEMES,
  MAX_DISPLAY_NAME_GRAPHEMES,
  MAX_IMAGES,
  MAX_POST_GRAPHEMES,
} from "./limits.ts";

export { MAX_DESCRIPTION_GRAPHEMES, MAX_DISPLAY_NAME_GRAPHEMES, MAX_IMAGES, MAX_POST_GRAPHEMES };

/** Post text limit in UTF-8 bytes (50 per grapheme); bounds the segmentation work. */
export const MAX_POST_BYTES = 8000;
/**
 * Longest post embed, in characters of its JSON form: room for four images with long alt texts,
 * while one hostile record cannot make every timeline that shows it megabytes long.
 */
export const MAX_EMBED_JSON_LENGTH = 20_000;
/** Most entries in a post's `langs`. */
export const MAX_LANGS = 3;

const MAX_LANG_LENGTH = 64;
const BYTES_PER_GRAPHEME = 50;
const POST_TEXT = { maxGraphemes: MAX_POST_GRAPHEMES, maxBytes: MAX_POST_BYTES };
const DISPLAY_NAME = {
  maxGraphemes: MAX_DISPLAY_NAME_GRAPHEMES,
  maxBytes: MAX_DISPLAY_NAME_GRAPHEMES * BYTES_PER_GRAPHEME,
};
const DESCRIPTION = {
  maxGraphemes: MAX_DESCRIPTION_GRAPHEMES,
  maxBytes: MAX_DESCRIPTION_GRAPHEMES * BYTES_PER_GRAPHEME,
};
type Check = (record: Fields) => string | null;

const CHECKS: ReadonlyMap<string, Check> = new Map<string, Check>([
  [COLLECTION_POST, checkPost],
  [COLLECTION_LIKE, checkSubjectRef],
  [COLLECTION_REPOST, checkSubjectRef],
  [COLLECTION_FOLLOW, checkDidSubject],
  [COLLECTION_BLOCK, checkDidSubject],
  [COLLECTION_PROFILE, checkProfile],
]);

/**
 * Whether `collection` has a schema here (the `app.social.*` records the service writes and
 * indexes), so {@link validateRecord} can check its records.
 *
 * @example
 * ```ts
 * hasRecordSchema("app.social.feed.post"); // true
 * hasRecordSchema("com.example.thing"); // false
 * ```
 */
export function hasRecordSchema(collection: string): boolean {
  return CHECKS.has(collection);
}

/**
 * Validates a record of `collection` in lex JSON form. `$type`, when present, must equal the
 * collection; a collection without a schema ({@link hasRecordSchema}) is refused. Never throws.
 *
 * @example
 * ```ts
 * const r = validateRecord("app.social.graph.follow", {subject: "did:plc:x", createdAt: "2024-01-01T00:00:00Z"});
 * if (!r.ok) console.log(r.reason);
 * ```
 */
export function validateRecord(collection: string, record: unknown): RecordValidation {
  const check = CHECKS.get(collection);
  if (!check) return { ok: false, reason: `Unknown collection: ${show(collection)}` };
  if (!isPlainObject(record)) {
    return { ok: false, reason: `Record is not an object: ${show(record)}` };
  }
  try {
    const reason = checkRecordType(collection, record) ?? check(record);
    return reason === null ? { ok: true, value: record } : { ok: false, reason };
  } catch (e) {
    // A getter or proxy in hostile input; it must not escape.
    return { ok: false, reason: `Record could not be read: ${show(String(e))}` };
  }
}

/**
 * The rule every record follows, whatever its collection (with or without a schema): `$type`,
 * when present, equals the collection. Returns why not, or null.
 *
 * @example
 * ```ts
 * checkRecordType("com.example.thing", { $type: "com.example.other" }); // 'Record $type is not ...'
 * ```
 */
export function checkRecordType(
  collection: string,
  record: Record<string, unknown>,
): string | null {
  if (record.$type === undefined || record.$type === collection) return null;
  return `Record $type is not ${collection}: ${show(record.$type)}`;
}

function checkPost(r: Fields): string | null {
  return checkText("text", r.text, POST_TEXT) ??
    optional(r.reply, checkReply) ??
    optional(r.embed, checkEmbed) ??
    optional(r.langs, checkLangs) ??
    checkDatetime("createdAt", r.createdAt);
}

function checkSubjectRef(r: Fields): string | null {
  return checkStrongRef("subject", r.subject) ?? checkDatetime("createdAt", r.createdAt);
}

function checkDidSubject(r: Fields): string | null {
  if (typeof r.subject !== "string" || !isValidDid(r.subject)) {
    return `Invalid subject: ${show(r.subject)}`;
  }
  return checkDatetime("createdAt", r.createdAt);
}

function checkProfile(r: Fields): string | null {
  return optional(r.displayName, (v) => checkText("displayName", v, DISPLAY_NAME)) ??
    optional(r.description, (v) => checkText("description", v, DESCRIPTION)) ??
    optional(r.avatar, (v) => checkBlobRef("avatar", v)) ??
    optional(r.banner, (v) => checkBlobRef("banner", v)) ??
    optional(r.createdAt, (v) => checkDatetime("createdAt", v));
}

function checkReply(reply: unknown): string | null {
  if (!isPlainObject(reply)) return `Invalid reply: ${show(reply)}`;
  return checkStrongRef("reply.root", reply.root) ?? checkStrongRef("reply.parent", reply.parent);
}

function checkLangs(langs: unknown): string | null {
  if (!Array.isArray(langs)) return `Invalid langs: ${show(langs)}`;
  if (langs.length > MAX_LANGS) return `Too many langs: ${langs.length}`;
  for (const lang of langs) {
    if (typeof lang !== "string" || lang === "" || lang.length > MAX_LANG_LENGTH) {
      return `Invalid langs entry: ${show(lang)}`;
    }
  }
  return null;
}

function checkEmbed(embed: unknown): string | null {
  if (!isPlainObject(embed) || typeof embed.$type !== "string" || embed.$type === "") {
    return `Invalid embed: ${show(embed)}`;
  }
  // The shape first: it bounds the known variants' arrays before the whole embed is serialised.
  const shape = checkEmbedShape(embed);
  if (shape !== null) return shape;
  const length = JSON.stringify(embed).length;
  if (length > MAX_EMBED_JSON_LENGTH) {
    return `Embed is ${length} characters as JSON, over the ${MAX_EMBED_JSON_LENGTH} limit`;
  }
  return null;
}

function checkEmbedShape(embed: Fields): string | null {
  switch (embed.$type) {
    case EMBED_IMAGES:
      return checkImages("embed.images", embed.images);
    case EMBED_EXTERNAL:
      return checkExternal("embed.external", embed.external);
    case EMBED_RECORD:
      return checkEmbeddedRecord(embed.record);
    case EMBED_RECORD_WITH_MEDIA:
      return checkEmbeddedRecord(embed.record) ?? checkMedia(embed.media);
    default:
      return null; // unknown variants are kept verbatim (spec 2.2)
  }
}

function checkImages(field: string, images: unknown): string | null {
  if (!Array.isArray(images) || images.length === 0) return `Invalid ${field}: ${show(images)}`;
  if (images.length > MAX_IMAGES) return `Too many ${field}: ${images.length}`;
  for (let i = 0; i < images.length; i++) {
    const image: unknown = images[i];
    if (!isPlainObject(image)) return `Invalid ${field}[${i}]: ${show(image)}`;
    if (image.alt !== undefined && typeof image.alt !== "string") {
      return `Invalid ${field}[${i}].alt: ${show(image.alt)}`;
    }
    const bad = checkBlobRef(`${field}[${i}].image`, image.image);
    if (bad !== null) return bad;
  }
  return null;
}

function checkExternal(field: string, external: unknown): string | null {
  if (!isPlainObject(external)) return `Invalid ${field}: ${show(external)}`;
  if (typeof external.uri !== "string" || external.uri === "") {
    return `Invalid ${field}.uri: ${show(external.uri)}`;
  }
  for (const key of ["title", "description"]) {
    const value = external[key];
    if (value !== undefined && typeof value !== "string") {
      return `Invalid ${field}.${key}: ${show(value)}`;
    }
  }
  // The URIs end up as links and images in browsers: `javascript:`, `data:` and the like are
  // active content, so only web URLs pass. The thumb is a URL string (spec 2.2) or, as in the
  // atproto lexicon, an image blob.
  return checkWebUrl(`${field}.uri`, external.uri) ??
    optional(
      external.thumb,
      (v) =>
        typeof v === "string"
          ? checkWebUrl(`${field}.thumb`, v)
          : checkBlobRef(`${field}.thumb`, v),
    );
}

/**
 * An absolute `http:` or `https:` URL, spelled with its scheme and `//` from the first
 * character: what a browser may follow. Leading blanks, control characters inside the scheme
 * (browsers drop them) and scheme-relative or slash-less forms are refused, not repaired.
 */
const WEB_URL_START = /^https?:\/\//i;

function checkWebUrl(field: string, value: string): string | null {
  if (WEB_URL_START.test(value) && URL.canParse(value)) return null;
  return `Invalid ${field}, not an http or https URL: ${show(value)}`;
}

function checkEmbeddedRecord(record: unknown): string | null {
  if (!isPlainObject(record)) return `Invalid embed.record: ${show(record)}`;
  if (!isRecordUri(record.uri)) return `Invalid embed.record.uri: ${show(record.uri)}`;
  if (record.cid !== undefined && !isCidString(record.cid)) {
    return `Invalid embed.record.cid: ${show(record.cid)}`;
  }
  return null;
}

function checkMedia(media: unknown): string | null {
  if (!isPlainObject(media)) return `Invalid embed.media: ${show(media)}`;
  return optional(media.images, (v) => checkImages("embed.media.images", v)) ??
    optional(media.external, (v) => checkExternal("embed.media.external", v));
}

function optional(value: unknown, check: (value: unknown) => string | null): string | null {
  return value === undefined ? null : check(value);
}
