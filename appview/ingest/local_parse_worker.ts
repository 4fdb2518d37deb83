/**
 * Worker thread of the local-stream consumer: parses `subscribeRepos` frames
 * ({@link parseLocalFrame}: strict DAG-CBOR, the CAR with its record blocks checked, the ops) off
 * the main thread, so decoding overlaps with the index writes (`parse_worker.ts`).
 *
 * In: `{id, frames, options}`. Out: `{id, parsed}`, one {@link LocalFrame} per frame, in order.
 *
 * @module
 */

import { type LocalParseOptions, parseLocalFrame } from "./local_stream.ts";
import type { ParseRequest } from "./parse_worker.ts";

self.onmessage = (event: MessageEvent<ParseRequest>) => {
  const { id, frames } = event.data;
  const options = event.data.options as LocalParseOptions;
  const parsed = frames.map((frame) => parseLocalFrame(frame, options.maxFrameBytes));
  self.postMessage({ id, parsed });
};
