/**
 * How the private endpoints (spec 5.2) are guarded: `requireViewer` before the handler and
 * `checkSubject` inside it, or neither when authentication is off (`APPVIEW_AUTH_REQUIRED=false`:
 * no token is read, any caller for any `did`). Without a verifier while authentication is
 * required, the endpoints fail closed with 503 `AuthUnavailable`.
 *
 * @module
 */

import type { Context, MiddlewareHandler } from "hono";
import { type AuthEnv, checkSubject, requireViewer, type TokenVerifier } from "../auth/verifier.ts";
import { ApiError } from "./errors.ts";
import { didParam } from "./params.ts";

/** Middleware and subject check of the private endpoints. */
export interface PrivateGuard {
  readonly middleware: MiddlewareHandler<AuthEnv>;
  /** Spec 5.2 rule 3: the token subject must equal `did` (no-op when authentication is off). */
  checkSubject(c: Context<AuthEnv>, did: string): void;
}

/** Builds the guard from the verifier (null: none configured) and the auth switch. */
export function privateGuard(verifier: TokenVerifier | null, authRequired: boolean): PrivateGuard {
  if (verifier !== null) {
    return { middleware: requireViewer(verifier), checkSubject };
  }
  if (!authRequired) {
    return { middleware: async (_c, next) => await next(), checkSubject: () => {} };
  }
  return {
    middleware: () => {
      throw new ApiError(503, "AuthUnavailable", "Token verification is not configured");
    },
    checkSubject: () => {
      throw new ApiError(503, "AuthUnavailable", "Token verification is not configured");
    },
  };
}

/** The `did` query parameter of a private endpoint, checked against the token subject (rule 3). */
export function subjectParam(c: Context<AuthEnv>, guard: PrivateGuard): string {
  const did = didParam(c);
  guard.checkSubject(c, did);
  return did;
}
