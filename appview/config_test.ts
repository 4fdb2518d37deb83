import assert from "node:assert/strict";
import {
  APPVIEW_ENV_VARS,
  ConfigError,
  DEFAULT_WEB_DIR,
  HEALTH_STALL_SECONDS,
  loadAppviewConfig,
  serviceDidFromUrl,
  STREAM_IDLE_TIMEOUT_SECONDS,
} from "./config.ts";
import { IDLE_TIMEOUT_MS } from "./ingest/sources/stream_socket.ts";

Deno.test("loadAppviewConfig applies the documented defaults", () => {
  const c = loadAppviewConfig({});
  assert.equal(c.port, 3000);
  assert.equal(c.hostname, "127.0.0.1");
  assert.equal(c.publicUrl, "http://localhost:3000");
  assert.equal(c.serviceDid, "did:web:localhost%3A3000");
  assert.equal(c.dbPath, "./data/appview.sqlite");
  assert.equal(c.pdsUrl, "http://localhost:2583");
  assert.equal(c.pdsStreamUrl, "ws://localhost:2583/xrpc/com.atproto.sync.subscribeRepos");
  assert.equal(c.authRequired, true);
  assert.equal(c.corsOrigins, null);
  assert.equal(c.ingestSecret, null);
  assert.equal(c.jetstreamUrl, null);
  assert.equal(c.plcUrl, "https://plc.directory");
  assert.equal(c.allowPrivateFetch, false);
  assert.equal(c.streamIdleTimeoutMs, 300_000);
  assert.equal(STREAM_IDLE_TIMEOUT_SECONDS * 1000, IDLE_TIMEOUT_MS);
  assert.equal(c.healthStallMs, 120_000);
  assert.equal(HEALTH_STALL_SECONDS, 120);
  assert.ok(Object.isFrozen(c));
});

Deno.test("PDS_INTERNAL_URL wins over PDS_PUBLIC_URL and trailing slashes are removed", () => {
  const c = loadAppviewConfig({
    PDS_PUBLIC_URL: "https://pds.example.com/",
    PDS_INTERNAL_URL: "http://10.0.0.5:2583/",
  });
  assert.equal(c.pdsUrl, "http://10.0.0.5:2583");
  const p = loadAppviewConfig({ PDS_PUBLIC_URL: "https://pds.example.com/" });
  assert.equal(p.pdsUrl, "https://pds.example.com");
  assert.equal(p.pdsStreamUrl, "wss://pds.example.com/xrpc/com.atproto.sync.subscribeRepos");
});

Deno.test("loadAppviewConfig parses switches and lists", () => {
  const c = loadAppviewConfig({
    APPVIEW_AUTH_REQUIRED: "false",
    APPVIEW_CORS_ORIGINS: "https://a.example, https://b.example,",
    APPVIEW_INGEST_SECRET: "s3cret",
    APPVIEW_JETSTREAM_URL: "ws://127.0.0.1:6008/subscribe",
    DATA_DIR: "/var/lib/social",
  });
  assert.equal(c.authRequired, false);
  assert.deepEqual(c.corsOrigins, ["https://a.example", "https://b.example"]);
  assert.equal(c.ingestSecret, "s3cret");
  assert.equal(c.jetstreamUrl, "ws://127.0.0.1:6008/subscribe");
  assert.equal(c.dbPath, "/var/lib/social/appview.sqlite");
});

Deno.test("APPVIEW_CORS_ORIGINS takes web origins only, naming a bad entry", () => {
  const origins = (v: string) => loadAppviewConfig({ APPVIEW_CORS_ORIGINS: v }).corsOrigins;
  assert.deepEqual(
    origins(
      "https://app.example/, http://localhost:5173, HTTPS://Caps.Example:443, https://bücher.example",
    ),
    [
      "https://app.example",
      "http://localhost:5173",
      "https://caps.example",
      "https://xn--bcher-kva.example",
    ],
  );
  for (
    const bad of ["notanorigin", "app.example", "https://app.example/path", "ftp://x.example", "*"]
  ) {
    assert.throws(
      () => origins(`https://ok.example,${bad}`),
      (e: unknown) =>
        e instanceof ConfigError &&
        e.message ===
          `APPVIEW_CORS_ORIGINS entries must be origins such as https://app.example, got ${
            JSON.stringify(bad)
          }`,
      bad,
    );
  }
});

Deno.test("APPVIEW_JETSTREAM_URL must be a ws(s) URL without a fragment; errors hide its secrets", () => {
  const load = (v: string) => () => loadAppviewConfig({ APPVIEW_JETSTREAM_URL: v });
  assert.throws(
    load("https://op:pw@js.example/subscribe?apiKey=k"),
    (e: unknown) =>
      e instanceof ConfigError &&
      e.message ===
        "APPVIEW_JETSTREAM_URL must be a ws(s) URL, got https://redacted:redacted@js.example/subscribe?apiKey=redacted",
  );
  assert.throws(
    load("wss://js.example/subscribe#x"),
    (e: unknown) =>
      e instanceof ConfigError &&
      e.message ===
        "APPVIEW_JETSTREAM_URL must not have a #fragment, got wss://js.example/subscribe#x",
  );
});

Deno.test("APPVIEW_STREAM_IDLE_TIMEOUT_SECONDS takes whole seconds from 1 to 86400", () => {
  const env = (v: string) => ({ APPVIEW_STREAM_IDLE_TIMEOUT_SECONDS: v });
  assert.equal(loadAppviewConfig(env("1")).streamIdleTimeoutMs, 1_000);
  assert.equal(loadAppviewConfig(env(" 90 ")).streamIdleTimeoutMs, 90_000);
  assert.equal(loadAppviewConfig(env("86400")).streamIdleTimeoutMs, 86_400_000);
  for (const bad of ["0", "86401", "1.5", "-5", "5s", "1e3"]) {
    assert.throws(() => loadAppviewConfig(env(bad)), {
      name: "ConfigError",
      message:
        `APPVIEW_STREAM_IDLE_TIMEOUT_SECONDS must be a whole number of seconds from 1 to 86400, got ${bad}`,
    });
  }
});

Deno.test("APPVIEW_HEALTH_STALL_SECONDS takes whole seconds from 0 (off) to 86400 (issue 36)", () => {
  const env = (v: string) => ({ APPVIEW_HEALTH_STALL_SECONDS: v });
  assert.equal(loadAppviewConfig(env("0")).healthStallMs, null);
  assert.equal(loadAppviewConfig(env("1")).healthStallMs, 1_000);
  assert.equal(loadAppviewConfig(env("86400")).healthStallMs, 86_400_000);
  assert.ok(APPVIEW_ENV_VARS.includes("APPVIEW_HEALTH_STALL_SECONDS"));
  for (const bad of ["86401", "1.5", "-5", "2m", "off"]) {
    assert.throws(() => loadAppviewConfig(env(bad)), {
      name: "ConfigError",
      message:
        `APPVIEW_HEALTH_STALL_SECONDS must be a whole number of seconds from 0 to 86400, got ${bad}`,
    });
  }
});

Deno.test("loadAppviewConfig names the variable of a bad value", () => {
  assert.throws(() => loadAppviewConfig({ APPVIEW_PORT: "70000" }), {
    name: "ConfigError",
    message: "APPVIEW_PORT must be a port number from 0 to 65535, got 70000",
  });
  assert.throws(() => loadAppviewConfig({ APPVIEW_AUTH_REQUIRED: "maybe" }), {
    message: "APPVIEW_AUTH_REQUIRED must be true or false, got maybe",
  });
  assert.throws(() => loadAppviewConfig({ APPVIEW_JETSTREAM_URL: "http://x" }), ConfigError);
  assert.throws(() => loadAppviewConfig({ APPVIEW_PUBLIC_URL: "not a url" }), {
    message: "APPVIEW_PUBLIC_URL must be an http(s) URL, got not a url",
  });
});

Deno.test("APPVIEW_WEB_DIR defaults to this checkout's web/dist; off serves the API alone", () => {
  assert.ok(APPVIEW_ENV_VARS.includes("APPVIEW_WEB_DIR"));
  assert.equal(loadAppviewConfig({}).webDir, DEFAULT_WEB_DIR);
  assert.equal(loadAppviewConfig({ APPVIEW_WEB_DIR: "  " }).webDir, DEFAULT_WEB_DIR);
  assert.ok(DEFAULT_WEB_DIR.endsWith("/web/dist"), DEFAULT_WEB_DIR);
  // Beside the web app's sources: the folder of this checkout, wherever the tests run from.
  assert.ok(Deno.statSync(DEFAULT_WEB_DIR.replace(/dist$/, "index.html")).isFile);
  for (const off of ["off", "OFF", " Off "]) {
    assert.equal(loadAppviewConfig({ APPVIEW_WEB_DIR: off }).webDir, null, off);
  }
  assert.equal(loadAppviewConfig({ APPVIEW_WEB_DIR: "/srv/social/web" }).webDir, "/srv/social/web");
  assert.equal(loadAppviewConfig({ APPVIEW_WEB_DIR: "web/dist/" }).webDir, "web/dist/");
});

Deno.test("webPdsUrl is PDS_PUBLIC_URL, never PDS_INTERNAL_URL, without a trailing slash", () => {
  assert.equal(loadAppviewConfig({}).webPdsUrl, "http://localhost:2583");
  assert.equal(
    loadAppviewConfig({ PDS_INTERNAL_URL: "http://pds.internal:2583" }).webPdsUrl,
    "http://localhost:2583",
  );
  const c = loadAppviewConfig({
    PDS_PUBLIC_URL: "https://pds.example.com/",
    PDS_INTERNAL_URL: "http://10.0.0.5:2583/",
  });
  assert.equal(c.webPdsUrl, "https://pds.example.com");
  assert.equal(c.pdsUrl, "http://10.0.0.5:2583");
});

Deno.test("serviceDidFromUrl encodes the port colon (spec 5.1)", () => {
  assert.equal(serviceDidFromUrl("http://localhost:3000"), "did:web:localhost%3A3000");
  assert.equal(serviceDidFromUrl("https://index.example.com"), "did:web:index.example.com");
});

Deno.test("APPVIEW_DATABASE_URL puts the index on PostgreSQL; a bad value stops startup, its password hidden (issue 40)", () => {
  const sqlite = loadAppviewConfig({ APPVIEW_DB_PATH: "/srv/index.sqlite" });
  assert.equal(sqlite.databaseUrl, null);
  assert.equal(sqlite.dbPoolMax, 10);
  assert.equal(sqlite.dbPathIgnored, false);
  const url = "postgresql://index:s3cret@db.example:5432/social?sslmode=verify-full";
  const pg = loadAppviewConfig({ APPVIEW_DATABASE_URL: url, APPVIEW_DB_POOL_MAX: "25" });
  assert.equal(pg.databaseUrl, url);
  assert.equal(pg.dbPoolMax, 25);
  assert.equal(pg.dbPathIgnored, false);
  assert.equal(
    loadAppviewConfig({ APPVIEW_DATABASE_URL: url, APPVIEW_DB_PATH: "/srv/index.sqlite" })
      .dbPathIgnored,
    true,
  );
  assert.equal(
    loadAppviewConfig({ APPVIEW_DATABASE_URL: "postgres://h/db" }).databaseUrl,
    "postgres://h/db",
  );
  for (
    const [value, message] of [
      [
        "mysql://index:s3cret@db.example/social",
        /^APPVIEW_DATABASE_URL must be a postgres:\/\/ or postgresql:\/\/ URL, got mysql:\/\/redacted:redacted@db\.example\/social$/,
      ],
      ["db.example:5432", /^APPVIEW_DATABASE_URL must be a postgres:\/\/ or postgresql:\/\/ URL/],
      [
        "postgres://index:s3cret@db.example/social?sslmode=verify",
        /^APPVIEW_DATABASE_URL: sslmode must be one of disable, allow, prefer, require, verify-ca, verify-full, got verify$/,
      ],
    ] as const
  ) {
    assert.throws(() => loadAppviewConfig({ APPVIEW_DATABASE_URL: value }), (e: Error) => {
      assert.ok(e instanceof ConfigError);
      assert.match(e.message, message);
      assert.doesNotMatch(e.message, /s3cret/);
      return true;
    });
  }
  for (const value of ["0", "1001", "ten"]) {
    assert.throws(
      () => loadAppviewConfig({ APPVIEW_DB_POOL_MAX: value }),
      (e: Error) =>
        e.message === `APPVIEW_DB_POOL_MAX must be a whole number from 1 to 1000, got ${value}`,
    );
  }
  assert.ok(APPVIEW_ENV_VARS.includes("APPVIEW_DATABASE_URL"));
  assert.ok(APPVIEW_ENV_VARS.includes("APPVIEW_DB_POOL_MAX"));
});
