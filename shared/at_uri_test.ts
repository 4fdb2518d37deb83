// Record AT-URIs (docs/protocol.md 11.4).
import assert from "node:assert/strict";
import { AtUriError, formatAtUri, parseAtUri } from "./at_uri.ts";
import { COLLECTION_POST, COLLECTION_PROFILE, PROFILE_RKEY } from "./nsid.ts";

const DID = "did:plc:7iza6de2dwap2sbkpav7c6c6";

Deno.test("parseAtUri splits a record URI into authority, collection and rkey", () => {
  assert.deepEqual(parseAtUri(`at://${DID}/${COLLECTION_POST}/3jzfcijpj2z2a`), {
    authority: DID,
    collection: COLLECTION_POST,
    rkey: "3jzfcijpj2z2a",
  });
  assert.deepEqual(parseAtUri(`at://alice.test/${COLLECTION_PROFILE}/${PROFILE_RKEY}`), {
    authority: "alice.test",
    collection: COLLECTION_PROFILE,
    rkey: PROFILE_RKEY,
  });
});

Deno.test("formatAtUri and parseAtUri round-trip", () => {
  const uri = formatAtUri(DID, COLLECTION_POST, "3jzfcijpj2z2a");
  assert.equal(uri, `at://${DID}/${COLLECTION_POST}/3jzfcijpj2z2a`);
  const { authority, collection, rkey } = parseAtUri(uri);
  assert.equal(formatAtUri(authority, collection, rkey), uri);
});

Deno.test("parseAtUri rejects URIs without a collection and rkey, naming the value", () => {
  for (const uri of [`at://${DID}`, `at://${DID}/${COLLECTION_POST}`]) {
    assert.throws(() => parseAtUri(uri), {
      name: "AtUriError",
      message: `AT-URI is not a record URI (needs collection and rkey): "${uri}"`,
    });
  }
});

Deno.test("parseAtUri rejects invalid URIs with AtUriError naming the value", () => {
  const bad = [
    "",
    `https://${DID}/${COLLECTION_POST}/abc`,
    `at://${DID}/${COLLECTION_POST}/abc/`,
    `at://${DID}/${COLLECTION_POST}/abc/def`,
    `at://${DID}/${COLLECTION_POST}/abc#frag`,
    `at://${DID}/${COLLECTION_POST}/abc?x=1`,
    `at://${DID}/${COLLECTION_POST}/..`,
    `at://${DID}/notansid/abc`,
    `at://not_a_handle/${COLLECTION_POST}/abc`,
    `at://${DID}//abc`,
  ];
  for (const uri of bad) {
    assert.throws(() => parseAtUri(uri), {
      name: "AtUriError",
      message: `Invalid AT-URI: ${JSON.stringify(uri)}`,
    });
  }
});

Deno.test("parseAtUri bounds the value quoted in its message", () => {
  const uri = `at://${DID}/${COLLECTION_POST}/${"o".repeat(9000)}`;
  assert.throws(() => parseAtUri(uri), (err: unknown) => {
    assert.ok(err instanceof AtUriError);
    assert.ok(err.message.length < 200, `message is ${err.message.length} chars`);
    return true;
  });
});

Deno.test("formatAtUri rejects each invalid part, naming it", () => {
  assert.throws(() => formatAtUri("did:plc:", COLLECTION_POST, "abc"), {
    name: "AtUriError",
    message: 'Invalid AT-URI authority: "did:plc:"',
  });
  assert.throws(() => formatAtUri(DID, "app.social", "abc"), {
    name: "AtUriError",
    message: 'Invalid AT-URI collection: "app.social"',
  });
  assert.throws(() => formatAtUri(DID, COLLECTION_POST, "a/b"), {
    name: "AtUriError",
    message: 'Invalid AT-URI record key: "a/b"',
  });
});
