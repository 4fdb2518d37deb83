// Account host configuration (docs/behaviour.md 11; spec 5.1 service DIDs, 5.3 switches).

import assert from "node:assert/strict";
import { ConfigError, loadPdsConfig } from "./config.ts";

Deno.test("loadPdsConfig applies the documented defaults and derives both service DIDs", () => {
  const config = loadPdsConfig({});
  assert.deepEqual({ ...config }, {
    dataDir: "./data",
    hostname: "127.0.0.1",
    port: 2583,
    publicUrl: "http://localhost:2583",
    serviceDid: "did:web:localhost%3A2583",
    jwtSecret: null,
    inviteRequired: false,
    handleDomains: [".test"],
    kvPath: "./data/pds.kv",
    appviewPublicUrl: "http://localhost:3000",
    appviewServiceDid: "did:web:localhost%3A3000",
    appviewInternalUrl: "http://localhost:3000",
    ingestSecret: null,
    eventRetentionDays: 30,
    streamMaxBufferedBytes: 65536,
    streamStallTimeoutSeconds: 60,
    streamReservedConnections: 4,
    trustProxy: false,
    corsOrigins: null,
    signupsPerHour: 100,
    loginsPerHour: 300,
    reportsPerHour: 10,
    passwordHashConcurrency: 2,
    passwordHashQueue: 32,
    plcUrl: null,
    plcOff: false,
    crawlers: [],
    logLevel: "info",
  });
  assert.ok(Object.isFrozen(config));
  assert.ok(Object.isFrozen(config.handleDomains));
});

Deno.test("loadPdsConfig reads every variable", () => {
  const config = loadPdsConfig({
    DATA_DIR: "/var/lib/social",
    PDS_PORT: "8080",
    PDS_HOSTNAME: "0.0.0.0",
    PDS_PUBLIC_URL: "https://pds.example.com/",
    PDS_JWT_SECRET: "a-very-long-secret-value",
    PDS_INVITE_REQUIRED: "true",
    PDS_HANDLE_DOMAINS: "example.com, .Social.example ",
    PDS_KV_PATH: "/tmp/x.kv",
    APPVIEW_PUBLIC_URL: "https://index.example.com:8443",
    APPVIEW_INTERNAL_URL: "off",
    APPVIEW_INGEST_SECRET: "shh",
    PDS_EVENT_RETENTION_DAYS: "30",
    PDS_TRUST_PROXY: "true",
    PDS_CORS_ORIGINS: "https://app.example",
    PDS_SIGNUPS_PER_HOUR: "5",
    PDS_LOGINS_PER_HOUR: "60",
    PDS_PASSWORD_HASH_CONCURRENCY: "4",
    PDS_PASSWORD_HASH_QUEUE: "0",
    PDS_PLC_URL: "https://plc.example.com/",
    PDS_CRAWLERS: "https://relay.example.com, https://relay.example.com/, http://127.0.0.1:9000",
    LOG_LEVEL: "debug",
  });
  assert.equal(config.dataDir, "/var/lib/social");
  assert.equal(config.port, 8080);
  assert.equal(config.hostname, "0.0.0.0");
  assert.equal(config.publicUrl, "https://pds.example.com");
  assert.equal(config.serviceDid, "did:web:pds.example.com");
  assert.equal(config.jwtSecret, "a-very-long-secret-value");
  assert.equal(config.inviteRequired, true);
  assert.deepEqual(config.handleDomains, [".example.com", ".social.example"]);
  assert.equal(config.kvPath, "/tmp/x.kv");
  assert.equal(config.appviewServiceDid, "did:web:index.example.com%3A8443");
  assert.equal(config.appviewInternalUrl, null);
  assert.equal(config.ingestSecret, "shh");
  assert.equal(config.eventRetentionDays, 30);
  assert.equal(config.trustProxy, true);
  assert.deepEqual(config.corsOrigins, ["https://app.example"]);
  assert.equal(config.signupsPerHour, 5);
  assert.equal(config.loginsPerHour, 60);
  assert.equal(config.passwordHashConcurrency, 4);
  assert.equal(config.passwordHashQueue, 0);
  assert.equal(config.plcUrl, "https://plc.example.com");
  assert.equal(config.plcOff, false);
  assert.deepEqual(config.crawlers, ["https://relay.example.com", "http://127.0.0.1:9000"]);
  assert.equal(config.logLevel, "debug");
  assert.equal(loadPdsConfig({ DATA_DIR: "/d/" }).kvPath, "/d/pds.kv");
  const off = loadPdsConfig({ PDS_PLC_URL: "off" });
  assert.deepEqual([off.plcUrl, off.plcOff], [null, true]);
});

Deno.test("loadPdsConfig fails on bad values, naming the variable and the value", () => {
  const cases: [Record<string, string>, string][] = [
    [{ PDS_PORT: "http" }, 'PDS_PORT must be an integer, got "http"'],
    [{ PDS_PORT: "70000" }, 'PDS_PORT must be between 0 and 65535, got "70000"'],
    [
      { PDS_PUBLIC_URL: "localhost:2583" },
      'PDS_PUBLIC_URL must use http or https, got "localhost:2583"',
    ],
    [{ PDS_PUBLIC_URL: "not a url" }, 'PDS_PUBLIC_URL must be an absolute URL, got "not a url"'],
    [
      { APPVIEW_PUBLIC_URL: "http://x.test/api" },
      'APPVIEW_PUBLIC_URL must be an origin without a path, got "http://x.test/api"',
    ],
    [{ PDS_INVITE_REQUIRED: "maybe" }, 'PDS_INVITE_REQUIRED must be true or false, got "maybe"'],
    [{ PDS_TRUST_PROXY: "sometimes" }, 'PDS_TRUST_PROXY must be true or false, got "sometimes"'],
    [{ PDS_JWT_SECRET: "short" }, "PDS_JWT_SECRET must be at least 16 characters long"],
    [{ PDS_HANDLE_DOMAINS: "bad_domain" }, 'PDS_HANDLE_DOMAINS has an invalid domain "bad_domain"'],
    [{ PDS_HANDLE_DOMAINS: " , " }, "PDS_HANDLE_DOMAINS must list a domain"],
    [{ LOG_LEVEL: "loud" }, 'LOG_LEVEL must be debug, info, warn or error, got "loud"'],
    [
      { APPVIEW_INTERNAL_URL: "ftp://x" },
      'APPVIEW_INTERNAL_URL must use http or https, got "ftp://x"',
    ],
    [
      { PDS_EVENT_RETENTION_DAYS: "0" },
      'PDS_EVENT_RETENTION_DAYS must be between 1 and 3650, got "0"',
    ],
    [{ PDS_SIGNUPS_PER_HOUR: "0" }, 'PDS_SIGNUPS_PER_HOUR must be between 1 and 1000000, got "0"'],
    [{ PDS_LOGINS_PER_HOUR: "many" }, 'PDS_LOGINS_PER_HOUR must be an integer, got "many"'],
    [{ PDS_REPORTS_PER_HOUR: "0" }, 'PDS_REPORTS_PER_HOUR must be between 1 and 1000000, got "0"'],
    [
      { PDS_PLC_URL: "plc.directory" },
      'PDS_PLC_URL must be an absolute URL or off, got "plc.directory"',
    ],
    [
      { PDS_PLC_URL: "ftp://plc.example" },
      'PDS_PLC_URL must use http or https, got "ftp://plc.example"',
    ],
    [
      { PDS_PLC_URL: "https://user:pw@plc.example" },
      "PDS_PLC_URL must be a URL without query, fragment or credentials",
    ],
    [
      { PDS_CRAWLERS: "relay.example" },
      'PDS_CRAWLERS must be an absolute URL, got "relay.example"',
    ],
    [
      { PDS_CRAWLERS: Array.from({ length: 17 }, (_, i) => `https://r${i}.example`).join(",") },
      "PDS_CRAWLERS names 17 relays, at most 16",
    ],
    [
      { PDS_PASSWORD_HASH_CONCURRENCY: "0" },
      'PDS_PASSWORD_HASH_CONCURRENCY must be between 1 and 64, got "0"',
    ],
    [
      { PDS_PASSWORD_HASH_QUEUE: "-1" },
      'PDS_PASSWORD_HASH_QUEUE must be an integer, got "-1"',
    ],
    [
      { PDS_CORS_ORIGINS: "app.example/path" },
      'PDS_CORS_ORIGINS entries must be origins such as https://app.example, got "app.example/path"',
    ],
    [
      { PDS_CORS_ORIGINS: "https://app.example, https://app.example/path" },
      'PDS_CORS_ORIGINS entries must be origins such as https://app.example, got "https://app.example/path"',
    ],
  ];
  for (const [env, message] of cases) {
    assert.throws(() => loadPdsConfig(env), (err) => {
      assert.ok(err instanceof ConfigError);
      assert.equal(err.message, message);
      return true;
    });
  }
});

Deno.test("PDS_CORS_ORIGINS lists origins as browsers send them: a trailing slash is dropped", () => {
  const origins = (value: string) => loadPdsConfig({ PDS_CORS_ORIGINS: value }).corsOrigins;
  assert.deepEqual(origins("https://app.example/"), ["https://app.example"]);
  assert.deepEqual(
    origins(" http://127.0.0.1:4000/ , HTTPS://App.Example:443,"),
    ["http://127.0.0.1:4000", "https://app.example"],
  );
  assert.ok(Object.isFrozen(origins("https://app.example")));
  // Blank is unset: every origin (with the startup warning).
  assert.equal(origins("  "), null);
});

Deno.test("loadPdsConfig reads the subscribeRepos bounds and refuses bad ones naming the variable", () => {
  const config = loadPdsConfig({
    PDS_STREAM_MAX_BUFFERED_BYTES: "131072",
    PDS_STREAM_STALL_TIMEOUT_SECONDS: "5",
    PDS_STREAM_RESERVED_CONNECTIONS: "0",
  });
  assert.equal(config.streamMaxBufferedBytes, 131072);
  assert.equal(config.streamStallTimeoutSeconds, 5);
  assert.equal(config.streamReservedConnections, 0);
  assert.throws(() => loadPdsConfig({ PDS_STREAM_STALL_TIMEOUT_SECONDS: "0" }), {
    name: "ConfigError",
    message: 'PDS_STREAM_STALL_TIMEOUT_SECONDS must be between 1 and 86400, got "0"',
  });
  assert.throws(() => loadPdsConfig({ PDS_STREAM_MAX_BUFFERED_BYTES: "1k" }), {
    name: "ConfigError",
    message: 'PDS_STREAM_MAX_BUFFERED_BYTES must be an integer, got "1k"',
  });
});
