/**
 * Query parameters of the index API (docs/behaviour.md 10.9): `limit` defaults to 30 and is capped
 * at 100; an invalid `limit` or `cursor`, or a missing required parameter, is 400
 * `InvalidRequest` naming the parameter.
 *
 * @module
 */

import type { Context } from "hono";
import { isValidAtUri, isValidDid } from "../../shared/syntax.ts";
import { invalidRequest } from "./errors.ts";

/** Spec part 8: client page size default (also the server's default). */
export const DEFAULT_LIMIT = 30;
/** Largest page served; larger requests are served this many. */
export const MAX_LIMIT = 100;
/** Longest parameter value echoed in an error message. */
const MAX_ECHO = 128;

// deno-lint-ignore no-explicit-any
type AnyContext = Context<any>;

/** The parameter `name`; 400 when it is absent or empty. */
export function requiredParam(c: AnyContext, name: string): string {
  const value = c.req.query(name);
  if (value === undefined || value === "") {
    throw invalidRequest(`Missing required parameter: ${name}`);
  }
  return value;
}

/** The DID in the parameter `name` (required). */
export function didParam(c: AnyContext, name = "did"): string {
  return checkDid(requiredParam(c, name), name);
}

/**
 * The optional `viewerDid` parameter of the public views (spec 4.2 rule 10): null when absent or
 * empty; 400 when not a DID.
 */
export function viewerParam(c: AnyContext): string | null {
  const value = c.req.query("viewerDid");
  return value === undefined || value === "" ? null : checkDid(value, "viewerDid");
}

/** `value` when it is a DID; 400 naming `name` otherwise. */
export function checkDid(value: string, name = "did"): string {
  if (!isValidDid(value)) throw invalidRequest(`Invalid ${name}: ${echo(value)}`);
  return value;
}

/** `value` when it is a record URI; 400 naming `name` otherwise. */
export function checkRecordUri(value: string, name = "uri"): string {
  if (!isValidAtUri(value) || value.split("/").length !== 5) {
    throw invalidRequest(`Invalid ${name}: ${echo(value)}`);
  }
  return value;
}

/** The `limit` parameter: an integer from 1, default {@link DEFAULT_LIMIT}, capped. */
export function limitParam(c: AnyContext): number {
  const raw = c.req.query("limit");
  if (raw === undefined || raw === "") return DEFAULT_LIMIT;
  // Any larger whole number is served as MAX_LIMIT, however many digits it has.
  if (!/^\d+$/.test(raw) || Number(raw) < 1) {
    throw invalidRequest(`Invalid limit: ${echo(raw)} (expected an integer from 1)`);
  }
  return Math.min(Number(raw), MAX_LIMIT);
}

/** The `cursor` parameter decoded by `decode`; null when absent; 400 when not decodable. */
export function cursorParam<T>(c: AnyContext, decode: (cursor: string) => T | null): T | null {
  const raw = c.req.query("cursor");
  if (raw === undefined || raw === "") return null;
  const key = decode(raw);
  if (key === null) throw invalidRequest(`Invalid cursor: ${echo(raw)}`);
  return key;
}

/** The request body as JSON; 400 when it is not JSON. */
export async function readJson(req: Request): Promise<unknown> {
  const text = await req.text();
  try {
    return JSON.parse(text);
  } catch {
    throw invalidRequest("Request body is not valid JSON");
  }
}

/** A value shortened for an error message. */
export function echo(value: string): string {
  return value.length > MAX_ECHO ? `${value.slice(0, MAX_ECHO)}...` : value;
}
