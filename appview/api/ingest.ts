/**
 * `POST /internal/ingest-commit` (spec 4.2, 5.3, 6.4; docs/behaviour.md 10.7): the account host's
 * best-effort push of each commit.
 *
 * Authentication: `Authorization: Bearer <APPVIEW_INGEST_SECRET>`, compared in constant time
 * (SHA-256 of both sides, then `timingSafeEqual`, so neither the content nor the length of the
 * secret leaks through timing). A missing or wrong secret is 401. When the secret is unset every
 * caller is accepted (the startup warning is logged by `warnRelaxedSettings`).
 *
 * A failed secret check is logged with the client's address (the socket's, never a forwarded
 * header) and never the presented value, at most once per address per minute
 * (`AddressLogLimiter`).
 *
 * The body is read up to {@link MAX_PUSH_BODY_BYTES} (413 beyond), must be JSON (400 otherwise)
 * and a valid push payload (400 naming the bad field). It is then verified against its signed
 * commit (`ingest/sources/push.ts`): 400 `InvalidCommit` when the commit does not prove it, 403
 * `AccountNotHosted` for an account the configured account host does not host, 403
 * `HandleMismatch` for a handle that host does not list, 503 `AccountUnavailable` when the host
 * cannot be asked; nothing is applied then (the local stream still delivers what is real).
 * Success is `{ok: true, applied: n}`, plus `outOfOrder: true` when the commit was passed over
 * because it was already applied or is not the repository's next commit (the local stream
 * delivers it).
 *
 * @module
 */

import { createHash, timingSafeEqual } from "node:crypto";
import { Hono } from "hono";
import { OpsError } from "../../shared/ops.ts";
import type { AppviewContext } from "../context.ts";
import {
  type AccountDirectory,
  AccountHostDirectory,
} from "../ingest/sources/account_directory.ts";
import {
  applyPush,
  PUSH_ACCOUNT_NOT_HOSTED,
  PUSH_ACCOUNT_UNAVAILABLE,
  PUSH_HANDLE_MISMATCH,
  PUSH_INVALID_COMMIT,
  PushRefusedError,
} from "../ingest/sources/push.ts";
import { AddressLogLimiter } from "./address_log_limiter.ts";
import { declaredLength, readStreamLimited } from "../../shared/bytes.ts";
import { ApiError, errorBody, invalidRequest } from "./errors.ts";

/** Path of the push endpoint. */
export const INGEST_COMMIT_PATH = "/internal/ingest-commit";
/** Largest push body accepted: 2 MiB (a commit holds at most 200 ops of small records). */
export const MAX_PUSH_BODY_BYTES = 2 * 1024 * 1024;

/** Log line of a failed secret check. */
export const LOG_SECRET_REFUSED = "Push refused: ingest secret missing or wrong";

const REFUSAL_STATUS = {
  [PUSH_INVALID_COMMIT]: 400,
  [PUSH_ACCOUNT_NOT_HOSTED]: 403,
  [PUSH_HANDLE_MISMATCH]: 403,
  [PUSH_ACCOUNT_UNAVAILABLE]: 503,
} as const;

/** Options of {@link ingestRoutes}. */
export interface IngestRoutesOptions {
  maxBodyBytes?: number;
  /** Source of accounts' keys and handles. Default: `ctx.accounts`, else the account host. */
  accounts?: AccountDirectory;
  /** Limiter of the failed-secret log lines (tests inject one with a clock). */
  secretLog?: AddressLogLimiter;
}

/** What Deno.serve hands a Hono app as its env: the connection's remote address. */
type ServeEnv = { Bindings: { remoteAddr?: { hostname?: string } } | undefined };

/** Routes of the push endpoint, mounted by `createAppviewApp`. */
export function ingestRoutes(ctx: AppviewContext, opts: IngestRoutesOptions = {}): Hono<ServeEnv> {
  const maxBytes = opts.maxBodyBytes ?? MAX_PUSH_BODY_BYTES;
  const expected = ctx.config.ingestSecret === null ? null : digest(ctx.config.ingestSecret);
  const log = ctx.log.child("push");
  const accounts = opts.accounts ?? ctx.accounts ??
    new AccountHostDirectory({ pdsUrl: ctx.config.pdsUrl });
  const secretLog = opts.secretLog ?? new AddressLogLimiter();
  const app = new Hono<ServeEnv>();
  app.post(INGEST_COMMIT_PATH, async (c) => {
    if (expected !== null) {
      try {
        checkSecret(c.req.header("authorization"), expected);
      } catch (e) {
        const address = c.env?.remoteAddr?.hostname ?? "unknown";
        const suppressed = secretLog.admit(address);
        if (suppressed !== null && e instanceof ApiError) {
          log.warn(LOG_SECRET_REFUSED, { address, error: e.error, suppressed });
        }
        throw e;
      }
    }
    const bytes = await readBounded(c.req.raw, maxBytes);
    let payload: unknown;
    try {
      payload = JSON.parse(UTF8.decode(bytes));
    } catch {
      log.warn("Push rejected: body is not valid JSON", { bytes: bytes.length });
      throw invalidRequest("Request body is not valid JSON");
    }
    let result;
    try {
      result = await applyPush(ctx, accounts, payload);
    } catch (e) {
      if (e instanceof PushRefusedError) {
        log.warn("Push refused: it does not verify", { error: e.error, message: e.message });
        throw new ApiError(
          REFUSAL_STATUS[e.error as keyof typeof REFUSAL_STATUS],
          e.error,
          e.message,
        );
      }
      if (!(e instanceof OpsError)) throw e;
      log.warn("Push rejected: malformed payload", { error: e });
      throw invalidRequest(e.message);
    }
    return result.stale
      ? c.json({ ok: true, applied: result.applied, outOfOrder: true })
      : c.json({ ok: true, applied: result.applied });
  });
  app.onError((err, c) => {
    if (err instanceof ApiError) return c.json(errorBody(err.error, err.message), err.status);
    log.error("Push failed", { error: err });
    return c.json(errorBody("InternalServerError", "Internal server error"), 500);
  });
  return app;
}

function digest(value: string): Uint8Array {
  return createHash("sha256").update(value, "utf8").digest();
}

function checkSecret(header: string | undefined, expected: Uint8Array): void {
  const match = /^bearer +(\S+) *$/i.exec(header ?? "");
  if (match === null) {
    throw new ApiError(401, "AuthMissing", "Bearer authorization header is missing");
  }
  if (!timingSafeEqual(digest(match[1]), expected)) {
    throw new ApiError(401, "AuthInvalid", "Ingest secret does not match");
  }
}

function tooLarge(maxBytes: number): ApiError {
  return new ApiError(413, "PayloadTooLarge", `Request body is larger than ${maxBytes} bytes`);
}

const UTF8 = new TextDecoder("utf-8", { fatal: true });

/** Reads the request body, failing with 413 past `maxBytes` without buffering more. */
async function readBounded(req: Request, maxBytes: number): Promise<Uint8Array> {
  const declared = declaredLength(req.headers);
  if (declared !== null && declared > maxBytes) {
    await req.body?.cancel().catch(() => {});
    throw tooLarge(maxBytes);
  }
  // The server ends a body at its declared length: one read, without a JavaScript stream.
  if (declared !== null) return new Uint8Array(await req.arrayBuffer());
  return readStreamLimited(req.body, maxBytes, () => tooLarge(maxBytes));
}
