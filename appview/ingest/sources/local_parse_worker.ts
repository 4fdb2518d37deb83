/**
 * Worker thread of the local-stream consumer: parses `subscribeRepos` frames
 * ({@link parseLocalFrame}: strict DAG-CBOR, the CAR with its record blocks checked, the ops) off
 * the main thread, so decoding overlaps with the index writes (`parse_worker.ts`).
 *
 * In: `{id, frames, options}`. Out: `{ready: true}` once loaded, then `{id, parsed}` per batch, one
 * {@link LocalFrame} per frame, in order (as JSON text when they are all events: `encodeParsed`).
 *
 * @module
 */

import { type LocalParseOptions, parseLocalFrame } from "./local_stream.ts";
import { encodeParsed, PARSE_WORKER_READY, type ParseRequest } from "./parse_worker.ts";

/** This worker's global scope (typed here: the project is checked with the window globals). */
const scope = self as unknown as {
  onmessage: ((event: MessageEvent<ParseRequest>) => void) | null;
  postMessage(message: unknown, transfer?: Transferable[]): void;
};

scope.onmessage = (event) => {
  const { id, frames } = event.data;
  const options = event.data.options as LocalParseOptions;
  const parsed = frames.map((frame) => parseLocalFrame(frame, options.maxFrameBytes));
  scope.postMessage({ id, parsed: encodeParsed(parsed) });
};
scope.postMessage(PARSE_WORKER_READY);
