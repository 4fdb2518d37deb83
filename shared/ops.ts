/**
 * The single-operation form (spec 6.2 rule 3): whatever source a change came from (the account
 * host's commit stream, the push to `/internal/ingest-commit`, or a Jetstream event), the index
 * applies it as a list of {@link IndexOp}s through one write path.
 *
 * Records are carried in atproto JSON form ("lex JSON"): links as `{"$link": "<cid>"}`, bytes as
 * `{"$bytes": "<base64>"}`, so the three sources produce deep-equal values for the same commit.
 *
 * @module
 */

import { isCidString, isPlainObject, show } from "./_checks.ts";
import { CarError, readCar } from "./car.ts";
import { decodeCbor } from "./cbor.ts";
import { asCid, CODEC_DAG_CBOR, formatCid } from "./cid.ts";
import { toLexJson } from "./lex_json.ts";
import {
  isValidDid,
  isValidHandle,
  isValidNsid,
  isValidRecordKey,
  normalizeHandle,
} from "./syntax.ts";
import { isValidTid } from "./tid.ts";

/** A record created, updated or deleted in a repository. */
export interface RecordOp {
  readonly kind: "record";
  readonly action: "create" | "update" | "delete";
  /** Repository owner. */
  readonly did: string;
  readonly collection: string;
  readonly rkey: string;
  /** Record CID as a base32 string; null for deletes. */
  readonly cid: string | null;
  /** The record in lex JSON form; null for deletes. */
  readonly record: Readonly<Record<string, unknown>> | null;
  /**
   * True when `validateRecord` already accepted `record` where the op was made (the local
   * stream's parse worker, off the index's main thread): the write path then does not check it
   * again. Never set from input: only code that ran the check sets it.
   */
  readonly checked?: true;
}

/** The handle of a DID became known or changed (identity event, or push payload). */
export interface HandleOp {
  readonly kind: "handle";
  readonly did: string;
  /** The new handle, lower-case; null when the account has no valid handle. */
  readonly handle: string | null;
  /**
   * True when the source is the account host vouching for its own account (the push, or its
   * `resolveHandle`): such an op may take a handle another DID holds. Claims from DID documents
   * and the public stream may not.
   */
  readonly authoritative?: boolean;
}

/**
 * An account exists (a repository's first commit on the local stream, or a Jetstream `account`
 * event for an active account): the index then knows the DID as a notification recipient
 * (spec 3.1) before it has posted.
 */
export interface AccountOp {
  readonly kind: "account";
  readonly did: string;
}

/**
 * An account's status changed (the local stream's `#account` frame, a Jetstream `account`
 * event): while not `active` (taken down, deactivated, ...) the index hides the account's content
 * from every view; `active` again brings it back (docs/behaviour.md 4.2 rule 12).
 */
export interface AccountStatusOp {
  readonly kind: "account_status";
  readonly did: string;
  readonly active: boolean;
  /** Why the account is inactive (`takendown`, `deactivated`, ...); null when not given. */
  readonly status: string | null;
}

/** One operation for the index write path. */
export type IndexOp = RecordOp | HandleOp | AccountOp | AccountStatusOp;

/** Most operations accepted in one commit event or push payload (atproto `ops` limit). */
export const MAX_OPS_PER_COMMIT = 200;
/** Most blocks read from a commit event's CAR slice. */
const MAX_COMMIT_BLOCKS = 10_000;
/** Largest CAR slice read from a commit event (the frame itself is at most 5 MiB). */
const MAX_COMMIT_CAR_SIZE = 5 * 1024 * 1024;
const ACTIONS: ReadonlySet<string> = new Set(["create", "update", "delete"]);
const INVALID_HANDLE = "handle.invalid";
/** Longest account status word kept (`takendown`, `deactivated`, ...). */
const MAX_STATUS_LENGTH = 64;

/** Thrown by the converters for malformed input; the message names the field and value. */
export class OpsError extends Error {
  /** Creates an error; `cause` keeps the underlying codec error when there is one. */
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "OpsError";
  }
}

/**
 * Converts a decoded `#commit` body of the local stream (spec 6.2 rule 3): `repo`, `ops:
 * [{action, path, cid}]` and `blocks` (a CAR slice). Op CIDs may be `CID` instances or strings;
 * records are decoded from the CAR and converted to lex JSON, so binary links become `{$link}`
 * while links already stored as `{$link}` maps stay as they are. Ops of every collection are
 * returned; the write path filters. A repository's first commit (`since` null) also gives a
 * leading {@link AccountOp}: the account was just created.
 *
 * @throws {OpsError} on any malformed body, op, CAR slice or record block.
 */
export function opsFromCommitEvent(body: Record<string, unknown>): IndexOp[] {
  return guard("commit event", () => {
    if (!isPlainObject(body)) fail(`Commit event is not a map: ${show(body)}`);
    const did = checkDid("repo", body.repo);
    const ops = checkOpList("ops", body.ops);
    let blocks: Map<string, Uint8Array> | null = null;
    const records = ops.map((op, i): RecordOp => {
      if (!isPlainObject(op)) fail(`Invalid ops[${i}]: ${show(op)}`);
      const action = checkAction(`ops[${i}].action`, op.action);
      const [collection, rkey] = checkPath(`ops[${i}].path`, op.path);
      if (action === "delete") return recordOp(did, action, collection, rkey, null, null);
      const cid = asCid(op.cid);
      if (cid === null || cid.code !== CODEC_DAG_CBOR) {
        fail(`Invalid ops[${i}].cid: ${show(op.cid)}`);
      }
      blocks ??= readBlocks(body.blocks);
      const key = formatCid(cid);
      const bytes = blockOf(blocks, key);
      if (bytes === undefined) fail(`Commit blocks lack the record of ${op.path}: ${key}`);
      return recordOp(did, action, collection, rkey, key, decodeRecord(key, bytes));
    });
    return body.since === null ? [{ kind: "account", did }, ...records] : records;
  });
}

/**
 * Converts one parsed Jetstream event (docs/behaviour.md 10.8, "Public stream"): a `commit` gives
 * one {@link RecordOp}, an `identity` one {@link HandleOp} (lower-cased; null when absent or not
 * a valid handle), an `account` one {@link AccountStatusOp}, after an {@link AccountOp} when the
 * account is active. The local stream's `#account` frame body has the same `{active, status?}`.
 *
 * @throws {OpsError} on a malformed event or an unknown `kind`.
 */
export function opsFromJetstream(event: unknown): IndexOp[] {
  return guard("Jetstream event", () => {
    if (!isPlainObject(event)) fail(`Jetstream event is not an object: ${show(event)}`);
    const did = checkDid("did", event.did);
    switch (event.kind) {
      case "commit": {
        const c = event.commit;
        if (!isPlainObject(c)) fail(`Invalid commit: ${show(c)}`);
        const action = checkAction("commit.operation", c.operation);
        return [jsonRecordOp(did, action, "commit.", c)];
      }
      case "identity": {
        const id = event.identity;
        if (!isPlainObject(id)) fail(`Invalid identity: ${show(id)}`);
        if (id.did !== undefined && id.did !== did) fail(`Invalid identity.did: ${show(id.did)}`);
        return [{ kind: "handle", did, handle: checkHandle("identity.handle", id.handle) }];
      }
      case "account":
        return accountOps(did, event.account);
      default:
        fail(`Unknown Jetstream event kind: ${show(event.kind)}`);
    }
  });
}

/**
 * Converts a push body of `/internal/ingest-commit` (docs/behaviour.md 10.7, "Push ingest"):
 * `{did, handle?, rev, since?, commit, ops: [{action, collection, rkey, cid, record}]}` (`since`,
 * the previous commit's rev, orders pushes against the local stream in the write path). A
 * `handle` gives a leading {@link HandleOp}.
 *
 * @throws {OpsError} on a malformed payload or op.
 */
export function opsFromPush(payload: unknown): IndexOp[] {
  return guard("push payload", () => {
    if (!isPlainObject(payload)) fail(`Push payload is not an object: ${show(payload)}`);
    const did = checkDid("did", payload.did);
    if (typeof payload.rev !== "string" || !isValidTid(payload.rev)) {
      fail(`Invalid rev: ${show(payload.rev)}`);
    }
    if (!isCidString(payload.commit)) fail(`Invalid commit: ${show(payload.commit)}`);
    const out: IndexOp[] = [];
    if (payload.handle !== undefined && payload.handle !== null) {
      // The account host pushes its own account's handle: authoritative.
      out.push({
        kind: "handle",
        did,
        handle: checkHandle("handle", payload.handle),
        authoritative: true,
      });
    }
    const ops = checkOpList("ops", payload.ops);
    for (let i = 0; i < ops.length; i++) {
      const op = ops[i];
      if (!isPlainObject(op)) fail(`Invalid ops[${i}]: ${show(op)}`);
      out.push(jsonRecordOp(did, checkAction(`ops[${i}].action`, op.action), `ops[${i}].`, op));
    }
    return out;
  });
}

/** The ops of an account event body `{active, status?}`. */
function accountOps(did: string, account: unknown): IndexOp[] {
  if (!isPlainObject(account)) fail(`Invalid account: ${show(account)}`);
  const { active, status } = account;
  if (typeof active !== "boolean") fail(`Invalid account.active: ${show(active)}`);
  if (
    status !== undefined && status !== null &&
    (typeof status !== "string" || status.length > MAX_STATUS_LENGTH)
  ) {
    fail(`Invalid account.status: ${show(status)}`);
  }
  const op: AccountStatusOp = {
    kind: "account_status",
    did,
    active,
    status: active ? null : (status ?? null),
  };
  return active ? [{ kind: "account", did }, op] : [op];
}

/** A record op from a JSON source (Jetstream `commit`, push op): `collection, rkey, cid, record`. */
function jsonRecordOp(
  did: string,
  action: RecordOp["action"],
  at: string,
  op: Record<string, unknown>,
): RecordOp {
  const collection = checkCollection(`${at}collection`, op.collection);
  const rkey = checkRkey(`${at}rkey`, op.rkey);
  if (action === "delete") return recordOp(did, action, collection, rkey, null, null);
  const cid = typeof op.cid === "string" ? asCid(op.cid) : null;
  if (cid === null || cid.code !== CODEC_DAG_CBOR) fail(`Invalid ${at}cid: ${show(op.cid)}`);
  if (!isPlainObject(op.record)) fail(`Invalid ${at}record: ${show(op.record)}`);
  return recordOp(did, action, collection, rkey, formatCid(cid), op.record);
}

function recordOp(
  did: string,
  action: RecordOp["action"],
  collection: string,
  rkey: string,
  cid: string | null,
  record: Record<string, unknown> | null,
): RecordOp {
  return { kind: "record", action, did, collection, rkey, cid, record };
}

function readBlocks(car: unknown): Map<string, Uint8Array> {
  if (!(car instanceof Uint8Array)) fail(`Invalid blocks: ${show(car)}`);
  try {
    // Lazy: only the record blocks read below are hashed (each checked against its CID), not
    // the commit and MST nodes the index never reads.
    return readCar(car, {
      maxSize: MAX_COMMIT_CAR_SIZE,
      maxBlocks: MAX_COMMIT_BLOCKS,
      verify: "lazy",
    }).blocks;
  } catch (e) {
    if (e instanceof CarError) fail(`Invalid blocks: ${e.message}`, e);
    throw e;
  }
}

/** A block of a lazily verified CAR; a block that does not match its CID is an `OpsError`. */
function blockOf(blocks: Map<string, Uint8Array>, key: string): Uint8Array | undefined {
  try {
    return blocks.get(key);
  } catch (e) {
    if (e instanceof CarError) fail(`Invalid blocks: ${e.message}`, e);
    throw e;
  }
}

function decodeRecord(cid: string, bytes: Uint8Array): Record<string, unknown> {
  let value: unknown;
  try {
    value = toLexJson(decodeCbor(bytes));
  } catch (e) {
    fail(`Record block ${cid} is not valid DAG-CBOR: ${messageOf(e)}`, e);
  }
  if (!isPlainObject(value)) fail(`Record block ${cid} is not a map: ${show(value)}`);
  return value;
}

function checkOpList(field: string, ops: unknown): unknown[] {
  if (!Array.isArray(ops)) fail(`Invalid ${field}: ${show(ops)}`);
  if (ops.length > MAX_OPS_PER_COMMIT) {
    fail(`Too many ${field}: ${ops.length} (max ${MAX_OPS_PER_COMMIT})`);
  }
  return ops;
}

function checkAction(field: string, action: unknown): RecordOp["action"] {
  if (typeof action !== "string" || !ACTIONS.has(action)) fail(`Invalid ${field}: ${show(action)}`);
  return action as RecordOp["action"];
}

function checkPath(field: string, path: unknown): [collection: string, rkey: string] {
  const parts = typeof path === "string" ? path.split("/") : [];
  if (parts.length !== 2 || !isValidNsid(parts[0]) || !isValidRecordKey(parts[1])) {
    fail(`Invalid ${field}: ${show(path)}`);
  }
  return [parts[0], parts[1]];
}

function checkDid(field: string, did: unknown): string {
  if (typeof did !== "string" || !isValidDid(did)) fail(`Invalid ${field}: ${show(did)}`);
  return did;
}

function checkCollection(field: string, collection: unknown): string {
  if (typeof collection !== "string" || !isValidNsid(collection)) {
    fail(`Invalid ${field}: ${show(collection)}`);
  }
  return collection;
}

function checkRkey(field: string, rkey: unknown): string {
  if (typeof rkey !== "string" || !isValidRecordKey(rkey)) fail(`Invalid ${field}: ${show(rkey)}`);
  return rkey;
}

/** A handle string, lower-cased; null when absent, `handle.invalid` or not a valid handle. */
function checkHandle(field: string, handle: unknown): string | null {
  if (handle === undefined || handle === null) return null;
  if (typeof handle !== "string") fail(`Invalid ${field}: ${show(handle)}`);
  if (!isValidHandle(handle)) return null;
  const normal = normalizeHandle(handle);
  return normal === INVALID_HANDLE ? null : normal;
}

function fail(message: string, cause?: unknown): never {
  throw new OpsError(message, cause === undefined ? undefined : { cause });
}

/** Runs a conversion; any exception that is not an {@link OpsError} becomes one. */
function guard<T>(what: string, convert: () => T): T {
  try {
    return convert();
  } catch (e) {
    if (e instanceof OpsError) throw e;
    throw new OpsError(`Malformed ${what}: ${messageOf(e)}`, { cause: e });
  }
}

function messageOf(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
