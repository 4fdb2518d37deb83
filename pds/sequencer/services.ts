/**
 * The running parts of the commit stream of one account host context: the live broadcaster,
 * the subscribeRepos connections, the push to the index and the event retention worker.
 * `startPds` starts them with {@link startStreamServices}, which puts them on the context
 * (`ctx.stream`, where the subscribeRepos route finds them), and closes them on shutdown.
 *
 * @module
 */

import { decodeFrame } from "../../shared/frame.ts";
import { ACCOUNT_FRAME_TYPE } from "./account_events.ts";
import { IDENTITY_FRAME_TYPE } from "./identity_events.ts";
import { getAccount } from "../accounts/accounts.ts";
import type { PdsContext, StreamServices } from "../context.ts";
import { Broadcaster } from "./broadcast.ts";
import { FrameCache } from "./frame_cache.ts";
import { PushService } from "./push.ts";
import { RetentionWorker } from "./retention.ts";
import { StreamHub, type StreamLimits } from "./stream.ts";

/** Options of {@link startStreamServices}. */
export interface StreamServicesOptions {
  /** Per-connection bounds (defaults: the configuration's, then `DEFAULT_STREAM_LIMITS`). */
  limits?: Partial<StreamLimits>;
  /** Interval of the cross-process seq head poll (default 25 ms). */
  pollMs?: number;
  /** Interval of event pruning (default one hour). */
  pruneIntervalMs?: number;
}

/** Starts the stream services of `ctx` (once; a second call returns the running ones). */
export async function startStreamServices(
  ctx: PdsContext,
  opts: StreamServicesOptions = {},
): Promise<StreamServices> {
  if (ctx.stream) return ctx.stream;
  const log = ctx.log.child("stream");
  const frames = new FrameCache(ctx.kv);
  const push = ctx.config.appviewInternalUrl === null ? null : new PushService({
    kv: ctx.kv,
    sequencer: ctx.sequencer,
    blocks: ctx.blocks,
    accountHandle: async (did) => (await getAccount(ctx.kv, did))?.handle ?? null,
    log: ctx.log.child("push"),
    targetUrl: ctx.config.appviewInternalUrl,
    secret: ctx.config.ingestSecret,
  });
  const broadcaster = new Broadcaster(ctx.kv, {
    log,
    sequencer: ctx.sequencer,
    pollMs: opts.pollMs,
    frames,
    // A status change, also one another process made (the operator's CLI), ends what the
    // account status cache knew of the account; a handle change, what the push knew.
    onStoredFrame: (frame) => {
      const { header, body } = decodeFrame(frame);
      if (typeof body.did !== "string") return;
      if (header.t === ACCOUNT_FRAME_TYPE) ctx.accountStatuses.invalidate(body.did);
      if (header.t === IDENTITY_FRAME_TYPE) push?.forgetHandle(body.did);
    },
  });
  const limits: Partial<StreamLimits> = {
    maxBufferedBytes: ctx.config.streamMaxBufferedBytes,
    stallTimeoutMs: ctx.config.streamStallTimeoutSeconds * 1000,
    reservedConnections: ctx.config.streamReservedConnections,
    ...opts.limits,
  };
  const hub = new StreamHub({ kv: ctx.kv, broadcaster, log, limits, frames });
  const retention = new RetentionWorker({
    kv: ctx.kv,
    log,
    retentionDays: ctx.config.eventRetentionDays,
    now: () => ctx.now(),
    intervalMs: opts.pruneIntervalMs,
  });
  let closing: Promise<void> | null = null;
  const services: StreamServices = {
    broadcaster,
    hub,
    push,
    retention,
    close() {
      closing ??= (async () => {
        if (ctx.stream === services) ctx.stream = null;
        await hub.close();
        broadcaster.close();
        await push?.close();
        await retention.close();
      })();
      return closing;
    },
  };
  ctx.stream = services;
  push?.start();
  await broadcaster.start();
  retention.start();
  return services;
}
