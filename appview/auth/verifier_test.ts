// Spec 5.2 (verification on the index), 4.2 rule 9, 5.3 (APPVIEW_AUTH_REQUIRED), part 7, part 8.
// Tokens are minted with the account host's code path (deriveP256KeyPair + signJwt, claims of
// spec 5.1); the DID document comes from a real HTTP server on port 0.

import assert from "node:assert/strict";
import { Hono } from "hono";
import { createLogger, silentLogger } from "../../shared/log.ts";
import type { JwtClaims } from "../../shared/jwt.ts";
import { onApiError } from "../api/errors.ts";
import { loadAppviewConfig } from "../config.ts";
import {
  type AuthEnv,
  checkSubject,
  createTokenVerifier,
  requireViewer,
  TokenVerifier,
} from "./verifier.ts";
import { PdsKeySource } from "./key_source.ts";
import {
  accessClaims,
  ALICE,
  DidDocServer,
  didDocument,
  forgeHs256Token,
  forgeNoneToken,
  makeSigner,
  segment,
  SERVICE_DID,
  type TestSigner,
} from "../_test_helpers.ts";
import { captureLogRecords, ManualClock } from "../../runtime/_test_helpers.ts";

const T0 = Date.parse("2025-06-01T12:00:00Z");

/** A small app with one private endpoint, as the query API mounts it. */
function privateApp(verifier: TokenVerifier): Hono<AuthEnv> {
  const app = new Hono<AuthEnv>();
  app.onError(onApiError(silentLogger));
  app.get("/api/notifications/count", requireViewer(verifier), (c) => {
    checkSubject(c, c.req.query("did") ?? "");
    return c.json({ viewer: c.get("viewerDid") ?? null });
  });
  return app;
}

interface Setup extends AsyncDisposable {
  clock: ManualClock;
  signer: TestSigner;
  server: DidDocServer;
  verifier: TokenVerifier;
  app: Hono<AuthEnv>;
  logLines: Array<Record<string, unknown>>;
  call(auth: string | null, did?: string): Promise<{ status: number; body: unknown }>;
}

async function setup(
  opts: { authRequired?: boolean; warm?: boolean; pdsUrl?: (url: string) => string } = {},
): Promise<Setup> {
  const clock = new ManualClock(T0);
  const signer = await makeSigner("pds secret one");
  const server = new DidDocServer({ body: didDocument(signer.keyPair.publicKey) });
  const { lines, sink } = captureLogRecords();
  const verifier = createTokenVerifier(
    {
      serviceDid: SERVICE_DID,
      pdsUrl: opts.pdsUrl ? opts.pdsUrl(server.url) : server.url,
      authRequired: opts.authRequired ?? true,
    },
    { log: createLogger("appview.auth", { sink }), now: clock.now },
  );
  if (opts.warm ?? true) await verifier.keySource.warmUp();
  const app = privateApp(verifier);
  return {
    clock,
    signer,
    server,
    verifier,
    app,
    logLines: lines,
    async call(auth, did = ALICE) {
      const headers: Record<string, string> = auth === null ? {} : { authorization: auth };
      const res = await app.request(`/api/notifications/count?did=${encodeURIComponent(did)}`, {
        headers,
      });
      return { status: res.status, body: await res.json() };
    },
    [Symbol.asyncDispose]: () => server.stop(),
  };
}

const ok = { status: 200, body: { viewer: ALICE } };
const missing = {
  status: 401,
  body: { error: "AuthMissing", message: "Bearer authorization header is missing" },
};
const invalid = (message: string) => ({ status: 401, body: { error: "TokenInvalid", message } });
const forbidden = {
  status: 403,
  body: { error: "Forbidden", message: "Token subject does not match the requested did" },
};

interface Row {
  name: string;
  /** Builds the Authorization header (null: none) from the setup. */
  auth: (s: Setup) => Promise<string | null>;
  did?: string;
  want: { status: number; body: unknown };
}

const bearer = (claims: (nowMs: number) => JwtClaims) => async (s: Setup) =>
  `Bearer ${await s.signer.sign(claims(s.clock.ms))}`;

const ROWS: Row[] = [
  { name: "valid access token", auth: bearer((t) => accessClaims(t)), want: ok },
  // Spec 5.2 rule 1: header forms.
  {
    name: "lower-case scheme",
    auth: async (s) => `bearer ${await s.signer.sign(accessClaims(s.clock.ms))}`,
    want: ok,
  },
  {
    name: "upper-case scheme",
    auth: async (s) => `BEARER ${await s.signer.sign(accessClaims(s.clock.ms))}`,
    want: ok,
  },
  { name: "missing header", auth: () => Promise.resolve(null), want: missing },
  { name: "empty header", auth: () => Promise.resolve(""), want: missing },
  {
    name: "another scheme",
    auth: async (s) => `Basic ${await s.signer.sign(accessClaims(s.clock.ms))}`,
    want: missing,
  },
  {
    name: "token without a scheme",
    auth: (s) => s.signer.sign(accessClaims(s.clock.ms)),
    want: missing,
  },
  { name: "scheme without a token", auth: () => Promise.resolve("Bearer"), want: missing },
  { name: "scheme and empty token", auth: () => Promise.resolve("Bearer   "), want: missing },
  {
    name: "two tokens",
    auth: async (s) => `Bearer ${await s.signer.sign(accessClaims(s.clock.ms))} extra`,
    want: missing,
  },
  // Spec 5.2 rule 2: signature, ES256 only.
  {
    name: "token signed by another key",
    auth: async (s) =>
      `Bearer ${await (await makeSigner("attacker")).sign(accessClaims(s.clock.ms))}`,
    want: invalid("Token signature is invalid"),
  },
  {
    name: "claims altered after signing",
    auth: async (s) => {
      const [h, , sig] = (await s.signer.sign(accessClaims(s.clock.ms))).split(".");
      const claims = accessClaims(s.clock.ms, { sub: "did:plc:mallory" });
      return `Bearer ${h}.${segment(claims)}.${sig}`;
    },
    did: "did:plc:mallory",
    want: invalid("Token signature is invalid"),
  },
  {
    name: "alg none",
    auth: (s) => Promise.resolve(`Bearer ${forgeNoneToken(accessClaims(s.clock.ms))}`),
    want: invalid("Token algorithm is not ES256: none"),
  },
  {
    name: "HS256 forged with the public key bytes",
    auth: async (s) =>
      `Bearer ${await forgeHs256Token(accessClaims(s.clock.ms), s.signer.keyPair.publicKey)}`,
    want: invalid("Token algorithm is not ES256: HS256"),
  },
  {
    name: "unparseable token",
    auth: () => Promise.resolve("Bearer not-a-jwt"),
    want: invalid("Token is malformed"),
  },
  // Spec 5.2 rule 2 and part 8: exp with 30 s leeway.
  {
    name: "expired by 29 s",
    auth: bearer((t) => accessClaims(t, { exp: Math.floor(t / 1000) - 29 })),
    want: ok,
  },
  {
    name: "expired by 31 s",
    auth: bearer((t) => accessClaims(t, { exp: Math.floor(t / 1000) - 31 })),
    want: invalid("Token has expired"),
  },
  {
    name: "no exp",
    auth: bearer((t) => accessClaims(t, { exp: undefined })),
    want: invalid("Token has no expiration"),
  },
  // Scope.
  {
    name: "refresh-scoped token",
    auth: bearer((t) =>
      accessClaims(t, { scope: "com.atproto.refresh", aud: "did:web:localhost%3A2583" })
    ),
    want: invalid(
      "Token scope is not com.atproto.access or com.atproto.appPass: com.atproto.refresh",
    ),
  },
  {
    name: "no scope",
    auth: bearer((t) => accessClaims(t, { scope: undefined })),
    want: invalid("Token scope is not com.atproto.access or com.atproto.appPass: (missing)"),
  },
  // An app password's session (behaviour 4.1 rule 12) reads its own private views.
  {
    name: "app-password-scoped token",
    auth: bearer((t) => accessClaims(t, { scope: "com.atproto.appPass" })),
    want: ok,
  },
  {
    name: "privileged app-password scope (not issued here)",
    auth: bearer((t) => accessClaims(t, { scope: "com.atproto.appPassPrivileged" })),
    want: invalid(
      "Token scope is not com.atproto.access or com.atproto.appPass: com.atproto.appPassPrivileged",
    ),
  },
  // Audience: TokenInvalid, not Forbidden (spec 5.2 rule 2).
  {
    name: "wrong audience",
    auth: bearer((t) => accessClaims(t, { aud: "did:web:old.example" })),
    want: invalid("Token audience is not did:web:localhost%3A3000: did:web:old.example"),
  },
  {
    name: "no audience",
    auth: bearer((t) => accessClaims(t, { aud: undefined })),
    want: invalid("Token audience is not did:web:localhost%3A3000: (missing)"),
  },
  // Spec 5.2 rule 3: subject vs requested did, exact equality.
  {
    name: "sub different from did",
    auth: bearer((t) => accessClaims(t)),
    did: "did:plc:bob",
    want: forbidden,
  },
  {
    name: "sub a prefix of did",
    auth: bearer((t) => accessClaims(t)),
    did: `${ALICE}x`,
    want: forbidden,
  },
  {
    name: "did a prefix of sub",
    auth: bearer((t) => accessClaims(t)),
    did: ALICE.slice(0, -1),
    want: forbidden,
  },
  { name: "empty did", auth: bearer((t) => accessClaims(t)), did: "", want: forbidden },
];

for (const row of ROWS) {
  Deno.test(`private endpoint answers ${row.want.status} for ${row.name}`, async () => {
    await using s = await setup();
    const got = await s.call(await row.auth(s), row.did);
    assert.deepEqual(got, row.want);
    // The startup fetch only: failures within 60 s of it cause no re-fetch (spec 5.2 rule 6).
    assert.equal(s.server.requests, 1);
  });
}

Deno.test("a repeated token is served from the cache until exp plus leeway", async () => {
  await using s = await setup();
  const token = await s.signer.sign(accessClaims(s.clock.ms));
  for (let i = 0; i < 3; i++) assert.deepEqual(await s.call(`Bearer ${token}`), ok);
  assert.equal(s.verifier.cachedTokens, 1);
  s.clock.advance(3600 + 29);
  assert.deepEqual(await s.call(`Bearer ${token}`), ok);
  s.clock.advance(2);
  assert.deepEqual(await s.call(`Bearer ${token}`), invalid("Token has expired"));
  assert.equal(s.verifier.cachedTokens, 0);
});

Deno.test("a cached token still gets the subject check", async () => {
  await using s = await setup();
  const token = await s.signer.sign(accessClaims(s.clock.ms));
  assert.deepEqual(await s.call(`Bearer ${token}`), ok);
  assert.deepEqual(await s.call(`Bearer ${token}`, "did:plc:bob"), forbidden);
});

Deno.test("rejected tokens are not cached", async () => {
  await using s = await setup();
  await s.call(`Bearer ${await s.signer.sign(accessClaims(s.clock.ms, { aud: "did:web:x" }))}`);
  await s.call(`Bearer ${forgeNoneToken(accessClaims(s.clock.ms))}`);
  assert.equal(s.verifier.cachedTokens, 0);
});

Deno.test("the token cache is bounded and drops the oldest entries", async () => {
  const clock = new ManualClock(T0);
  const signer = await makeSigner("pds secret one");
  await using server = new DidDocServer({ body: didDocument(signer.keyPair.publicKey) });
  const keySource = new PdsKeySource({ pdsUrl: server.url, log: silentLogger, now: clock.now });
  const verifier = new TokenVerifier({
    serviceDid: SERVICE_DID,
    authRequired: true,
    keySource,
    log: silentLogger,
    now: clock.now,
    maxCachedTokens: 3,
  });
  const tokens = await Promise.all(
    [0, 1, 2, 3, 4].map((i) => signer.sign(accessClaims(clock.ms, { sub: `did:plc:user${i}` }))),
  );
  for (const t of tokens) await verifier.verifyToken(t);
  assert.equal(verifier.cachedTokens, 3);
  // Expired entries go first: after every token expired, a new one leaves a cache of one.
  clock.advance(3600 + 31);
  await verifier.verifyToken(await signer.sign(accessClaims(clock.ms)));
  assert.equal(verifier.cachedTokens, 1);
});

Deno.test("authentication off: no token is read, any did is served, no key is fetched", async () => {
  await using s = await setup({ authRequired: false, warm: false });
  assert.deepEqual(await s.call(null, "did:plc:anyone"), { status: 200, body: { viewer: null } });
  assert.deepEqual(await s.call("Bearer garbage", "did:plc:bob"), {
    status: 200,
    body: { viewer: null },
  });
  assert.equal(s.server.requests, 0);
});

Deno.test("checkSubject fails closed on a route without requireViewer", async () => {
  const app = new Hono();
  app.onError(onApiError(silentLogger));
  app.get("/x", (c) => {
    checkSubject(c, ALICE);
    return c.text("served");
  });
  const res = await app.request("/x");
  assert.equal(res.status, 500);
  assert.deepEqual(await res.json(), {
    error: "InternalServerError",
    message: "Internal server error",
  });
});

Deno.test("PDS_INTERNAL_URL wins over PDS_PUBLIC_URL and a trailing slash is handled", async () => {
  const signer = await makeSigner("pds secret one");
  await using server = new DidDocServer({ body: didDocument(signer.keyPair.publicKey) });
  await using decoy = new DidDocServer({ body: didDocument(signer.keyPair.publicKey) });
  const config = loadAppviewConfig({
    APPVIEW_PUBLIC_URL: "http://localhost:3000",
    PDS_PUBLIC_URL: `${decoy.url}/`,
    PDS_INTERNAL_URL: `${server.url}/`,
  });
  const verifier = createTokenVerifier(config, { log: silentLogger });
  assert.equal(verifier.keySource.documentUrl, `${server.url}/.well-known/did.json`);
  const res = await privateApp(verifier).request(`/api/notifications/count?did=${ALICE}`, {
    headers: { authorization: `Bearer ${await signer.sign(accessClaims(Date.now()))}` },
  });
  assert.equal(res.status, 200);
  assert.deepEqual(await res.json(), { viewer: ALICE });
  assert.equal(server.requests, 1);
  assert.equal(decoy.requests, 0);
});

Deno.test("PDS_PUBLIC_URL with a trailing slash is used when there is no internal URL", async () => {
  await using s = await setup({ pdsUrl: (url) => `${url}/` });
  assert.equal(s.verifier.keySource.documentUrl, `${s.server.url}/.well-known/did.json`);
  assert.deepEqual(await s.call(`Bearer ${await s.signer.sign(accessClaims(s.clock.ms))}`), ok);
  const config = loadAppviewConfig({ PDS_PUBLIC_URL: `${s.server.url}//` });
  assert.equal(config.pdsUrl, s.server.url);
});
