/**
 * The one wire error of the index: `{"error": Name, "message": text}` with an HTTP status
 * (spec part 7). Handlers throw it; `onApiError` maps it, and anything else becomes a generic
 * 500 that leaks nothing.
 *
 * @module
 */

import type { Context } from "hono";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import type { Logger } from "../../shared/log.ts";

/** An error answered to the client as JSON. */
export class ApiError extends Error {
  override name = "ApiError";
  constructor(
    readonly status: ContentfulStatusCode,
    readonly error: string,
    message: string,
  ) {
    super(message);
  }
}

/** 400 `InvalidRequest` naming the parameter at fault. */
export function invalidRequest(message: string): ApiError {
  return new ApiError(400, "InvalidRequest", message);
}

/** Builds the error body of spec part 7. */
export function errorBody(error: string, message: string): { error: string; message: string } {
  return { error, message };
}

/** Hono `onError` handler: wire errors as JSON, anything else logged and a generic 500. */
export function onApiError(log: Logger) {
  return (err: Error, c: Context): Response => {
    if (err instanceof ApiError) {
      return c.json(errorBody(err.error, err.message), err.status);
    }
    const status = (err as { status?: unknown }).status;
    if (status === 413) {
      return c.json(errorBody("PayloadTooLarge", "Request body is too large"), 413);
    }
    log.error("unhandled error", { err, path: c.req.path, method: c.req.method });
    return c.json(errorBody("InternalServerError", "Internal server error"), 500);
  };
}
