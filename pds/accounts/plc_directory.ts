/**
 * Submitting did:plc operations to the PLC directory of `PDS_PLC_URL` (docs/behaviour.md 10.4):
 * `POST {directory}/{did}` with the signed operation as JSON; any 2xx is acceptance. A refusal
 * or an unreachable directory becomes a {@link PlcDirectoryError} that names the directory and
 * quotes its answer (bounded), so the caller fails closed with a clear message.
 *
 * @module
 */

import type { PlcOperation } from "./plc.ts";

/** How long one submission may take before it is given up (ms). */
export const PLC_SUBMIT_TIMEOUT_MS = 10_000;
/** Most bytes of a directory's answer read (an error message is quoted from them). */
const MAX_ANSWER_BYTES = 4096;
/** Most characters of the directory's message quoted in an error. */
const MAX_QUOTED = 300;

/** The directory refused an operation, did not answer in time, or could not be reached. */
export class PlcDirectoryError extends Error {
  override readonly name = "PlcDirectoryError";
  constructor(message: string, readonly kind: "refused" | "timeout" | "unreachable") {
    super(message);
  }
}

/**
 * Submits `op` for `did` to the directory at `directoryUrl`.
 *
 * @throws {PlcDirectoryError}
 */
export async function submitPlcOperation(
  directoryUrl: string,
  did: string,
  op: PlcOperation,
  opts: { timeoutMs?: number } = {},
): Promise<void> {
  const url = `${directoryUrl}/${did}`; // did:plc syntax needs no escaping in a path
  const timeoutMs = opts.timeoutMs ?? PLC_SUBMIT_TIMEOUT_MS;
  let res: Response;
  try {
    res = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(op),
      redirect: "manual",
      signal: AbortSignal.timeout(timeoutMs),
    });
  } catch (err) {
    if (err instanceof DOMException && err.name === "TimeoutError") {
      throw new PlcDirectoryError(
        `PLC directory ${directoryUrl} did not answer within ${timeoutMs} ms for ${did}`,
        "timeout",
      );
    }
    const reason = err instanceof Error ? err.message : String(err);
    throw new PlcDirectoryError(
      `PLC directory ${directoryUrl} could not be reached for ${did}: ${reason}`,
      "unreachable",
    );
  }
  const answer = await readBounded(res);
  if (res.status >= 200 && res.status < 300) return;
  throw new PlcDirectoryError(
    `PLC directory ${directoryUrl} refused the operation for ${did}: ${res.status} ${
      quoteAnswer(answer)
    }`,
    "refused",
  );
}

/** Up to {@link MAX_ANSWER_BYTES} of a response body as text (the rest is not read). */
async function readBounded(res: Response): Promise<string> {
  if (res.body === null) return "";
  const reader = res.body.getReader();
  const parts: Uint8Array[] = [];
  let bytes = 0;
  try {
    while (bytes < MAX_ANSWER_BYTES) {
      const { done, value } = await reader.read();
      if (done) break;
      parts.push(value);
      bytes += value.length;
    }
  } catch {
    // A broken answer body: what was read is quoted.
  } finally {
    await reader.cancel().catch(() => {});
  }
  const all = new Uint8Array(Math.min(bytes, MAX_ANSWER_BYTES));
  let at = 0;
  for (const p of parts) {
    const take = p.subarray(0, all.length - at);
    all.set(take, at);
    at += take.length;
  }
  return new TextDecoder().decode(all);
}

/** The directory's `message` (its JSON error form) or its text, quoted and shortened. */
function quoteAnswer(text: string): string {
  let message = text.trim();
  try {
    const parsed = JSON.parse(message);
    if (typeof parsed?.message === "string") message = parsed.message;
  } catch {
    // Not JSON: quoted as text.
  }
  if (message.length > MAX_QUOTED) message = message.slice(0, MAX_QUOTED) + "...";
  return JSON.stringify(message);
}
