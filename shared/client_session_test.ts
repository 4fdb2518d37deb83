import assert from "node:assert/strict";
import {
  LoginRequiredError,
  MemorySessionStore,
  needsRefresh,
  SessionManager,
  XrpcClientError,
} from "./client_session.ts";
import type { Session } from "./client_types.ts";

const session = (n: number): Session => ({
  did: "did:plc:alice",
  handle: "alice.test",
  accessJwt: `access-${n}`,
  refreshJwt: `refresh-${n}`,
});

const tokenInvalid = () => new XrpcClientError(401, "TokenInvalid", "Token has expired");

Deno.test("needsRefresh matches the index's TokenInvalid and the account host's ExpiredToken only", () => {
  assert.equal(needsRefresh(tokenInvalid()), true);
  assert.equal(needsRefresh(new XrpcClientError(400, "ExpiredToken", "x")), true);
  assert.equal(needsRefresh(new XrpcClientError(401, "AuthMissing", "x")), false);
  assert.equal(needsRefresh(new XrpcClientError(403, "Forbidden", "x")), false);
  assert.equal(needsRefresh(new XrpcClientError(400, "InvalidRequest", "x")), false);
  assert.equal(needsRefresh(new Error("network")), false);
});

Deno.test("run refreshes once and repeats the failed call exactly once (spec 5.4)", async () => {
  const store = new MemorySessionStore(session(1));
  const refreshed: string[] = [];
  const manager = new SessionManager(store, (refreshJwt) => {
    refreshed.push(refreshJwt);
    return Promise.resolve(session(2));
  });
  const seen: string[] = [];
  const result = await manager.run((s) => {
    seen.push(s.accessJwt);
    if (s.accessJwt === "access-1") throw tokenInvalid();
    return Promise.resolve("ok");
  });
  assert.equal(result, "ok");
  assert.deepEqual(seen, ["access-1", "access-2"]);
  assert.deepEqual(refreshed, ["refresh-1"]);
  assert.deepEqual(store.load(), session(2));
});

Deno.test("run gives up after one repeat when the fresh token also fails", async () => {
  const manager = new SessionManager(
    new MemorySessionStore(session(1)),
    () => Promise.resolve(session(2)),
  );
  let calls = 0;
  await assert.rejects(
    manager.run(() => {
      calls++;
      throw tokenInvalid();
    }),
    { name: "XrpcClientError", error: "TokenInvalid" },
  );
  assert.equal(calls, 2);
  assert.equal(manager.refreshCount, 1);
});

Deno.test("ten concurrent failures cause exactly one refresh", async () => {
  let refreshes = 0;
  let release!: () => void;
  const gate = new Promise<void>((r) => release = r);
  const manager = new SessionManager(new MemorySessionStore(session(1)), async () => {
    refreshes++;
    await gate;
    return session(2);
  });
  const calls = Array.from({ length: 10 }, () =>
    manager.run((s) => {
      if (s.accessJwt === "access-1") return Promise.reject(tokenInvalid());
      return Promise.resolve(s.accessJwt);
    }));
  await new Promise((r) => setTimeout(r, 10));
  release();
  assert.deepEqual(await Promise.all(calls), Array(10).fill("access-2"));
  assert.equal(refreshes, 1);
});

Deno.test("a call failing after another refresh finished reuses the new token", async () => {
  const store = new MemorySessionStore(session(1));
  let refreshes = 0;
  const manager = new SessionManager(store, () => {
    refreshes++;
    return Promise.resolve(session(2));
  });
  // The first call refreshes; the second failed with the old token before it knew.
  await manager.run((s) =>
    s.accessJwt === "access-1" ? Promise.reject(tokenInvalid()) : Promise.resolve(1)
  );
  let attempt = 0;
  const out = await manager.run((s) => {
    attempt++;
    return attempt === 1 ? Promise.reject(tokenInvalid()) : Promise.resolve(s.accessJwt);
  });
  assert.equal(out, "access-2");
  assert.equal(refreshes, 2, "a failure of the current token refreshes again");
});

Deno.test("a failed refresh clears the session and asks to log in again", async () => {
  const store = new MemorySessionStore(session(1));
  const manager = new SessionManager(
    store,
    () => Promise.reject(new XrpcClientError(400, "ExpiredToken", "Token has been revoked")),
  );
  let calls = 0;
  await assert.rejects(
    manager.run(() => {
      calls++;
      throw tokenInvalid();
    }),
    (err: unknown) =>
      err instanceof LoginRequiredError &&
      err.message === "Session refresh failed (ExpiredToken): log in again",
  );
  assert.equal(calls, 1, "the call is not repeated without a fresh token");
  assert.equal(store.load(), null);
  await assert.rejects(manager.run(() => Promise.resolve(1)), LoginRequiredError);
});

Deno.test("errors other than an expired or invalid token never trigger a refresh", async () => {
  let refreshes = 0;
  const manager = new SessionManager(new MemorySessionStore(session(1)), () => {
    refreshes++;
    return Promise.resolve(session(2));
  });
  await assert.rejects(
    manager.run(() => Promise.reject(new XrpcClientError(403, "Forbidden", "no"))),
    { error: "Forbidden" },
  );
  assert.equal(refreshes, 0);
});
