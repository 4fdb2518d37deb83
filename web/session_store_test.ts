import assert from "node:assert/strict";
import { LocalSessionStore, SESSION_KEY } from "./session_store.ts";

/** A `Storage` over a Map, as a browser's `localStorage` behaves. */
function memoryStorage(): Storage & { map: Map<string, string> } {
  const map = new Map<string, string>();
  return {
    map,
    get length() {
      return map.size;
    },
    clear: () => map.clear(),
    getItem: (k: string) => map.get(k) ?? null,
    key: (i: number) => [...map.keys()][i] ?? null,
    removeItem: (k: string) => void map.delete(k),
    setItem: (k: string, v: string) => void map.set(k, String(v)),
  };
}

const SESSION = {
  did: "did:plc:abc",
  handle: "alice.test",
  accessJwt: "a.b.c",
  refreshJwt: "d.e.f",
};

Deno.test("LocalSessionStore keeps the session across store instances (a page reload)", () => {
  const storage = memoryStorage();
  new LocalSessionStore(storage).save(SESSION);
  assert.deepEqual(new LocalSessionStore(storage).load(), SESSION);
  new LocalSessionStore(storage).save(null);
  assert.equal(storage.map.has(SESSION_KEY), false);
  assert.equal(new LocalSessionStore(storage).load(), null);
});

Deno.test("LocalSessionStore reads a damaged or foreign value as no session", () => {
  const storage = memoryStorage();
  const store = new LocalSessionStore(storage);
  for (
    const raw of [
      "{",
      "null",
      "[]",
      JSON.stringify({ ...SESSION, accessJwt: 5 }),
      JSON.stringify({ did: "x" }),
    ]
  ) {
    storage.setItem(SESSION_KEY, raw);
    assert.equal(store.load(), null, raw);
  }
  // Extra members are not carried along.
  storage.setItem(SESSION_KEY, JSON.stringify({ ...SESSION, extra: "<script>" }));
  assert.deepEqual(store.load(), SESSION);
});
