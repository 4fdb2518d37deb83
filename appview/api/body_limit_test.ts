// The query API's body bound (docs/behaviour.md 10.10, the bounds on request bodies).

import assert from "node:assert/strict";
import { Hono } from "hono";
import { limitBody } from "./body_limit.ts";

class TooLarge extends Error {}

function app(): Hono {
  const a = new Hono();
  a.onError((e) => Response.json({ error: e.constructor.name }, { status: 413 }));
  a.use("*", limitBody(10, () => new TooLarge()));
  a.post("/", async (c) => c.json({ got: await c.req.text(), method: c.req.method }));
  return a;
}

/** A streamed (chunked: no Content-Length) request. */
function streamed(chunks: string[], pulls: { n: number }): Request {
  const encoder = new TextEncoder();
  const body = new ReadableStream<Uint8Array>({
    pull(controller) {
      const next = chunks[pulls.n++];
      if (next === undefined) controller.close();
      else controller.enqueue(encoder.encode(next));
    },
  }, { highWaterMark: 0 }); // pulled only when read
  return new Request("http://index.test/", { method: "POST", body });
}

Deno.test("a chunked body within the limit reaches the handler intact", async () => {
  const pulls = { n: 0 };
  const res = await app().fetch(streamed(["hello", " wor", "l"], pulls));
  assert.equal(res.status, 200);
  assert.deepEqual(await res.json(), { got: "hello worl", method: "POST" });
});

Deno.test("a chunked body is refused as soon as it passes the limit; the rest is never pulled", async () => {
  const pulls = { n: 0 };
  const res = await app().fetch(streamed(["hello", " world", "!", "more", "and more"], pulls));
  assert.equal(res.status, 413);
  assert.deepEqual(await res.json(), { error: "TooLarge" });
  assert.equal(pulls.n, 2);
});

Deno.test("a declared Content-Length over the limit is refused before the body is read", async () => {
  const declared = (length: string, chunks: string[], pulls: { n: number }) => {
    const { body } = streamed(chunks, pulls);
    return new Request("http://index.test/", {
      method: "POST",
      body,
      headers: { "content-length": length },
    });
  };
  const untouched = { n: 0 };
  const over = await app().fetch(declared("11", ["12345678901"], untouched));
  assert.equal(over.status, 413);
  assert.equal(untouched.n, 0);
  // Within the limit, the body is left to the handler (the server holds it to its length).
  const exact = await app().fetch(declared("10", ["1234567890"], { n: 0 }));
  assert.equal(exact.status, 200);
  assert.deepEqual(await exact.json(), { got: "1234567890", method: "POST" });
  // A repeated header arrives as a list: equal values count as one.
  const repeated = await app().fetch(declared("10, 10", ["1234567890"], { n: 0 }));
  assert.equal(repeated.status, 200);
  const repeatedOver = await app().fetch(declared("11, 11", ["12345678901"], { n: 0 }));
  assert.equal(repeatedOver.status, 413);
});
