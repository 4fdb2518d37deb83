/**
 * Identity: `com.atproto.identity.resolveHandle` (GET `?handle=` and POST `{handle}`; a value
 * starting with `did:` is looked up as a DID), `com.atproto.identity.updateHandle` (behaviour
 * 4.1 rule 11), `com.atproto.identity.resolveDid` (each hosted
 * account's DID document), `/.well-known/did.json` (the account host's own document, spec 4.1)
 * and `/.well-known/atproto-did` (handle -> DID by Host header).
 *
 * @module
 */

import { Hono } from "hono";
import { isValidHandle, normalizeHandle } from "../../shared/syntax.ts";
import type { PdsContext, PdsEnv } from "../context.ts";
import {
  type Account,
  AccountError,
  getAccount,
  getDidForHandle,
  isLookupDid,
} from "../accounts/accounts.ts";
import { updateHandle } from "../accounts/handle_update.ts";
import { requireAccess } from "../auth/access.ts";
import { accountDidDocument, serviceDidDocument } from "../../shared/did_doc.ts";
import { XrpcError } from "./errors.ts";
import { readJsonBody } from "./json_body.ts";

/** Routes of `com.atproto.identity.*`. */
export function identityRoutes(ctx: PdsContext): Hono<PdsEnv> {
  const app = new Hono<PdsEnv>();

  const resolveHandle = async (value: string | undefined) => {
    if (value === undefined || value.trim() === "") {
      throw new XrpcError(400, "InvalidRequest", "Parameter handle is required");
    }
    const account = await lookup(ctx, value.trim());
    if (account === null) {
      throw new XrpcError(400, "HandleNotFound", `Unable to resolve handle: ${q(value)}`);
    }
    return { did: account.did, handle: account.handle };
  };

  app.get("/xrpc/com.atproto.identity.resolveHandle", async (c) => {
    return c.json(await resolveHandle(c.req.query("handle")));
  });

  app.post("/xrpc/com.atproto.identity.resolveHandle", async (c) => {
    const body = await readJsonBody(c);
    const handle = typeof body.handle === "string" ? body.handle : undefined;
    return c.json(await resolveHandle(handle));
  });

  app.post(
    "/xrpc/com.atproto.identity.updateHandle",
    requireAccess(ctx, { full: true }),
    async (c) => {
      const body = await readJsonBody(c);
      try {
        await updateHandle(ctx, c.get("auth").did, body.handle ?? "");
        // At once, not only when the broadcaster reads the #identity event (within 25 ms): a
        // commit right after the change is pushed with the new handle.
        ctx.stream?.push?.forgetHandle(c.get("auth").did);
      } catch (err) {
        if (err instanceof AccountError) throw new XrpcError(400, err.code, err.message);
        throw err;
      }
      return c.body(null, 200);
    },
  );

  app.get("/xrpc/com.atproto.identity.resolveDid", async (c) => {
    const did = c.req.query("did")?.trim();
    if (!did) throw new XrpcError(400, "InvalidRequest", "Parameter did is required");
    if (!isLookupDid(did)) throw new XrpcError(400, "InvalidRequest", `Invalid did: ${q(did)}`);
    const account = await getAccount(ctx.kv, did);
    const keyPair = account === null ? null : await ctx.accountKeys.get(did);
    if (account === null || keyPair === null) {
      throw new XrpcError(400, "DidNotFound", `DID not found: ${q(did)}`);
    }
    return c.json({
      didDoc: accountDidDocument(did, account.handle, keyPair.publicKey, ctx.config.publicUrl),
    });
  });

  return app;
}

/** `/.well-known/*` documents. */
export function wellKnownRoutes(ctx: PdsContext): Hono<PdsEnv> {
  const app = new Hono<PdsEnv>();
  const didJson = JSON.stringify(
    serviceDidDocument(
      ctx.config.serviceDid,
      ctx.serviceKeys.keyPair.publicKey,
      ctx.config.publicUrl,
    ),
  );

  app.get("/.well-known/did.json", (c) => {
    c.header("Content-Type", "application/json");
    c.header("Cache-Control", "public, max-age=300");
    return c.body(didJson);
  });

  app.get("/.well-known/atproto-did", async (c) => {
    const host = new URL(c.req.url).hostname;
    const did = isValidHandle(host) ? await getDidForHandle(ctx.kv, host) : null;
    if (did === null) return c.text("User not found", 404);
    return c.text(did);
  });

  return app;
}

async function lookup(ctx: PdsContext, value: string): Promise<Account | null> {
  if (value.startsWith("did:")) return isLookupDid(value) ? await getAccount(ctx.kv, value) : null;
  if (!isValidHandle(value)) return null;
  const did = await getDidForHandle(ctx.kv, normalizeHandle(value));
  return did === null ? null : await getAccount(ctx.kv, did);
}

function q(value: string): string {
  return JSON.stringify(value.length > 100 ? value.slice(0, 100) + "..." : value);
}
