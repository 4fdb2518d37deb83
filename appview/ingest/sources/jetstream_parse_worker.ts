/**
 * Worker thread of the public-stream consumer: parses Jetstream messages
 * ({@link parseJetstreamEvent}: the JSON text, its checks and the ops) off the consumer's thread,
 * so decoding overlaps with the index writes (`parse_worker.ts`). About a tenth of the consumer
 * thread's time per event went to decoding (CPU profile of 200,000 events of the public-ingest
 * mix: `decode` with the CID and syntax checks it calls), the rest to the index writes.
 *
 * In: `{id, frames}`. Out: `{ready: true}` once loaded, then `{id, parsed}` per batch, one
 * {@link JetstreamParsed} per message, in order (as JSON text when they are all events:
 * `encodeParsed`; the ops of a JSON event are JSON data, so the text reads back equal).
 *
 * @module
 */

import { parseJetstreamEvent } from "./jetstream.ts";
import { encodeParsed, PARSE_WORKER_READY, type ParseRequest } from "./parse_worker.ts";

/** This worker's global scope (typed here: the project is checked with the window globals). */
const scope = self as unknown as {
  onmessage: ((event: MessageEvent<ParseRequest>) => void) | null;
  postMessage(message: unknown, transfer?: Transferable[]): void;
};

scope.onmessage = (event) => {
  const { id, frames } = event.data;
  scope.postMessage({ id, parsed: encodeParsed(frames.map(parseJetstreamEvent)) });
};
scope.postMessage(PARSE_WORKER_READY);
