/**
 * `com.atproto.repo.*` over XRPC (docs/protocol.md 3): thin adapters over the one
 * write path `applyWrites` and the repository reader; `uploadBlob` streams into the blob store.
 *
 * @module
 */

import { type Context, Hono } from "hono";
import { isValidHandle, isValidNsid, isValidRecordKey } from "../../shared/syntax.ts";
import { parseAtUri } from "../../shared/at_uri.ts";
import type { PdsContext, PdsEnv } from "../context.ts";
import { getAccount, getDidForHandle, isLookupDid } from "../accounts/accounts.ts";
import { accountDidDocument } from "../../shared/did_doc.ts";
import { requireAccess } from "../auth/access.ts";
import { RepoError } from "../repo/errors.ts";
import type { ApplyWritesResult } from "../repo/repository.ts";
import type { RepoWrite, WriteResult } from "../repo/prepare_writes.ts";
import { getRecord, listCollections, listRecords } from "../repo/reader.ts";
import { getRecordTakedown } from "../moderation/record_takedown.ts";
import { RECORD_TAKENDOWN, recordTakendownMessage } from "./record_takedowns.ts";
import {
  BlobTooLargeError,
  MAX_BLOB_BYTES,
  normalizeMimeType,
  putBlob,
  readLimited,
} from "../blobs/blob_store.ts";
import { XrpcError } from "./errors.ts";
import { readJsonBody } from "./json_body.ts";

const NSID = "com.atproto.repo";
const WRITE_TYPES = {
  create: `${NSID}.applyWrites#create`,
  update: `${NSID}.applyWrites#update`,
  delete: `${NSID}.applyWrites#delete`,
} as const;

/** Routes of `com.atproto.repo.*`. */
export function repoRoutes(ctx: PdsContext): Hono<PdsEnv> {
  const app = new Hono<PdsEnv>();
  const repos = ctx.repos;
  const write = async (did: string, writes: RepoWrite[], swapCommit?: string) => {
    try {
      return await repos.applyWrites(did, writes, { swapCommit });
    } catch (err) {
      throw toXrpcError(err);
    }
  };

  app.post(`/xrpc/${NSID}.createRecord`, requireAccess(ctx), async (c) => {
    const body = await readJsonBody(c);
    const did = await ownRepo(ctx, c, body.repo);
    const collection = requireString(body, "collection");
    const rkey = optional(body, "rkey");
    const validate = optionalBoolean(body, "validate");
    const res = await write(
      did,
      [{ action: "create", collection, rkey, record: body.record, validate }],
      optional(body, "swapCommit"),
    );
    return c.json(recordWritten(res));
  });

  app.post(`/xrpc/${NSID}.putRecord`, requireAccess(ctx), async (c) => {
    const body = await readJsonBody(c);
    const did = await ownRepo(ctx, c, body.repo);
    const swapRecord = body.swapRecord === null ? null : optional(body, "swapRecord");
    const res = await write(did, [{
      action: "update",
      collection: requireString(body, "collection"),
      rkey: requireString(body, "rkey"),
      record: body.record,
      validate: optionalBoolean(body, "validate"),
      ...("swapRecord" in body ? { swapRecord } : {}),
    }], optional(body, "swapCommit"));
    return c.json(recordWritten(res));
  });

  app.post(`/xrpc/${NSID}.deleteRecord`, requireAccess(ctx), async (c) => {
    const body = await readJsonBody(c);
    let collection = optional(body, "collection");
    let rkey = optional(body, "rkey");
    // Spec 4.1: a record URI is accepted in place of repo, collection and rkey; given together,
    // they must name the same record.
    const uri = optional(body, "uri");
    let did: string;
    if (uri === undefined) {
      did = await ownRepo(ctx, c, body.repo);
    } else {
      let parsed;
      try {
        parsed = parseAtUri(uri);
      } catch (err) {
        throw new XrpcError(400, "InvalidRequest", (err as Error).message);
      }
      did = await ownRepo(ctx, c, body.repo ?? parsed.authority);
      if (body.repo !== undefined && body.repo !== null) {
        const named = await resolveRepo(ctx, parsed.authority).catch(() => null);
        if (named !== did) throw uriMismatch("repo", String(body.repo), uri);
      }
      if (collection !== undefined && collection !== parsed.collection) {
        throw uriMismatch("collection", collection, uri);
      }
      if (rkey !== undefined && rkey !== parsed.rkey) throw uriMismatch("rkey", rkey, uri);
      ({ collection, rkey } = parsed);
    }
    if (collection === undefined) throw missing("collection");
    if (rkey === undefined) throw missing("rkey");
    const swapRecord = optional(body, "swapRecord");
    const res = await write(did, [{
      action: "delete",
      collection,
      rkey,
      ...(swapRecord !== undefined ? { swapRecord } : {}),
    }], optional(body, "swapCommit"));
    return c.json(commitMeta(res));
  });

  app.post(`/xrpc/${NSID}.applyWrites`, requireAccess(ctx), async (c) => {
    const body = await readJsonBody(c);
    const did = await ownRepo(ctx, c, body.repo);
    if (!Array.isArray(body.writes)) throw missing("writes");
    const validate = optionalBoolean(body, "validate");
    const writes = body.writes.map((w, i) => toRepoWrite(w, i, validate));
    const res = await write(did, writes, optional(body, "swapCommit"));
    return c.json({
      ...commitMeta(res),
      results: res.results.map((r) =>
        r.action === "delete" ? { $type: `${NSID}.applyWrites#deleteResult` } : {
          $type: `${NSID}.applyWrites#${r.action}Result`,
          uri: r.uri,
          cid: r.cid,
          ...validationOf(r),
        }
      ),
    });
  });

  app.get(`/xrpc/${NSID}.getRecord`, async (c) => {
    const did = await resolveRepo(ctx, c.req.query("repo"), "Parameter");
    const collection = requireQuery(c, "collection");
    const rkey = requireQuery(c, "rkey");
    const record = await getRecord(ctx.kv, did, collection, rkey);
    const wanted = c.req.query("cid");
    if (record === null) {
      // Taken down by the operator (docs/behaviour.md 4.1 rule 15): said so, not "not found".
      const held = await getRecordTakedown(ctx.kv, did, collection, rkey);
      if (held !== null && (wanted === undefined || wanted === held.cid)) {
        throw new XrpcError(400, RECORD_TAKENDOWN, recordTakendownMessage(held.uri));
      }
    }
    if (record === null || (wanted !== undefined && wanted !== record.cid)) {
      throw new XrpcError(
        400,
        "RecordNotFound",
        `Could not locate record: at://${did}/${collection}/${rkey}`,
      );
    }
    return c.json(record);
  });

  app.get(`/xrpc/${NSID}.listRecords`, async (c) => {
    const did = await resolveRepo(ctx, c.req.query("repo"), "Parameter");
    const collection = requireQuery(c, "collection");
    if (!isValidNsid(collection)) {
      throw new XrpcError(400, "InvalidRequest", `Invalid collection: ${q(collection)}`);
    }
    const limit = parseLimit(c.req.query("limit"), 50, 100);
    const cursor = c.req.query("cursor") || undefined;
    // The cursor is the last rkey returned; anything else (say, too long for a KV key) is refused.
    if (cursor !== undefined && !isValidRecordKey(cursor)) {
      throw new XrpcError(400, "InvalidRequest", `Invalid cursor: ${q(cursor)}`);
    }
    const reverse = parseBool(c.req.query("reverse"), "reverse");
    return c.json(await listRecords(ctx.kv, did, collection, { limit, cursor, reverse }));
  });

  app.get(`/xrpc/${NSID}.describeRepo`, async (c) => {
    const did = await resolveRepo(ctx, c.req.query("repo"), "Parameter");
    const [account, keyPair, collections] = await Promise.all([
      getAccount(ctx.kv, did),
      ctx.accountKeys.get(did),
      listCollections(ctx.kv, did),
    ]);
    if (account === null || keyPair === null) throw repoNotFound(did);
    return c.json({
      handle: account.handle,
      did,
      didDoc: accountDidDocument(did, account.handle, keyPair.publicKey, ctx.config.publicUrl),
      collections,
      handleIsCorrect: true,
    });
  });

  app.post(`/xrpc/${NSID}.uploadBlob`, requireAccess(ctx), async (c) => {
    const did = c.get("auth").did;
    const declared = c.req.header("content-length");
    if (declared !== undefined && Number(declared) > MAX_BLOB_BYTES) throw blobTooLarge();
    let bytes: Uint8Array;
    try {
      bytes = await readLimited(c.req.raw.body, MAX_BLOB_BYTES);
    } catch (err) {
      if (err instanceof BlobTooLargeError) throw blobTooLarge();
      throw err;
    }
    if (bytes.length === 0) throw new XrpcError(400, "InvalidRequest", "Blob is empty");
    const blob = await putBlob(ctx.kv, did, bytes, {
      mimeType: normalizeMimeType(c.req.header("content-type")),
      now: ctx.now(),
    });
    return c.json({ blob });
  });

  return app;
}

/** Maps a repository domain error to its XRPC error (all are 400 in the reference). */
export function toXrpcError(err: unknown): unknown {
  if (err instanceof RepoError) return new XrpcError(400, err.code, err.message);
  return err;
}

/**
 * Resolves a `repo` (DID or handle) of an existing account to its DID. `kind` says where it came
 * from, for the message when it is missing: a body `Member` or a query `Parameter`.
 */
export async function resolveRepo(
  ctx: PdsContext,
  repo: unknown,
  kind: "Member" | "Parameter" = "Member",
): Promise<string> {
  if (repo === undefined || repo === null || (typeof repo === "string" && repo.trim() === "")) {
    throw new XrpcError(400, "InvalidRequest", `${kind} repo is required`);
  }
  if (typeof repo !== "string") {
    const type = Array.isArray(repo) ? "array" : typeof repo;
    throw new XrpcError(400, "InvalidRequest", `Invalid repo: expected a string, got ${type}`);
  }
  const id = repo.trim();
  const isDid = id.startsWith("did:");
  // Checked before any KV read: an oversized value would exceed the KV key size (a 500).
  if (isDid ? !isLookupDid(id) : !isValidHandle(id)) {
    throw new XrpcError(400, "InvalidRequest", `Invalid repo: ${q(id)}`);
  }
  const did = isDid
    ? (await getAccount(ctx.kv, id) ? id : null)
    : await getDidForHandle(ctx.kv, id);
  if (did === null) throw repoNotFound(id);
  return did;
}

/** The DID of `repo`, which must be the authenticated account's own repository. */
async function ownRepo(ctx: PdsContext, c: Context<PdsEnv>, repo: unknown): Promise<string> {
  // The token's own DID needs no lookup: the write path answers RepoNotFound for a DID without
  // an account (its signing key is looked up anyway).
  if (typeof repo === "string" && repo === c.get("auth").did) return repo;
  const did = await resolveRepo(ctx, repo);
  if (did !== c.get("auth").did) {
    throw new XrpcError(403, "Forbidden", `Token subject does not own repo: ${q(String(repo))}`);
  }
  return did;
}

function toRepoWrite(raw: unknown, index: number, validate: boolean | undefined): RepoWrite {
  if (raw === null || typeof raw !== "object" || Array.isArray(raw)) {
    throw new XrpcError(400, "InvalidRequest", `Write ${index} is not an object`);
  }
  const w = raw as Record<string, unknown>;
  const collection = requireString(w, "collection");
  switch (w.$type) {
    case WRITE_TYPES.create:
      return { action: "create", collection, rkey: optional(w, "rkey"), record: w.value, validate };
    case WRITE_TYPES.update:
      return {
        action: "update",
        collection,
        rkey: requireString(w, "rkey"),
        record: w.value,
        validate,
      };
    case WRITE_TYPES.delete:
      return { action: "delete", collection, rkey: requireString(w, "rkey") };
    default:
      throw new XrpcError(
        400,
        "InvalidRequest",
        `Write ${index} has an unknown $type: ${q(String(w.$type))}`,
      );
  }
}

/** Answer of `createRecord` and `putRecord`: the one record written and the commit. */
function recordWritten(res: ApplyWritesResult) {
  const [result] = res.results;
  return { uri: result.uri, cid: result.cid, ...commitMeta(res), ...validationOf(result) };
}

/** `validationStatus` of a written record, absent when the caller asked for no validation. */
function validationOf(result: WriteResult): { validationStatus?: string } {
  return result.validationStatus === undefined ? {} : { validationStatus: result.validationStatus };
}

function commitMeta(res: ApplyWritesResult): { commit?: { cid: string; rev: string } } {
  return res.commit ? { commit: { cid: res.commit.cid, rev: res.commit.rev } } : {};
}

function optional(body: Record<string, unknown>, name: string): string | undefined {
  const value = body[name];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "string") {
    throw new XrpcError(400, "InvalidRequest", `Member ${name} must be a string`);
  }
  return value;
}

function optionalBoolean(body: Record<string, unknown>, name: string): boolean | undefined {
  const value = body[name];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "boolean") {
    throw new XrpcError(400, "InvalidRequest", `Member ${name} must be a boolean`);
  }
  return value;
}

function requireString(body: Record<string, unknown>, name: string): string {
  const value = optional(body, name);
  if (value === undefined || value === "") throw missing(name);
  return value;
}

function requireQuery(c: Context, name: string): string {
  const value = c.req.query(name);
  if (value === undefined || value === "") {
    throw new XrpcError(400, "InvalidRequest", `Parameter ${name} is required`);
  }
  if (
    (name === "rkey" && !isValidRecordKey(value)) || (name === "collection" && !isValidNsid(value))
  ) {
    throw new XrpcError(400, "InvalidRequest", `Invalid ${name}: ${q(value)}`);
  }
  return value;
}

/** Parses `limit` in [1, max]; throws 400 naming the value. */
export function parseLimit(raw: string | undefined, fallback: number, max: number): number {
  if (raw === undefined || raw === "") return fallback;
  if (!/^\d+$/.test(raw) || Number(raw) < 1 || Number(raw) > max) {
    throw new XrpcError(
      400,
      "InvalidRequest",
      `Parameter limit must be between 1 and ${max}: ${q(raw)}`,
    );
  }
  return Number(raw);
}

function parseBool(raw: string | undefined, name: string): boolean {
  if (raw === undefined || raw === "" || raw === "false") return false;
  if (raw === "true") return true;
  throw new XrpcError(400, "InvalidRequest", `Parameter ${name} must be true or false: ${q(raw)}`);
}

function missing(name: string): XrpcError {
  return new XrpcError(400, "InvalidRequest", `Member ${name} is required`);
}

function uriMismatch(name: string, value: string, uri: string): XrpcError {
  return new XrpcError(
    400,
    "InvalidRequest",
    `Member ${name} ${q(value)} does not match member uri ${q(uri)}`,
  );
}

function repoNotFound(repo: string): XrpcError {
  return new XrpcError(400, "RepoNotFound", `Could not find repo: ${q(repo)}`);
}

function blobTooLarge(): XrpcError {
  return new XrpcError(413, "BlobTooLarge", `Blob is larger than ${MAX_BLOB_BYTES} bytes`);
}

function q(value: string): string {
  return JSON.stringify(value.length > 100 ? value.slice(0, 100) + "..." : value);
}
