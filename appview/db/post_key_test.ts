import assert from "node:assert/strict";
import { didOf } from "../_fixtures.ts";
import { postKeyOf } from "./post_key.ts";

const A = didOf("alice");

Deno.test("postKeyOf names posts with a DID authority and nothing else", () => {
  assert.deepEqual(postKeyOf(`at://${A}/app.social.feed.post/3kabc`), { did: A, rkey: "3kabc" });
  assert.equal(postKeyOf(`at://${A}/app.social.feed.repost/3kabc`), null);
  assert.equal(postKeyOf("at://alice.test/app.social.feed.post/3kabc"), null);
  assert.equal(postKeyOf(`at://${A}/app.social.feed.post/`), null);
  assert.equal(postKeyOf(`at://${A}/app.social.feed.post/a/b`), null);
  assert.equal(postKeyOf(`at://${A}`), null);
});
