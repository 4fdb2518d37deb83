import assert from "node:assert/strict";
import { concatBytes, readStreamLimited, utf8Length } from "./bytes.ts";

function streamOf(chunks: number[][]): ReadableStream<Uint8Array> & { cancelled: boolean } {
  let i = 0;
  const state = { cancelled: false };
  const stream = new ReadableStream<Uint8Array>({
    pull(controller) {
      if (i < chunks.length) controller.enqueue(new Uint8Array(chunks[i++]));
      else controller.close();
    },
    cancel() {
      state.cancelled = true;
    },
  });
  return Object.defineProperty(stream, "cancelled", { get: () => state.cancelled }) as
    & ReadableStream<Uint8Array>
    & { cancelled: boolean };
}

Deno.test("concatBytes joins chunks in order and returns a single chunk as is", () => {
  assert.deepEqual(
    concatBytes([new Uint8Array([1, 2]), new Uint8Array([]), new Uint8Array([3])]),
    new Uint8Array([1, 2, 3]),
  );
  const one = new Uint8Array([9]);
  assert.equal(concatBytes([one]), one);
  assert.deepEqual(concatBytes([]), new Uint8Array(0));
});

Deno.test("readStreamLimited reads up to the limit exactly and a null stream as empty", async () => {
  const bytes = await readStreamLimited(streamOf([[1, 2], [3, 4]]), 4, () => new Error("big"));
  assert.deepEqual(bytes, new Uint8Array([1, 2, 3, 4]));
  assert.deepEqual(await readStreamLimited(null, 0, () => new Error("big")), new Uint8Array(0));
});

Deno.test("readStreamLimited cancels the stream and throws the caller's error one byte past the limit", async () => {
  const stream = streamOf([[1, 2], [3, 4, 5], [6]]);
  await assert.rejects(
    readStreamLimited(stream, 4, () => new RangeError("over 4")),
    { name: "RangeError", message: "over 4" },
  );
  assert.equal(stream.cancelled, true);
});

Deno.test("utf8Length counts the bytes TextEncoder writes, lone surrogates included", () => {
  const samples = [
    "",
    "app.social.feed.post",
    "did:plc:abc123",
    "é",
    "日本語",
    "👍🏽 and 🦋",
    "\ud83d",
    "a\ud83db",
    "\udc4d",
    "\ud83d\ud83d\udc4d",
    "\u07ff\u0800\uffff",
  ];
  for (const s of samples) {
    assert.equal(utf8Length(s), new TextEncoder().encode(s).length, JSON.stringify(s));
  }
});
