/**
 * Test helpers of the index: one logical commit rendered as a `subscribeRepos` frame, a
 * push body and Jetstream events (same records, same CIDs); a fake `subscribeRepos` server (a real
 * WebSocket server on port 0 with stored replay after a cursor, which also serves its accounts'
 * DID documents); a context over a fresh database. The component-independent helpers (log
 * capture, servers on port 0, `waitFor`) are `runtime/_test_helpers.ts`'s.
 *
 * Test accounts: every DID is hosted, its commits signed by a key derived from the DID
 * ({@link testAccountKey}), its handle `<name>.test` for `didOf(name)` ({@link testHandleOf}).
 * A commit's tree is one node holding the commit's created and updated keys (so deletes are
 * provably absent), signed like the account host's.
 *
 * @module
 */

import { writeCar } from "../shared/car.ts";
import { type CID, encodeBlock, formatCid } from "../shared/cid.ts";
import { encodeFrame } from "../shared/frame.ts";
import { deriveP256KeyPair, type P256KeyPair, signCompact } from "../shared/keys.ts";
import { encodeCbor } from "../shared/cbor.ts";
import { fromLexJson, toLexJson } from "../shared/lex_json.ts";
import { encodeMultikey } from "../shared/multikey.ts";
import { createLogger, type Logger } from "../shared/log.ts";
import type { RecordOp } from "../shared/ops.ts";
import { encodeTid } from "../shared/tid.ts";
import { loadAppviewConfig } from "./config.ts";
import type { AppviewContext } from "./context.ts";
import { openIndexDb } from "./db/open.ts";
import { IndexWriter } from "./ingest/apply_ops.ts";
import {
  type AccountDirectory,
  accountFromDocument,
  type HostedAccount,
  RESOLVE_DID_PATH,
} from "./ingest/sources/account_directory.ts";
import { serveOnPort0, type TestServer, waitFor } from "../runtime/_test_helpers.ts";

/** A debug-level logger whose lines are kept parsed (`runtime/_test_helpers.ts`). */
export { captureLogRecords } from "../runtime/_test_helpers.ts";

/** Consumer options for tests: reconnect within milliseconds. */
export const FAST_BACKOFF = { backoff: { initialMs: 5, maxMs: 20 } };

/** Path of the stream endpoint. */
export const SUBSCRIBE_REPOS_PATH = "/xrpc/com.atproto.sync.subscribeRepos";
const TIME = "2024-05-01T12:00:00.000Z";

/** One commit of one repository, ready for the three sources. */
export interface TestCommit {
  readonly did: string;
  readonly seq: number;
  readonly rev: string;
  /** Record ops with the real CIDs of their DAG-CBOR blocks. */
  readonly ops: readonly RecordOp[];
  /** Handle the account host supplies in the push body. */
  readonly handle: string | null;
  /** The `subscribeRepos` frame. */
  frame(opts?: { cidForm?: "instance" | "string" }): Uint8Array;
  /** The `/internal/ingest-commit` body. */
  push(): Record<string, unknown>;
  /** Jetstream events, one per op, `time_us` from `firstTimeUs` up. */
  jetstream(firstTimeUs: number): Record<string, unknown>[];
}

/** The `rev` {@link makeCommit} gives the commit of `seq` (TIDs grow with `seq`). */
export function revOf(seq: number): string {
  return encodeTid(1_714_564_800_000_000 + seq, 1);
}

/**
 * Builds a commit of `ops` (all by the same DID; their CIDs are replaced by the real CIDs of the
 * records' DAG-CBOR blocks, links binary as the account host writes them). `since` (the previous
 * commit's rev, null for a repository's first) goes into the frame and the push body; without it
 * the frame carries an old fixed rev and the push body none. `sign: false` leaves the commit's
 * signature zero (no push verifies then; a stream benchmark saves the signing).
 */
export function makeCommit(
  seq: number,
  ops: readonly RecordOp[],
  opts: { handle?: string | null; since?: string | null; sign?: boolean } = {},
): TestCommit {
  const did = ops[0].did;
  const rev = revOf(seq);
  const blocks: ({ cid: CID; bytes: Uint8Array } | null)[] = ops.map((op) =>
    op.record === null ? null : encodeBlock(fromLexJson(op.record))
  );
  const real: RecordOp[] = ops.map((op, i) => ({
    ...op,
    cid: blocks[i] === null ? null : formatCid(blocks[i]!.cid),
  }));
  const tree = encodeBlock(treeNode(real));
  const unsigned = { did, version: 3, data: tree.cid, rev, prev: null };
  // A zero signature costs nothing and fails every check (benchmarks of the stream path).
  const sig = opts.sign === false
    ? new Uint8Array(64)
    : signCompact(testAccountKey(did).privateKey, encodeCbor(unsigned));
  const commitBlock = encodeBlock({ ...unsigned, sig });
  const present = blocks.filter((b): b is { cid: CID; bytes: Uint8Array } => b !== null);
  const car = writeCar([commitBlock.cid], [commitBlock, tree, ...present]);
  return {
    did,
    seq,
    rev,
    ops: real,
    handle: opts.handle ?? null,
    frame({ cidForm = "instance" } = {}) {
      return encodeFrame({ op: 1, t: "#commit" }, {
        seq,
        rebase: false,
        tooBig: false,
        repo: did,
        commit: commitBlock.cid,
        rev,
        since: opts.since === undefined ? "3jzfcijpj2z2a" : opts.since,
        blocks: car,
        ops: real.map((op, i) => ({
          action: op.action,
          path: `${op.collection}/${op.rkey}`,
          cid: blocks[i] === null ? null : cidForm === "instance" ? blocks[i]!.cid : op.cid,
        })),
        blobs: [],
        time: TIME,
      });
    },
    push() {
      const body: Record<string, unknown> = {
        did,
        rev,
        commit: formatCid(commitBlock.cid),
        blocks: toLexJson(car),
        ops: real.map((op) => ({
          action: op.action,
          collection: op.collection,
          rkey: op.rkey,
          cid: op.cid,
          record: op.record,
        })),
      };
      if (this.handle !== null) body.handle = this.handle;
      if (opts.since !== undefined) body.since = opts.since;
      return JSON.parse(JSON.stringify(body));
    },
    jetstream(firstTimeUs) {
      return real.map((op, i) => {
        const commit: Record<string, unknown> = {
          rev,
          operation: op.action,
          collection: op.collection,
          rkey: op.rkey,
        };
        if (op.record !== null) {
          commit.record = op.record;
          commit.cid = op.cid;
        }
        return JSON.parse(
          JSON.stringify({ did, time_us: firstTimeUs + i, kind: "commit", commit }),
        );
      });
    },
  };
}

/** The one tree node of a test commit: its created and updated keys, sorted. */
function treeNode(ops: readonly RecordOp[]): Record<string, unknown> {
  const enc = new TextEncoder();
  const entries = ops.filter((op) => op.cid !== null)
    .map((op) => ({ key: enc.encode(`${op.collection}/${op.rkey}`), cid: op.cid! }))
    .sort((a, b) => compareBytes(a.key, b.key));
  let prev = new Uint8Array(0);
  return {
    l: null,
    e: entries.map(({ key, cid }) => {
      let p = 0;
      while (p < key.length && p < prev.length && key[p] === prev[p]) p++;
      prev = key;
      return { p, k: key.slice(p), v: parseCidLink(cid), t: null };
    }),
  };
}

function parseCidLink(cid: string): CID {
  return fromLexJson({ $link: cid }) as CID;
}

function compareBytes(a: Uint8Array, b: Uint8Array): number {
  for (let i = 0; i < Math.min(a.length, b.length); i++) if (a[i] !== b[i]) return a[i] - b[i];
  return a.length - b.length;
}

const testKeys = new Map<string, P256KeyPair>();

/** The key that signs a test account's commits (derived from the DID). */
export function testAccountKey(did: string): P256KeyPair {
  let key = testKeys.get(did);
  if (key === undefined) {
    key = deriveP256KeyPair(did, "test account key");
    testKeys.set(did, key);
  }
  return key;
}

/** The handle of a test account: `<name>.test` for `didOf(name)`. */
export function testHandleOf(did: string): string {
  return `${did.slice("did:plc:".length).replace(/x+$/, "")}.test`;
}

/** The DID document a test account host serves for `did`. */
export function testDidDocument(did: string, handle = testHandleOf(did)): Record<string, unknown> {
  return {
    "@context": ["https://www.w3.org/ns/did/v1", "https://w3id.org/security/multikey/v1"],
    id: did,
    alsoKnownAs: [`at://${handle}`],
    verificationMethod: [{
      id: `${did}#atproto`,
      type: "Multikey",
      controller: did,
      publicKeyMultibase: encodeMultikey(testAccountKey(did).publicKey),
    }],
    service: [{
      id: "#atproto_pds",
      type: "AtprotoPersonalDataServer",
      serviceEndpoint: "http://127.0.0.1",
    }],
  };
}

/** The test accounts as a directory: every DID hosted, with its test key and handle. */
export class TestAccountDirectory implements AccountDirectory {
  readonly #cache = new Map<string, Promise<HostedAccount>>();
  /** Handles that differ from {@link testHandleOf}, by DID. */
  readonly handles = new Map<string, string>();

  lookup(did: string): Promise<HostedAccount> {
    let account = this.#cache.get(did);
    if (account === undefined) {
      account = accountFromDocument(did, testDidDocument(did, this.handles.get(did)));
      this.#cache.set(did, account);
    }
    return account;
  }
}

/** An `#info` frame. */
export function infoFrame(name: string, message?: string): Uint8Array {
  return encodeFrame({ op: 1, t: "#info" }, message === undefined ? { name } : { name, message });
}

/** An error frame. */
export function errorFrame(error: string, message?: string): Uint8Array {
  return encodeFrame({ op: -1 }, message === undefined ? { error } : { error, message });
}

/** A fake `subscribeRepos`: stored frames replayed after the client's cursor, then live. */
export interface FakeRepoStream extends AsyncDisposable {
  /** WebSocket URL of the endpoint. */
  readonly url: string;
  /** `cursor` query value of every connection (null when absent). */
  readonly cursors: (string | null)[];
  /** `Authorization` header of every connection's upgrade request (null when absent). */
  readonly authorizations: (string | null)[];
  /** Stores a frame with its seq and sends it to every open client. */
  append(seq: number, frame: Uint8Array): void;
  /** Sends raw bytes (or text) to every open client without storing them. */
  sendRaw(data: Uint8Array | string): void;
  openCount(): number;
  dropClients(): void;
  waitForClients(n?: number): Promise<void>;
  close(): Promise<void>;
}

/** Options of {@link startFakeRepoStream}. */
export interface FakeRepoStreamOptions {
  /** Replay ignores the cursor and sends every stored frame (to test duplicate dropping). */
  ignoreCursor?: boolean;
  /** Replay sends this many frames, then yields to the event loop (to pace a long replay). */
  replayChunk?: number;
  /** Pause between replay chunks, ms. */
  replayPauseMs?: number;
}

/** Starts a fake `subscribeRepos` server on port 0. */
export function startFakeRepoStream(opts: FakeRepoStreamOptions = {}): FakeRepoStream {
  const stored: { seq: number; frame: Uint8Array }[] = [];
  /** Sockets that finished replay and receive live frames. */
  const sockets = new Set<WebSocket>();
  /** Every open socket. */
  const all = new Set<WebSocket>();
  const cursors: (string | null)[] = [];
  const authorizations: (string | null)[] = [];
  const replays = new Set<Promise<void>>();
  let closing = false;
  const server: TestServer = serveOnPort0((req) => {
    const url = new URL(req.url);
    if (url.pathname === RESOLVE_DID_PATH) {
      return Response.json({ didDoc: testDidDocument(url.searchParams.get("did") ?? "") });
    }
    if (url.pathname !== SUBSCRIBE_REPOS_PATH || req.headers.get("upgrade") !== "websocket") {
      return new Response("not found", { status: 404 });
    }
    const cursor = url.searchParams.get("cursor");
    cursors.push(cursor);
    authorizations.push(req.headers.get("authorization"));
    const { socket, response } = Deno.upgradeWebSocket(req);
    socket.onopen = () => {
      all.add(socket);
      const after = opts.ignoreCursor || cursor === null ? 0 : Number(cursor);
      const replay = (async () => {
        const chunk = opts.replayChunk ?? Infinity;
        let sent = 0;
        for (let i = 0;; i++) {
          if (closing || socket.readyState !== WebSocket.OPEN) return;
          if (i >= stored.length) {
            // No await between the last check and joining the live set: nothing is missed.
            sockets.add(socket);
            return;
          }
          if (stored[i].seq <= after) continue;
          socket.send(stored[i].frame);
          if (++sent % chunk === 0) {
            await new Promise((r) => setTimeout(r, opts.replayPauseMs ?? 0));
          }
        }
      })();
      replays.add(replay);
      replay.finally(() => replays.delete(replay));
    };
    const forget = () => {
      sockets.delete(socket);
      all.delete(socket);
    };
    socket.onclose = forget;
    socket.onerror = forget;
    return response;
  });
  const send = (data: Uint8Array | string) => {
    for (const s of sockets) if (s.readyState === WebSocket.OPEN) s.send(data);
  };
  const dropClients = () => {
    for (const s of all) {
      try {
        s.close(1000);
      } catch { /* closing */ }
    }
  };
  const close = async () => {
    closing = true;
    await Promise.all(replays);
    dropClients();
    await waitFor(() => all.size === 0, { timeoutMs: 2000 }).catch(() => {});
    await server.close();
  };
  return {
    url: `ws://127.0.0.1:${server.port}${SUBSCRIBE_REPOS_PATH}`,
    cursors,
    authorizations,
    append(seq, frame) {
      stored.push({ seq, frame });
      send(frame);
    },
    sendRaw: send,
    openCount: () => all.size,
    dropClients,
    waitForClients: (n = 1) =>
      waitFor(() => sockets.size >= n, { message: `${n} stream clients` }).then(() => {}),
    close,
    [Symbol.asyncDispose]: close,
  };
}

/** A context over a fresh database (`:memory:` unless `dbPath`), closed on dispose. */
export function openTestContext(
  opts: { dbPath?: string; log?: Logger; now?: () => Date; env?: Record<string, string> } = {},
): AppviewContext & Disposable {
  const config = loadAppviewConfig({ DATA_DIR: "/nonexistent", ...opts.env });
  const db = openIndexDb(opts.dbPath ?? ":memory:");
  const log = opts.log ?? createLogger("test", { level: "error", sink: () => {} });
  const now = opts.now ?? (() => new Date());
  const writer = new IndexWriter(db, { now, log });
  const accounts = new TestAccountDirectory();
  return { config, db, writer, log, now, accounts, [Symbol.dispose]: () => db.close() };
}

/** A clock pinned to one instant (identical rows whatever the arrival time). */
export const FIXED_NOW = () => new Date("2024-06-01T00:00:00.000Z");
