import assert from "node:assert/strict";
import { didOf, postOp } from "../../_fixtures.ts";
import { foldMessages, MAX_BATCH_MESSAGES } from "./stream_queue.ts";

const ALICE = didOf("alice");
const decodeOne = (m: number, _cursor: number | null) => ({
  ops: [postOp(ALICE, `3kaaaaaaaaa${m % 10}`, `post ${m}`)],
  cursor: m,
});

Deno.test("foldMessages folds at most MAX_BATCH_MESSAGES messages at the default op bound", () => {
  const messages = Array.from({ length: MAX_BATCH_MESSAGES + 5_000 }, (_, i) => i + 1);
  const folded = foldMessages(messages, 0, null, decodeOne);
  assert.equal(folded.next, MAX_BATCH_MESSAGES);
  assert.equal(folded.ops.length, MAX_BATCH_MESSAGES);
  assert.equal(folded.cursor, MAX_BATCH_MESSAGES);
});

Deno.test("foldMessages with an op bound above MAX_BATCH_MESSAGES folds up to that many messages (the public consumer thread's 40,000-op transactions)", () => {
  const messages = Array.from({ length: 45_000 }, (_, i) => i + 1);
  const folded = foldMessages(messages, 0, null, decodeOne, 40_000);
  assert.equal(folded.next, 40_000);
  assert.equal(folded.ops.length, 40_000);
  assert.equal(folded.cursor, 40_000);
  const rest = foldMessages(messages, folded.next, folded.cursor, decodeOne, 40_000);
  assert.equal(rest.next, 45_000);
  assert.equal(rest.cursor, 45_000);
});
