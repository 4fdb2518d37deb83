/**
 * Test helpers of the index's authentication: a real HTTP server publishing an account host DID
 * document (counting its requests, restartable on the same port) and token minting through the
 * same code path the account host uses (`deriveP256KeyPair` + `signJwt`, claims of spec 5.1).
 *
 * @module
 */

import { deriveP256KeyPair, type P256KeyPair } from "../../shared/keys.ts";
import { importSigningKey, type JwtClaims, signJwt } from "../../shared/jwt.ts";
import { encodeMultikeyUncompressed } from "../../shared/multikey.ts";
import { DID_DOCUMENT_PATH } from "./key_source.ts";

/** Service DID of the index in these tests (`APPVIEW_PUBLIC_URL=http://localhost:3000`). */
export const SERVICE_DID = "did:web:localhost%3A3000";
/** The account host's own DID in these tests. */
export const PDS_DID = "did:web:localhost%3A2583";
export const ALICE = "did:plc:alice234567abcdefghijklm";

/** An account host signing key: the raw pair and its WebCrypto signing key. */
export interface TestSigner {
  readonly keyPair: P256KeyPair;
  sign(claims: JwtClaims): Promise<string>;
}

/** Derives a signing key from `secret` the way the account host derives it from PDS_JWT_SECRET. */
export async function makeSigner(secret: string): Promise<TestSigner> {
  const keyPair = deriveP256KeyPair(secret, "pds-jwt-signing");
  const key = await importSigningKey(keyPair);
  return { keyPair, sign: (claims) => signJwt(claims, key, { typ: "at+jwt" }) };
}

/** Access-token claims of spec 5.1 at `nowMs`; `overrides` replace (or, as undefined, drop) claims. */
export function accessClaims(nowMs: number, overrides: Partial<JwtClaims> = {}): JwtClaims {
  const iat = Math.floor(nowMs / 1000);
  const claims: JwtClaims = {
    iss: PDS_DID,
    sub: ALICE,
    aud: SERVICE_DID,
    iat,
    exp: iat + 3600,
    jti: crypto.randomUUID(),
    scope: "com.atproto.access",
    ...overrides,
  };
  for (const [k, v] of Object.entries(claims)) if (v === undefined) delete claims[k];
  return claims;
}

/** The account host's DID document publishing `publicKey` in the spec 5.1 form. */
export function didDocument(publicKey: Uint8Array): Record<string, unknown> {
  return {
    "@context": ["https://www.w3.org/ns/did/v1", "https://w3id.org/security/multikey/v1"],
    id: PDS_DID,
    verificationMethod: [{
      id: `${PDS_DID}#atproto`,
      type: "Multikey",
      controller: PDS_DID,
      publicKeyMultibase: encodeMultikeyUncompressed(publicKey),
    }],
  };
}

/** What the document server answers. */
export interface DocAnswer {
  status?: number;
  /** JSON value, or a raw string body. */
  body: unknown;
}

/** A real HTTP server publishing a DID document; counts requests to the document path. */
export class DidDocServer implements AsyncDisposable {
  answer: DocAnswer;
  /** Requests received on `/.well-known/did.json`. */
  requests = 0;
  /** When set, requests hang until {@link release} (to test the fetch timeout). */
  hang = false;
  #server: Deno.HttpServer<Deno.NetAddr> | null = null;
  #port: number;
  #hanging: Array<() => void> = [];

  constructor(answer: DocAnswer) {
    this.answer = answer;
    this.#port = this.#listen(0);
  }

  get url(): string {
    return `http://127.0.0.1:${this.#port}`;
  }

  get running(): boolean {
    return this.#server !== null;
  }

  /** Serves `publicKey` from now on. */
  setKey(publicKey: Uint8Array): void {
    this.answer = { body: didDocument(publicKey) };
  }

  /** Stops listening (connections are refused) until {@link start}. */
  async stop(): Promise<void> {
    const server = this.#server;
    this.#server = null;
    this.release();
    if (server !== null) {
      await server.shutdown();
      await server.finished;
    }
  }

  /** Listens again on the same port. */
  start(): void {
    if (this.#server === null) this.#listen(this.#port);
  }

  /** Answers every hanging request. */
  release(): void {
    for (const resolve of this.#hanging.splice(0)) resolve();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.stop();
  }

  #listen(port: number): number {
    const server = Deno.serve(
      { hostname: "127.0.0.1", port, onListen() {} },
      (req) => this.#handle(req),
    );
    this.#server = server;
    return server.addr.port;
  }

  async #handle(req: Request): Promise<Response> {
    if (new URL(req.url).pathname !== DID_DOCUMENT_PATH) return new Response(null, { status: 404 });
    this.requests++;
    if (this.hang) await new Promise<void>((resolve) => this.#hanging.push(resolve));
    const { status = 200, body } = this.answer;
    return typeof body === "string"
      ? new Response(body, { status })
      : Response.json(body, { status });
  }
}

/** Encodes a JSON value as a base64url JWT segment. */
export function segment(value: unknown): string {
  const bytes = new TextEncoder().encode(JSON.stringify(value));
  return btoa(String.fromCharCode(...bytes)).replace(/\+/g, "-").replace(/\//g, "_")
    .replace(/=+$/, "");
}

/** An unsigned `alg: none` token. */
export function forgeNoneToken(claims: JwtClaims): string {
  return `${segment({ alg: "none", typ: "JWT" })}.${segment(claims)}.`;
}

/** An HS256 token whose HMAC key is the account host's public key bytes (key confusion). */
export async function forgeHs256Token(claims: JwtClaims, publicKey: Uint8Array): Promise<string> {
  const signingInput = `${segment({ alg: "HS256", typ: "JWT" })}.${segment(claims)}`;
  const key = await crypto.subtle.importKey(
    "raw",
    publicKey as Uint8Array<ArrayBuffer>,
    { name: "HMAC", hash: "SHA-256" },
    false,
    ["sign"],
  );
  const mac = new Uint8Array(
    await crypto.subtle.sign("HMAC", key, new TextEncoder().encode(signingInput)),
  );
  const sig = btoa(String.fromCharCode(...mac)).replace(/\+/g, "-").replace(/\//g, "_")
    .replace(/=+$/, "");
  return `${signingInput}.${sig}`;
}

/** A controllable clock in milliseconds. */
export class FakeClock {
  constructor(public ms: number) {}
  readonly now = (): number => this.ms;
  advance(seconds: number): void {
    this.ms += seconds * 1000;
  }
}

/** Captures log lines as parsed objects. */
export function captureLog(): { lines: Array<Record<string, unknown>>; sink: (l: string) => void } {
  const lines: Array<Record<string, unknown>> = [];
  return { lines, sink: (line) => lines.push(JSON.parse(line)) };
}
