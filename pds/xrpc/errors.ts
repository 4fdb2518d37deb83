/**
 * The account host's one wire error type and the single mapping from anything thrown to an XRPC
 * error response `{"error": Name, "message": text}` (docs/protocol.md 1.2-1.3).
 *
 * @module
 */

import type { Context, ErrorHandler, Hono, NotFoundHandler } from "hono";
import type { Logger } from "../../shared/log.ts";
import { PlcDirectoryError } from "../accounts/plc_directory.ts";

/** HTTP statuses an XRPC error may carry. */
export type XrpcStatus =
  | 400
  | 401
  | 403
  | 404
  | 409
  | 413
  | 415
  | 429
  | 500
  | 501
  | 502
  | 503
  | 504;

/** An error answered as XRPC JSON with the given status and error name. */
export class XrpcError extends Error {
  override readonly name = "XrpcError";
  constructor(
    readonly status: XrpcStatus,
    readonly error: string,
    message: string,
    readonly headers?: Record<string, string>,
  ) {
    super(message);
  }
}

/** Default error names by status, as the reference server emits them. */
const DEFAULT_NAMES: Record<number, string> = {
  400: "InvalidRequest",
  401: "AuthenticationRequired",
  403: "Forbidden",
  404: "NotFound",
  413: "PayloadTooLarge",
  415: "UnsupportedMediaType",
  429: "RateLimitExceeded",
  500: "InternalServerError",
  501: "MethodNotImplemented",
  503: "NotEnoughResources",
};

/** Builds the JSON response of an XRPC error. */
export function xrpcErrorResponse(
  c: Context,
  status: XrpcStatus,
  error: string,
  message: string,
  headers?: Record<string, string>,
): Response {
  return c.json({ error, message }, status, headers);
}

/**
 * The `onError` handler: `XrpcError` as is; a PLC directory's refusal as 502 `UpstreamFailure`
 * (504 `UpstreamTimeout` when it did not answer); Hono `HTTPException`s (for example a body limit)
 * by their status; anything else logged and answered with a generic 500 that leaks nothing.
 */
export function handleXrpcError(log: Logger): ErrorHandler {
  return (err, c) => {
    if (err instanceof XrpcError) {
      return xrpcErrorResponse(c, err.status, err.error, err.message, err.headers);
    }
    if (err instanceof PlcDirectoryError) {
      // The PLC directory refused or did not answer (docs/behaviour.md 10.4): its answer is the
      // message, so the operator and the client see why.
      log.warn("PLC directory failure", { path: c.req.path, error: err.message });
      return err.kind === "timeout"
        ? xrpcErrorResponse(c, 504, "UpstreamTimeout", err.message)
        : xrpcErrorResponse(c, 502, "UpstreamFailure", err.message);
    }
    if (isHttpException(err) && err.status >= 400 && err.status < 500) {
      const status = err.status as XrpcStatus;
      const name = DEFAULT_NAMES[status] ?? "InvalidRequest";
      const message = status === 413 ? "Request body is too large" : err.message || name;
      return xrpcErrorResponse(c, status, name, message);
    }
    log.error("unhandled error", { method: c.req.method, path: c.req.path, err });
    return xrpcErrorResponse(c, 500, "InternalServerError", "Internal server error");
  };
}

/** Hono's `HTTPException` (not importable through our import map), recognised by shape. */
function isHttpException(err: Error): err is Error & { status: number } {
  const e = err as Error & { status?: unknown; getResponse?: unknown };
  return typeof e.status === "number" && typeof e.getResponse === "function";
}

/**
 * The `notFound` handler of the root app: a known XRPC method called with the wrong verb gives
 * 400 `InvalidRequest`, an unknown one 501 `MethodNotImplemented`, anything else 404.
 */
// deno-lint-ignore no-explicit-any
export function handleNotFound(app: Hono<any>): NotFoundHandler {
  return (c) => {
    const path = c.req.path;
    if (!path.startsWith("/xrpc/")) {
      return xrpcErrorResponse(c, 404, "NotFound", `Not found: ${path}`);
    }
    const nsid = path.slice("/xrpc/".length);
    const methods = new Set(
      app.routes
        .filter((r) => r.path === path && r.method !== "ALL")
        .map((r) => r.method),
    );
    if (methods.size > 0) {
      const expected = [...methods].join(" or ");
      return xrpcErrorResponse(
        c,
        400,
        "InvalidRequest",
        `Incorrect HTTP method (${c.req.method}) expected ${expected}`,
      );
    }
    return xrpcErrorResponse(c, 501, "MethodNotImplemented", `Method not implemented: ${nsid}`);
  };
}
