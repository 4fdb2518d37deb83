/**
 * Load client of `query_bench.ts`, run as a Web Worker so that measuring does not share the
 * server's event loop: receives `{url, batches: [{name, paths}]}`, sends each path in order (one
 * request in flight, naming the batch in the `x-query-bench-batch` header for the server's
 * handler timings) and answers `{name, latenciesMs, errors}` per batch, then `{done: true}`.
 */

interface Batch {
  name: string;
  paths: string[];
}

interface Job {
  url: string;
  batches: Batch[];
}

/** The worker's global scope (the project's type library is the window one). */
const scope = self as unknown as {
  postMessage(message: unknown): void;
  onmessage: ((e: MessageEvent<Job>) => void) | null;
};

async function run(job: Job): Promise<void> {
  for (const batch of job.batches) {
    const latenciesMs: number[] = [];
    let errors = 0;
    for (const path of batch.paths) {
      const start = performance.now();
      const res = await fetch(job.url + path, { headers: { "x-query-bench-batch": batch.name } });
      await res.arrayBuffer();
      latenciesMs.push(performance.now() - start);
      if (res.status !== 200) errors++;
    }
    scope.postMessage({ name: batch.name, latenciesMs, errors });
  }
  scope.postMessage({ done: true });
}

scope.onmessage = (e: MessageEvent<Job>) => {
  run(e.data).catch((err) => scope.postMessage({ error: String(err) }));
};
