// Spec 5.3: once at startup, one warning for each active relaxed setting.

import assert from "node:assert/strict";
import { createLogger } from "../shared/log.ts";
import { loadAppviewConfig } from "./config.ts";
import {
  WARN_AUTH_OFF,
  WARN_CORS_UNSET,
  WARN_INGEST_SECRET_UNSET,
  warnRelaxedSettings,
} from "./startup_warnings.ts";

function capture() {
  const lines: Array<Record<string, unknown>> = [];
  return { lines, log: createLogger("appview", { sink: (l) => lines.push(JSON.parse(l)) }) };
}

const STRICT = {
  APPVIEW_AUTH_REQUIRED: "true",
  APPVIEW_CORS_ORIGINS: "https://app.example",
  APPVIEW_INGEST_SECRET: "s3cret-value",
};

const CASES: Array<{ name: string; env: Record<string, string>; want: string[] }> = [
  {
    name: "all three relaxed settings",
    env: { APPVIEW_AUTH_REQUIRED: "false" },
    want: [WARN_AUTH_OFF, WARN_CORS_UNSET, WARN_INGEST_SECRET_UNSET],
  },
  { name: "defaults (auth on)", env: {}, want: [WARN_CORS_UNSET, WARN_INGEST_SECRET_UNSET] },
  { name: "all strict", env: STRICT, want: [] },
  {
    name: "auth off only",
    env: { ...STRICT, APPVIEW_AUTH_REQUIRED: "false" },
    want: [WARN_AUTH_OFF],
  },
  {
    name: "CORS unset only",
    env: { ...STRICT, APPVIEW_CORS_ORIGINS: "" },
    want: [WARN_CORS_UNSET],
  },
  {
    name: "ingest secret unset only",
    env: { ...STRICT, APPVIEW_INGEST_SECRET: "" },
    want: [WARN_INGEST_SECRET_UNSET],
  },
];

for (const { name, env, want } of CASES) {
  Deno.test(`warnRelaxedSettings logs each active relaxed setting once: ${name}`, () => {
    const { lines, log } = capture();
    const logged = warnRelaxedSettings(loadAppviewConfig(env), log);
    assert.deepEqual(logged, want);
    assert.deepEqual(lines.map((l) => [l.level, l.msg]), want.map((w) => ["warn", w]));
  });
}

Deno.test("relaxed-setting warnings name the variable and its effect", () => {
  assert.equal(
    WARN_AUTH_OFF,
    "APPVIEW_AUTH_REQUIRED is false: private endpoints serve any caller for any did",
  );
  assert.equal(
    WARN_CORS_UNSET,
    "APPVIEW_CORS_ORIGINS is unset: responses carry Access-Control-Allow-Origin: *",
  );
  assert.equal(
    WARN_INGEST_SECRET_UNSET,
    "APPVIEW_INGEST_SECRET is unset: /internal/ingest-commit accepts unauthenticated writes",
  );
});
