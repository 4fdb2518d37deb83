import assert from "node:assert/strict";
import { XrpcClientError } from "../shared/client_session.ts";
import { errorText, waitText } from "./hooks.ts";

Deno.test("a 429 tells the member when to try again, from Retry-After", () => {
  const limited = (retryAfter?: number) =>
    new XrpcClientError(429, "RateLimitExceeded", "Rate limit exceeded", retryAfter);
  assert.equal(errorText(limited(1)), "Too many attempts: try again in 1 second.");
  assert.equal(errorText(limited(59)), "Too many attempts: try again in 59 seconds.");
  assert.equal(errorText(limited(60)), "Too many attempts: try again in 1 minute.");
  assert.equal(errorText(limited(61)), "Too many attempts: try again in 2 minutes.");
  assert.equal(errorText(limited(3600)), "Too many attempts: try again in 1 hour.");
  assert.equal(errorText(limited(3601)), "Too many attempts: try again in 2 hours.");
  assert.equal(errorText(limited()), "Too many attempts: try again in a little while.");
  assert.equal(waitText(7200), "in 2 hours");
});

Deno.test("other failures keep their words", () => {
  assert.equal(
    errorText(new XrpcClientError(502, "UpstreamFailure", "x")),
    "The server had a problem (UpstreamFailure). Try again shortly.",
  );
  assert.equal(
    errorText(new XrpcClientError(400, "InvalidRequest", "Invalid handle: a b")),
    "Invalid handle: a b",
  );
  assert.equal(
    errorText(new TypeError("fetch failed")),
    "Could not reach the server. Check the connection and try again.",
  );
});
