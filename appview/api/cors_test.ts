// Spec 5.3 APPVIEW_CORS_ORIGINS: listed origins only, preflight answered; unset -> `*`.

import assert from "node:assert/strict";
import { Hono } from "hono";
import { silentLogger } from "../../shared/log.ts";
import { ApiError, onApiError } from "./errors.ts";
import { corsMiddleware } from "./cors.ts";

const APP_ORIGIN = "https://app.example";

function app(origins: readonly string[] | null): Hono {
  const app = new Hono();
  app.onError(onApiError(silentLogger));
  app.use("*", corsMiddleware(origins));
  app.get("/api/search", (c) => c.json({ posts: [] }));
  app.get("/api/notifications", () => {
    throw new ApiError(401, "TokenInvalid", "Token has expired");
  });
  return app;
}

Deno.test("CORS echoes a listed origin with Vary: Origin", async () => {
  const res = await app([APP_ORIGIN, "http://localhost:5173"]).request("/api/search", {
    headers: { origin: APP_ORIGIN },
  });
  assert.equal(res.status, 200);
  assert.equal(res.headers.get("access-control-allow-origin"), APP_ORIGIN);
  assert.equal(res.headers.get("vary"), "Origin");
  assert.deepEqual(await res.json(), { posts: [] });
});

Deno.test("CORS gives no allow-origin header to an unlisted origin", async () => {
  const res = await app([APP_ORIGIN]).request("/api/search", {
    headers: { origin: "https://evil.example" },
  });
  assert.equal(res.status, 200);
  assert.equal(res.headers.get("access-control-allow-origin"), null);
  assert.equal(res.headers.get("vary"), "Origin");
  await res.body?.cancel();
});

Deno.test("CORS answers a preflight with the allowed methods and headers", async () => {
  const res = await app([APP_ORIGIN]).request("/api/notifications", {
    method: "OPTIONS",
    headers: {
      origin: APP_ORIGIN,
      "access-control-request-method": "POST",
      "access-control-request-headers": "authorization, content-type",
    },
  });
  assert.equal(res.status, 204);
  assert.equal(res.headers.get("access-control-allow-origin"), APP_ORIGIN);
  assert.equal(res.headers.get("access-control-allow-methods"), "GET,POST,OPTIONS");
  assert.equal(res.headers.get("access-control-allow-headers"), "Authorization,Content-Type");
  assert.equal(res.headers.get("access-control-max-age"), "600");
  assert.match(res.headers.get("vary") ?? "", /Origin/);
  assert.equal(await res.text(), "");
});

Deno.test("CORS preflight from an unlisted origin gets no allow-origin header", async () => {
  const res = await app([APP_ORIGIN]).request("/api/notifications", {
    method: "OPTIONS",
    headers: { origin: "https://evil.example", "access-control-request-method": "GET" },
  });
  assert.equal(res.headers.get("access-control-allow-origin"), null);
  await res.body?.cancel();
});

Deno.test("CORS unset allows every origin with *", async () => {
  const res = await app(null).request("/api/search", {
    headers: { origin: "https://any.example" },
  });
  assert.equal(res.headers.get("access-control-allow-origin"), "*");
  assert.equal(res.headers.get("vary"), null);
  await res.body?.cancel();
  const preflight = await app(null).request("/api/search", {
    method: "OPTIONS",
    headers: { origin: "https://any.example", "access-control-request-method": "GET" },
  });
  assert.equal(preflight.status, 204);
  assert.equal(preflight.headers.get("access-control-allow-origin"), "*");
  assert.equal(preflight.headers.get("access-control-allow-headers"), "Authorization,Content-Type");
});

Deno.test("CORS headers are on error answers too, so a browser client can read a 401", async () => {
  const res = await app([APP_ORIGIN]).request("/api/notifications", {
    headers: { origin: APP_ORIGIN },
  });
  assert.equal(res.status, 401);
  assert.equal(res.headers.get("access-control-allow-origin"), APP_ORIGIN);
  assert.deepEqual(await res.json(), { error: "TokenInvalid", message: "Token has expired" });
});

Deno.test("CORS with an empty list allows no origin", async () => {
  const res = await app([]).request("/api/search", { headers: { origin: APP_ORIGIN } });
  assert.equal(res.headers.get("access-control-allow-origin"), null);
  await res.body?.cancel();
});

Deno.test("CORS hands the handler's response on as it is: not copied around a body stream", async () => {
  for (const origins of [null, [APP_ORIGIN]]) {
    const a = app(origins);
    const made: { res?: Response } = {};
    a.get("/api/made", (c) => (made.res = c.json({ ok: true })));
    const res = await a.request("/api/made", { headers: { origin: APP_ORIGIN } });
    assert.ok(res === made.res, `origins ${JSON.stringify(origins)}`);
    assert.equal(
      res.headers.get("access-control-allow-origin"),
      origins === null ? "*" : APP_ORIGIN,
    );
    assert.deepEqual(await res.json(), { ok: true });
  }
});
