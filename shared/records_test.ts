import assert from "node:assert/strict";
import { encodeCbor } from "./cbor.ts";
import { cidForRaw, formatCid } from "./cid.ts";
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
  SOCIAL_COLLECTIONS,
} from "./nsid.ts";
import {
  checkRecordType,
  countGraphemes,
  hasRecordSchema,
  MAX_EMBED_JSON_LENGTH,
  MAX_POST_GRAPHEMES,
  validateRecord,
} from "./records.ts";

const DID = "did:plc:abcdefghijklmnopqrstuvwx";
const POST_URI = `at://${DID}/app.social.feed.post/3jzfcijpj2z2a`;
const POST_CID = "bafyreie5737gdxlw5i64vzichcalba3z2v5n6icifvx5xytvske7mr3hpm";
const BLOB_CID = formatCid(cidForRaw(new Uint8Array([1, 2, 3])));
const NOW = "2024-05-01T12:00:00.000Z";
const FAMILY = "👩‍👩‍👧‍👦";
const REF = { uri: POST_URI, cid: POST_CID };
const BLOB = { $type: "blob", ref: { $link: BLOB_CID }, mimeType: "image/jpeg", size: 1234 };

function post(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { $type: COLLECTION_POST, text: "hello", createdAt: NOW, ...extra };
}

function reasonOf(collection: string, record: unknown): string {
  const result = validateRecord(collection, record);
  if (result.ok) assert.fail(`Expected a refusal for ${Deno.inspect(record, { depth: 2 })}`);
  return result.reason;
}

Deno.test("countGraphemes counts an emoji ZWJ family as one grapheme", () => {
  assert.equal(countGraphemes(FAMILY), 1);
  assert.equal(countGraphemes(`${FAMILY}e\u0301!`), 3);
  assert.equal(countGraphemes(""), 0);
});

Deno.test("validateRecord accepts a post of 160 ZWJ graphemes and refuses 161 (spec 2.10, 8)", () => {
  const ok = validateRecord(COLLECTION_POST, post({ text: FAMILY.repeat(MAX_POST_GRAPHEMES) }));
  assert.equal(ok.ok, true);
  assert.match(
    reasonOf(COLLECTION_POST, post({ text: FAMILY.repeat(MAX_POST_GRAPHEMES + 1) })),
    /^Invalid text, 161 graphemes \(max 160\): "👩/,
  );
});

Deno.test("validateRecord refuses text over the byte bound without segmenting it", () => {
  const reason = reasonOf(COLLECTION_POST, post({ text: "a".repeat(5_000_000) }));
  assert.equal(reason, `Invalid text, more than 8000 UTF-8 bytes: "${"a".repeat(64)}..."`);
  assert.match(
    reasonOf(COLLECTION_POST, post({ text: "\ud800x" })),
    /^Invalid text, lone surrogate/,
  );
  assert.equal(
    reasonOf(COLLECTION_POST, post({ text: "cut\0here" })),
    'Invalid text, contains U+0000: "cut\\u0000here"',
  );
  assert.equal(
    reasonOf(COLLECTION_PROFILE, { displayName: "\0" }),
    'Invalid displayName, contains U+0000: "\\u0000"',
  );
});

Deno.test("validateRecord returns the same record object for a valid post with reply and langs", () => {
  const record = post({ reply: { root: REF, parent: REF }, langs: ["en", "pt-BR"] });
  const result = validateRecord(COLLECTION_POST, record);
  assert.deepEqual(result, { ok: true, value: record });
  assert.equal(result.ok && result.value, record);
  assert.equal(validateRecord(COLLECTION_POST, { text: "", createdAt: NOW }).ok, true);
});

Deno.test("validateRecord keeps an unknown embed $type verbatim, byte for byte (spec 2.2)", () => {
  const embed = {
    $type: "com.example.embed.poll",
    options: [{ label: "yes", votes: 3 }, { label: "no", votes: 0 }],
    nested: { deep: { blob: BLOB, flag: true, none: null } },
  };
  const record = post({ embed });
  const before = encodeCbor(record);
  const result = validateRecord(COLLECTION_POST, record);
  assert.equal(result.ok, true);
  assert.deepEqual(encodeCbor(result.ok ? result.value : null), before);
});

Deno.test("validateRecord checks the shape of the known embed variants (spec 2.2)", () => {
  const valid = [
    { $type: EMBED_IMAGES, images: [{ alt: "a cat", image: BLOB }] },
    { $type: EMBED_IMAGES, images: [{ alt: "", image: { ref: { $link: BLOB_CID } } }] },
    { $type: EMBED_EXTERNAL, external: { uri: "https://example.com", title: "t" } },
    { $type: EMBED_RECORD, record: { uri: POST_URI } },
    { $type: EMBED_RECORD, record: { uri: POST_URI, cid: POST_CID, author: { did: DID } } },
    { $type: EMBED_RECORD_WITH_MEDIA, record: REF, media: { images: [{ image: BLOB }] } },
  ];
  for (const embed of valid) {
    assert.equal(validateRecord(COLLECTION_POST, post({ embed })).ok, true, JSON.stringify(embed));
  }
  const image = { alt: "", image: BLOB };
  const invalid: [unknown, string][] = [
    [{ $type: EMBED_IMAGES, images: [] }, "Invalid embed.images: an array of 0 items"],
    [{ $type: EMBED_IMAGES, images: Array(5).fill(image) }, "Too many embed.images: 5"],
    [{ $type: EMBED_IMAGES, images: Array(1e6).fill(image) }, "Too many embed.images: 1000000"],
    [
      { $type: EMBED_IMAGES, images: [{ image: { ref: { $link: "nope" } } }] },
      "Invalid embed.images[0].image.ref: an object without the expected members",
    ],
    [{ $type: EMBED_IMAGES, images: [{ alt: 3, image: BLOB }] }, "Invalid embed.images[0].alt: 3"],
    [{ $type: EMBED_EXTERNAL, external: { uri: 7 } }, "Invalid embed.external.uri: 7"],
    [
      { $type: EMBED_RECORD, record: { uri: "https://x" } },
      'Invalid embed.record.uri: "https://x"',
    ],
    [{ $type: EMBED_RECORD, record: { uri: POST_URI, cid: "x" } }, 'Invalid embed.record.cid: "x"'],
    [{ $type: EMBED_RECORD_WITH_MEDIA, record: REF, media: 1 }, "Invalid embed.media: 1"],
    [{ images: [] }, "Invalid embed: an object without the expected members"],
    ["embed", 'Invalid embed: "embed"'],
  ];
  for (const [embed, reason] of invalid) {
    assert.equal(reasonOf(COLLECTION_POST, post({ embed })), reason);
  }
});

Deno.test("validateRecord refuses external embed URIs that are not http or https, naming the field (issue 36)", () => {
  const external = (x: Record<string, unknown>) => ({ $type: EMBED_EXTERNAL, external: x });
  const withMedia = (x: Record<string, unknown>) => ({
    $type: EMBED_RECORD_WITH_MEDIA,
    record: REF,
    media: { external: x },
  });
  const valid = [
    external({ uri: "http://example.com" }),
    external({ uri: "HTTPS://Example.com/a?b=1#c", thumb: "https://cdn.example.com/t.jpg" }),
    external({ uri: "https://example.com", thumb: BLOB }),
    withMedia({ uri: "https://example.com/page", thumb: "http://cdn.example.com/t.png" }),
  ];
  for (const embed of valid) {
    assert.equal(validateRecord(COLLECTION_POST, post({ embed })).ok, true, JSON.stringify(embed));
  }
  const notWeb = "not an http or https URL";
  const invalid: [unknown, string][] = [
    [
      external({ uri: "javascript:alert(1)" }),
      `Invalid embed.external.uri, ${notWeb}: "javascript:alert(1)"`,
    ],
    [
      external({ uri: "JavaScript:alert(1)" }),
      `Invalid embed.external.uri, ${notWeb}: "JavaScript:alert(1)"`,
    ],
    [
      external({ uri: " javascript:alert(1)" }),
      `Invalid embed.external.uri, ${notWeb}: " javascript:alert(1)"`,
    ],
    [
      external({ uri: "java\tscript:alert(1)" }),
      `Invalid embed.external.uri, ${notWeb}: "java\\tscript:alert(1)"`,
    ],
    [
      external({ uri: "data:text/html,<script>alert(1)</script>" }),
      `Invalid embed.external.uri, ${notWeb}: "data:text/html,<script>alert(1)</script>"`,
    ],
    [
      external({ uri: "vbscript:msgbox(1)" }),
      `Invalid embed.external.uri, ${notWeb}: "vbscript:msgbox(1)"`,
    ],
    [
      external({ uri: "file:///etc/passwd" }),
      `Invalid embed.external.uri, ${notWeb}: "file:///etc/passwd"`,
    ],
    [
      external({ uri: "//evil.example/x" }),
      `Invalid embed.external.uri, ${notWeb}: "//evil.example/x"`,
    ],
    [external({ uri: "https://" }), `Invalid embed.external.uri, ${notWeb}: "https://"`],
    [
      external({ uri: "https:evil.example" }),
      `Invalid embed.external.uri, ${notWeb}: "https:evil.example"`,
    ],
    [
      external({ uri: "https://example.com", thumb: "javascript:alert(1)" }),
      `Invalid embed.external.thumb, ${notWeb}: "javascript:alert(1)"`,
    ],
    [external({ uri: "https://example.com", thumb: 5 }), "Invalid embed.external.thumb: 5"],
    [
      withMedia({ uri: "javascript:alert(1)" }),
      `Invalid embed.media.external.uri, ${notWeb}: "javascript:alert(1)"`,
    ],
    [
      withMedia({ uri: "https://example.com", thumb: "data:image/svg+xml,<svg/>" }),
      `Invalid embed.media.external.thumb, ${notWeb}: "data:image/svg+xml,<svg/>"`,
    ],
  ];
  for (const [embed, reason] of invalid) {
    assert.equal(reasonOf(COLLECTION_POST, post({ embed })), reason);
  }
});

Deno.test("validateRecord bounds an embed of any type by its JSON length (spec 2.2)", () => {
  const limit = MAX_EMBED_JSON_LENGTH;
  // {"$type":"com.example.big","pad":"…"} is 36 characters around the padding.
  const unknown = (pad: number) => ({ $type: "com.example.big", pad: "x".repeat(pad) });
  assert.equal(JSON.stringify(unknown(limit - 36)).length, limit);
  assert.equal(validateRecord(COLLECTION_POST, post({ embed: unknown(limit - 36) })).ok, true);
  assert.equal(
    reasonOf(COLLECTION_POST, post({ embed: unknown(limit - 35) })),
    `Embed is ${limit + 1} characters as JSON, over the ${limit} limit`,
  );
  const longAlt = { $type: EMBED_IMAGES, images: [{ alt: "a".repeat(limit), image: BLOB }] };
  assert.match(reasonOf(COLLECTION_POST, post({ embed: longAlt })), /^Embed is \d+ char/);
  const longTitle = {
    $type: EMBED_EXTERNAL,
    external: { uri: "https://e.x", title: "t".repeat(limit) },
  };
  assert.match(reasonOf(COLLECTION_POST, post({ embed: longTitle })), /^Embed is \d+ char/);
});

Deno.test("validateRecord names the field and value of a bad post", () => {
  const cases: [Record<string, unknown>, string][] = [
    [{ text: 5, createdAt: NOW }, "Invalid text: 5"],
    [{ text: "hi" }, "Invalid createdAt: undefined"],
    [post({ createdAt: "yesterday" }), 'Invalid createdAt: "yesterday"'],
    [post({ reply: { root: REF } }), "Invalid reply.parent: undefined"],
    [
      post({ reply: { root: REF, parent: { ...REF, uri: "at://x" } } }),
      'Invalid reply.parent.uri: "at://x"',
    ],
    [
      post({ reply: { root: { uri: POST_URI, cid: 1 }, parent: REF } }),
      "Invalid reply.root.cid: 1",
    ],
    [post({ langs: "en" }), 'Invalid langs: "en"'],
    [post({ langs: ["en", "de", "fr", "es"] }), "Too many langs: 4"],
    [post({ langs: [""] }), 'Invalid langs entry: ""'],
    [
      post({ $type: COLLECTION_LIKE }),
      `Record $type is not ${COLLECTION_POST}: "${COLLECTION_LIKE}"`,
    ],
  ];
  for (const [record, reason] of cases) assert.equal(reasonOf(COLLECTION_POST, record), reason);
});

Deno.test("validateRecord checks likes, reposts and follows (spec 2.14)", () => {
  for (const collection of [COLLECTION_LIKE, COLLECTION_REPOST]) {
    assert.equal(validateRecord(collection, { subject: REF, createdAt: NOW }).ok, true);
    assert.equal(
      reasonOf(collection, { subject: DID, createdAt: NOW }),
      `Invalid subject: "${DID}"`,
    );
    assert.equal(reasonOf(collection, { subject: REF }), "Invalid createdAt: undefined");
  }
  assert.equal(validateRecord(COLLECTION_FOLLOW, { subject: DID, createdAt: NOW }).ok, true);
  assert.equal(
    reasonOf(COLLECTION_FOLLOW, { subject: "alice.example.com", createdAt: NOW }),
    'Invalid subject: "alice.example.com"',
  );
});

Deno.test("validateRecord checks blocks: a DID subject and a datetime (spec 2.14)", () => {
  assert.equal(validateRecord(COLLECTION_BLOCK, { subject: DID, createdAt: NOW }).ok, true);
  assert.equal(
    reasonOf(COLLECTION_BLOCK, { subject: REF, createdAt: NOW }),
    "Invalid subject: an object without the expected members",
  );
  assert.equal(reasonOf(COLLECTION_BLOCK, { subject: DID }), "Invalid createdAt: undefined");
  assert.equal(
    reasonOf(COLLECTION_BLOCK, { $type: COLLECTION_FOLLOW, subject: DID, createdAt: NOW }),
    `Record $type is not ${COLLECTION_BLOCK}: "${COLLECTION_FOLLOW}"`,
  );
});

Deno.test("validateRecord checks profile names and blob refs (spec 2.5)", () => {
  const full = {
    $type: COLLECTION_PROFILE,
    displayName: FAMILY.repeat(64),
    description: "x".repeat(256),
    avatar: BLOB,
    banner: { ref: { $link: BLOB_CID } },
  };
  assert.equal(validateRecord(COLLECTION_PROFILE, full).ok, true);
  assert.equal(validateRecord(COLLECTION_PROFILE, {}).ok, true);
  const cases: [Record<string, unknown>, string][] = [
    [
      { displayName: FAMILY.repeat(65) },
      `Invalid displayName, 65 graphemes (max 64): "${FAMILY.repeat(6).slice(0, 64)}..."`,
    ],
    [
      { description: "x".repeat(257) },
      `Invalid description, 257 graphemes (max 256): "${"x".repeat(64)}..."`,
    ],
    [{ avatar: { ...BLOB, $type: "image" } }, 'Invalid avatar.$type: "image"'],
    [{ avatar: { cid: BLOB_CID, mimeType: "image/png" } }, "Invalid avatar.ref: undefined"],
    [{ banner: { ...BLOB, size: -1 } }, "Invalid banner.size: -1"],
    [{ banner: { ...BLOB, mimeType: "" } }, 'Invalid banner.mimeType: ""'],
  ];
  for (const [record, reason] of cases) assert.equal(reasonOf(COLLECTION_PROFILE, record), reason);
});

Deno.test("validateRecord refuses unknown collections and hostile values without throwing", () => {
  assert.deepEqual(validateRecord("app.social.feed.poll", post()), {
    ok: false,
    reason: 'Unknown collection: "app.social.feed.poll"',
  });
  const hostile: unknown[] = [null, undefined, 1, "post", [post()], new Uint8Array(3), new Map()];
  for (const value of hostile) {
    assert.match(reasonOf(COLLECTION_POST, value), /^Record is not an object: /);
  }
  const trap = Object.defineProperty({ createdAt: NOW }, "text", {
    enumerable: true,
    get() {
      throw new TypeError("boom");
    },
  });
  assert.equal(reasonOf(COLLECTION_POST, trap), 'Record could not be read: "TypeError: boom"');
  let deep: Record<string, unknown> = { $type: "x.y.z" };
  for (let i = 0; i < 100_000; i++) deep = { $type: "x.y.z", inner: deep };
  assert.equal(
    reasonOf(COLLECTION_POST, post({ embed: deep })),
    "Embed is 2600017 characters as JSON, over the 20000 limit",
  );
});

Deno.test("hasRecordSchema names the app.social collections; checkRecordType holds for any collection", () => {
  for (const c of SOCIAL_COLLECTIONS) assert.equal(hasRecordSchema(c), true, c);
  for (const c of ["com.example.thing", "app.social.graph.list", "app.bsky.feed.post"]) {
    assert.equal(hasRecordSchema(c), false, c);
  }
  assert.equal(checkRecordType("com.example.thing", {}), null);
  assert.equal(checkRecordType("com.example.thing", { $type: "com.example.thing" }), null);
  assert.equal(
    checkRecordType("com.example.thing", { $type: "com.example.other" }),
    'Record $type is not com.example.thing: "com.example.other"',
  );
  assert.equal(
    checkRecordType("com.example.thing", { $type: 7 }),
    "Record $type is not com.example.thing: 7",
  );
});
