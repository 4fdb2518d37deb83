/**
 * Token checks on the index's private endpoints (docs/behaviour.md 12: >= 30,000/s for repeated
 * tokens). Requests go through the real middleware (`requireViewer` + `checkSubject`) of a small
 * Hono app, in process via `app.request()` (no sockets); the DID document is served by a real
 * HTTP server on port 0 and fetched once. Requests are issued in waves of 64 concurrent.
 *
 * - cached: one access token repeated (verified once, then served from the token cache);
 * - fresh: a distinct token per request (a full ES256 verification each); informational.
 *
 * Run alone: `deno task bench auth` (with the server tasks' V8 flags).
 */

import { Hono } from "hono";
import { deriveP256KeyPair } from "../../shared/keys.ts";
import { importSigningKey, signJwt } from "../../shared/jwt.ts";
import { encodeMultikeyUncompressed } from "../../shared/multikey.ts";
import { silentLogger } from "../../shared/log.ts";
import { onApiError } from "../../appview/api/errors.ts";
import {
  type AuthEnv,
  checkSubject,
  createTokenVerifier,
  requireViewer,
} from "../../appview/auth/verifier.ts";
import { type BenchResult, printTable } from "./_types.ts";

const SERVICE_DID = "did:web:localhost%3A3000";
const DID = "did:plc:benchbenchbenchbenchbenc";
const CACHED_REQUESTS = 200_000;
const FRESH_REQUESTS = 3_000;
const WAVE = 64;
const CACHED_BUDGET = 30_000;

export async function benchAuth(): Promise<BenchResult[]> {
  const keyPair = deriveP256KeyPair("auth bench secret", "pds/service-signing-key/v1");
  const signingKey = await importSigningKey(keyPair);
  const doc = {
    id: "did:web:localhost%3A2583",
    verificationMethod: [{ publicKeyMultibase: encodeMultikeyUncompressed(keyPair.publicKey) }],
  };
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    () => Response.json(doc),
  );
  try {
    const verifier = createTokenVerifier(
      {
        serviceDid: SERVICE_DID,
        pdsUrl: `http://127.0.0.1:${server.addr.port}`,
        authRequired: true,
      },
      { log: silentLogger },
    );
    await verifier.keySource.warmUp();
    const app = new Hono<AuthEnv>();
    app.onError(onApiError(silentLogger));
    app.get("/api/notifications/count", requireViewer(verifier), (c) => {
      checkSubject(c, c.req.query("did") ?? "");
      return c.json({ count: 0 });
    });

    const iat = Math.floor(Date.now() / 1000);
    const sign = () =>
      signJwt(
        {
          iss: "did:web:localhost%3A2583",
          sub: DID,
          aud: SERVICE_DID,
          iat,
          exp: iat + 3600,
          jti: crypto.randomUUID(),
          scope: "com.atproto.access",
        },
        signingKey,
        { typ: "at+jwt" },
      );
    const url = `/api/notifications/count?did=${encodeURIComponent(DID)}`;
    const request = async (token: string) => {
      const res = await app.request(url, { headers: { authorization: `Bearer ${token}` } });
      if (res.status !== 200) throw new Error(`auth bench: unexpected status ${res.status}`);
      await res.body?.cancel();
    };
    const run = async (tokens: (i: number) => string, n: number) => {
      const start = performance.now();
      for (let i = 0; i < n; i += WAVE) {
        const wave = [];
        for (let j = i; j < Math.min(n, i + WAVE); j++) wave.push(request(tokens(j)));
        await Promise.all(wave);
      }
      return n / ((performance.now() - start) / 1000);
    };

    const repeated = await sign();
    await run(() => repeated, 5_000); // warm-up (JIT)
    const cached = await run(() => repeated, CACHED_REQUESTS);

    const fresh = await Promise.all(Array.from({ length: FRESH_REQUESTS }, sign));
    const freshRate = await run((i) => fresh[i], FRESH_REQUESTS);

    return [
      {
        name: "auth: token checks, repeated token (cached; Hono app.request)",
        figure: cached,
        unit: "checks/s",
        budget: `>= ${CACHED_BUDGET.toLocaleString("en-US")} checks/s`,
        pass: cached >= CACHED_BUDGET,
      },
      {
        name: "auth: token checks, fresh tokens (ES256 verify; Hono app.request)",
        figure: freshRate,
        unit: "checks/s",
        budget: "-",
        pass: true,
      },
    ];
  } finally {
    await server.shutdown();
  }
}

if (import.meta.main) printTable(await benchAuth());
