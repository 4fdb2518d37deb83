/**
 * Test helpers of the index: one logical commit rendered as a `subscribeRepos` frame, a
 * push body and Jetstream events (same records, same CIDs); a fake `subscribeRepos` server (a real
 * WebSocket server on port 0 with stored replay after a cursor, which also serves its accounts'
 * DID documents); a context over a fresh database; table dumps of the index database; DNS
 * answers for handle verification; an account host DID document server and token minting for
 * authentication; the query API harness. The component-independent helpers (log capture, clocks,
 * servers on port 0, `waitFor`) are `runtime/_test_helpers.ts`'s; the op builders are in
 * `_fixtures.ts`.
 *
 * Test accounts: every DID is hosted, its commits signed by a key derived from the DID
 * ({@link testAccountKey}), its handle `<name>.test` for `didOf(name)` ({@link testHandleOf}).
 * A commit's tree is one node holding the commit's created and updated keys (so deletes are
 * provably absent), signed like the account host's.
 *
 * @module
 */

import { accountDidDocument, type DidDocument } from "../shared/did_doc.ts";
import type { DatabaseSync } from "node:sqlite";
import type { Hono } from "hono";
import assert from "node:assert/strict";
import { importSigningKey, type JwtClaims, signJwt } from "../shared/jwt.ts";
import type { IndexOp, RecordOp } from "../shared/ops.ts";
import { createAppviewApp } from "./app.ts";
import { DID_DOCUMENT_PATH } from "./auth/key_source.ts";
import type { TokenVerifier } from "./auth/verifier.ts";
import type { TxtLookup } from "./workers/did_resolver.ts";
import { writeCar } from "../shared/car.ts";
import { type CID, encodeBlock, formatCid } from "../shared/cid.ts";
import { encodeFrame } from "../shared/frame.ts";
import { deriveP256KeyPair, type P256KeyPair, signCompact } from "../shared/keys.ts";
import { encodeCbor } from "../shared/cbor.ts";
import { fromLexJson, toLexJson } from "../shared/lex_json.ts";
import { encodeMultikeyUncompressed } from "../shared/multikey.ts";
import { createLogger, type Logger, silentLogger } from "../shared/log.ts";
import { encodeTid } from "../shared/tid.ts";
import { loadAppviewConfig } from "./config.ts";
import { type AppviewContext, createAppviewContext } from "./context.ts";
import { openIndexDb } from "./db/open.ts";
import { openSqliteIndexStore, type SqliteStore } from "./db/sqlite_store.ts";
import type { IndexStore, IndexWriterApi, SqliteIndexStore } from "./db/store.ts";
import { type ApplyResult, IndexWriter } from "./ingest/apply_ops.ts";
import {
  type AccountDirectory,
  accountFromDocument,
  type HostedAccount,
  RESOLVE_DID_PATH,
} from "./ingest/sources/account_directory.ts";
import { serveOnPort0, type TestServer, waitFor } from "../runtime/_test_helpers.ts";
import {
  POSTGRES_SKIP_MESSAGE,
  type PostgresCluster,
  startPostgres,
} from "../runtime/_postgres.ts";
import { toJetstreamEvent } from "./ingest/sources/_jetstream_stand_in.ts";

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
      return real.map((op, i) =>
        JSON.parse(JSON.stringify(toJetstreamEvent(op, firstTimeUs + i, rev)))
      );
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
export function testDidDocument(did: string, handle = testHandleOf(did)): DidDocument {
  return accountDidDocument(did, handle, testAccountKey(did).publicKey, "http://127.0.0.1");
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

/**
 * A context over a fresh SQLite store, with what only tests reach past the store: its connection
 * (raw SQL) and its synchronous writer (the one the store's async writer wraps).
 */
export interface TestContext extends AppviewContext, Disposable {
  readonly store: SqliteStore;
  readonly db: DatabaseSync;
  readonly writer: IndexWriter;
}

/** A context over a fresh database (`:memory:` unless `dbPath`), closed on dispose. */
export function openTestContext(
  opts: { dbPath?: string; log?: Logger; now?: () => Date; env?: Record<string, string> } = {},
): TestContext {
  const config = loadAppviewConfig({ DATA_DIR: "/nonexistent", ...opts.env });
  const db = openIndexDb(opts.dbPath ?? ":memory:");
  const log = opts.log ?? createLogger("test", { level: "error", sink: () => {} });
  const store = openSqliteIndexStore(db, { now: opts.now, log: log.child("writer") });
  const ctx = createAppviewContext({
    config,
    store,
    log,
    now: opts.now,
    accounts: new TestAccountDirectory(),
  });
  return { ...ctx, store, db, writer: store.syncWriter, [Symbol.dispose]: () => db.close() };
}

/** A context over either backend's fresh index, with raw SQL on both (`QueryHarness.rows`). */
export interface BackendContext extends AppviewContext, AsyncDisposable {
  readonly backend: Backend;
  rows<T = Record<string, unknown>>(sql: string, ...params: unknown[]): Promise<T[]>;
}

/**
 * A context over a fresh index of `backend` (SQLite: {@link openTestContext}'s; PostgreSQL: a
 * fresh database on this file's cluster, see {@link forEachBackend}), closed on async dispose.
 */
export async function openBackendContext(
  backend: Backend,
  opts: { log?: Logger; now?: () => Date; env?: Record<string, string> } = {},
): Promise<BackendContext> {
  if (backend === "sqlite") {
    const ctx = openTestContext(opts);
    return {
      ...ctx,
      backend,
      rows<T>(sql: string, ...params: unknown[]) {
        const rows = ctx.db.prepare(sql).all(...(params as never[]));
        return Promise.resolve(rows.map((r) => ({ ...r })) as T[]);
      },
      [Symbol.asyncDispose]: () => Promise.resolve(ctx.db.close()),
    };
  }
  const { openPgIndexStore } = await import("./db/pg/store.ts");
  const config = loadAppviewConfig({ DATA_DIR: "/nonexistent", ...opts.env });
  const log = opts.log ?? createLogger("test", { level: "error", sink: () => {} });
  const store = await openPgIndexStore(await freshBackendDatabase(), {
    now: opts.now,
    log: log.child("writer"),
    poolMax: 4,
  });
  const ctx = createAppviewContext({
    config,
    store,
    log,
    now: opts.now,
    accounts: new TestAccountDirectory(),
  });
  return {
    ...ctx,
    backend,
    async rows<T>(sql: string, ...params: unknown[]) {
      const rows = await store.sql.unsafe(toPgPlaceholders(sql), params as never[]);
      return rows.map((r) => ({ ...r })) as T[];
    },
    [Symbol.asyncDispose]: () => store.close(),
  };
}

/**
 * The SQLite connection under a context's store (a running index's, `RunningAppview.ctx`), for
 * tests' raw SQL; fails on another backend.
 */
export function sqliteOf(ctx: AppviewContext): DatabaseSync {
  const store = ctx.store;
  if (store.kind !== "sqlite") throw new Error(`Not a SQLite store: ${store.kind}`);
  return (store as SqliteIndexStore).db;
}

/** A clock pinned to one instant (identical rows whatever the arrival time). */
export const FIXED_NOW = () => new Date("2024-06-01T00:00:00.000Z");

// The index database: full, sorted table dumps to compare states.

/** Options of {@link dumpTables}. */
export interface DumpOptions {
  /** Tables left out (e.g. `ingest_skips`, an event counter; `schema_migrations` across files). */
  exclude?: readonly string[];
  /** Columns left out of every table (e.g. `id` when comparing different arrival orders). */
  omitColumns?: readonly string[];
}

/**
 * Columns holding an interned DID (`actors.id`, schema version 5), per table. Dumps show the DID
 * instead of the id, and `actors` without its ids: ids depend on arrival order, DIDs do not.
 */
const ACTOR_COLUMNS: Readonly<Record<string, readonly string[]>> = {
  actors: [],
  posts: ["author"],
  likes: ["actor", "subject_author"],
  reposts: ["actor", "subject_author"],
  follows: ["follower", "subject"],
  blocks: ["actor", "subject"],
  mutes: ["actor", "subject"],
  notifications: ["recipient", "author", "subject_author"],
};

/**
 * Dumps every table of `db` as sorted rows: ordinary tables with all their columns, FTS5 tables
 * as their rowids (`rowid` column), FTS shadow tables and `sqlite_*` internals skipped. Rows are
 * sorted by their JSON form, so two equal states give deep-equal dumps.
 */
export function dumpTables(
  db: DatabaseSync,
  opts: DumpOptions = {},
): Record<string, Record<string, unknown>[]> {
  const exclude = new Set(opts.exclude ?? []);
  const tables = db.prepare(
    "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name",
  ).all() as { name: string; sql: string }[];
  const virtual = tables.filter((t) => /^CREATE VIRTUAL TABLE/i.test(t.sql)).map((t) => t.name);
  const isShadow = (name: string) => virtual.some((v) => name.startsWith(`${v}_`));
  const raw: Record<string, Record<string, unknown>[]> = {};
  for (const { name } of tables) {
    if (exclude.has(name) || isShadow(name)) continue;
    const select = virtual.includes(name)
      ? `SELECT rowid FROM "${name}"`
      : `SELECT * FROM "${name}"`;
    raw[name] = db.prepare(select).all() as Record<string, unknown>[];
  }
  if (raw.actors === undefined && tables.some((t) => t.name === "actors")) {
    // Excluded, but still the map from ids to DIDs.
    const actors = db.prepare("SELECT id, did FROM actors").all() as Record<string, unknown>[];
    return dumpRows(raw, opts, actors);
  }
  return dumpRows(raw, opts);
}

/** {@link dumpTables}'s form of raw table rows (actor ids as DIDs, columns left out, sorted). */
function dumpRows(
  raw: Record<string, Record<string, unknown>[]>,
  opts: DumpOptions,
  actors: Record<string, unknown>[] = raw.actors ?? [],
): Record<string, Record<string, unknown>[]> {
  const exclude = new Set(opts.exclude ?? []);
  const omit = new Set(opts.omitColumns ?? []);
  const dids = new Map<unknown, unknown>();
  for (const { id, did } of actors) dids.set(typeof id === "bigint" ? Number(id) : id, did);
  const dump: Record<string, Record<string, unknown>[]> = {};
  for (const [name, tableRows] of Object.entries(raw)) {
    if (exclude.has(name)) continue;
    const rows = tableRows.map((row) => {
      const copy: Record<string, unknown> = {};
      const actorColumns = ACTOR_COLUMNS[name] ?? [];
      for (const [k, value] of Object.entries(row)) {
        const v = typeof value === "bigint" ? Number(value) : value;
        if (omit.has(k) || (name === "actors" && k === "id")) continue;
        copy[k] = actorColumns.includes(k) && v !== null ? dids.get(v) ?? v : v;
      }
      return copy;
    });
    const keyed = rows.map((r) => [JSON.stringify(r), r] as const);
    keyed.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
    dump[name] = keyed.map(([, r]) => r);
  }
  return dump;
}

// Handle verification: DNS answers, where the real DNS does not run in tests.

/**
 * A {@link TxtLookup} answering `_atproto.<handle>` with one `did=<did>` record, the DID taken
 * from `didOf(handle)` (a map or a function); other names have no TXT record.
 */
export function atprotoTxtRecords(
  didOf: Readonly<Record<string, string>> | ((handle: string) => string | undefined),
): TxtLookup {
  const find = typeof didOf === "function" ? didOf : (handle: string) => didOf[handle];
  return (name) => {
    const did = name.startsWith("_atproto.") ? find(name.slice("_atproto.".length)) : undefined;
    return Promise.resolve(did === undefined ? [] : [[`did=${did}`]]);
  };
}

// Authentication: a real HTTP server publishing an account host DID document (counting its
// requests, restartable on the same port) and token minting through the same code path the
// account host uses (`deriveP256KeyPair` + `signJwt`, claims of spec 5.1).

/** Service DID of the index in these tests (`APPVIEW_PUBLIC_URL=http://localhost:3000`). */
export const SERVICE_DID = "did:web:localhost%3A3000";
/** The account host's own DID in these tests. */
export const PDS_DID = "did:web:localhost%3A2583";
export const ALICE = "did:plc:alice234567abcdefghijklm";

/** An account host signing key: the raw pair and its WebCrypto signing key. */
export interface TestSigner {
  readonly keyPair: P256KeyPair;
  sign(claims: JwtClaims): Promise<string>;
}

/** Derives a signing key from `secret` the way the account host derives it from PDS_JWT_SECRET. */
export async function makeSigner(secret: string): Promise<TestSigner> {
  const keyPair = deriveP256KeyPair(secret, "pds-jwt-signing");
  const key = await importSigningKey(keyPair);
  return { keyPair, sign: (claims) => signJwt(claims, key, { typ: "at+jwt" }) };
}

/** Access-token claims of spec 5.1 at `nowMs`; `overrides` replace (or, as undefined, drop) claims. */
export function accessClaims(nowMs: number, overrides: Partial<JwtClaims> = {}): JwtClaims {
  const iat = Math.floor(nowMs / 1000);
  const claims: JwtClaims = {
    iss: PDS_DID,
    sub: ALICE,
    aud: SERVICE_DID,
    iat,
    exp: iat + 3600,
    jti: crypto.randomUUID(),
    scope: "com.atproto.access",
    ...overrides,
  };
  for (const [k, v] of Object.entries(claims)) if (v === undefined) delete claims[k];
  return claims;
}

/** The account host's DID document publishing `publicKey` in the spec 5.1 form. */
export function didDocument(publicKey: Uint8Array): Record<string, unknown> {
  return {
    "@context": ["https://www.w3.org/ns/did/v1", "https://w3id.org/security/multikey/v1"],
    id: PDS_DID,
    verificationMethod: [{
      id: `${PDS_DID}#atproto`,
      type: "Multikey",
      controller: PDS_DID,
      publicKeyMultibase: encodeMultikeyUncompressed(publicKey),
    }],
  };
}

/** What the document server answers. */
export interface DocAnswer {
  status?: number;
  /** JSON value, or a raw string body. */
  body: unknown;
}

/** A real HTTP server publishing a DID document; counts requests to the document path. */
export class DidDocServer implements AsyncDisposable {
  answer: DocAnswer;
  /** Requests received on `/.well-known/did.json`. */
  requests = 0;
  /** When set, requests hang until {@link release} (to test the fetch timeout). */
  hang = false;
  #server: Deno.HttpServer<Deno.NetAddr> | null = null;
  #port: number;
  #hanging: Array<() => void> = [];

  constructor(answer: DocAnswer) {
    this.answer = answer;
    this.#port = this.#listen(0);
  }

  get url(): string {
    return `http://127.0.0.1:${this.#port}`;
  }

  get running(): boolean {
    return this.#server !== null;
  }

  /** Serves `publicKey` from now on. */
  setKey(publicKey: Uint8Array): void {
    this.answer = { body: didDocument(publicKey) };
  }

  /** Stops listening (connections are refused) until {@link start}. */
  async stop(): Promise<void> {
    const server = this.#server;
    this.#server = null;
    this.release();
    if (server !== null) {
      await server.shutdown();
      await server.finished;
    }
  }

  /** Listens again on the same port. */
  start(): void {
    if (this.#server === null) this.#listen(this.#port);
  }

  /** Answers every hanging request. */
  release(): void {
    for (const resolve of this.#hanging.splice(0)) resolve();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.stop();
  }

  #listen(port: number): number {
    const server = Deno.serve(
      { hostname: "127.0.0.1", port, onListen() {} },
      (req) => this.#handle(req),
    );
    this.#server = server;
    return server.addr.port;
  }

  async #handle(req: Request): Promise<Response> {
    if (new URL(req.url).pathname !== DID_DOCUMENT_PATH) return new Response(null, { status: 404 });
    this.requests++;
    if (this.hang) await new Promise<void>((resolve) => this.#hanging.push(resolve));
    const { status = 200, body } = this.answer;
    return typeof body === "string"
      ? new Response(body, { status })
      : Response.json(body, { status });
  }
}

/** Encodes a JSON value as a base64url JWT segment. */
export function segment(value: unknown): string {
  const bytes = new TextEncoder().encode(JSON.stringify(value));
  return btoa(String.fromCharCode(...bytes)).replace(/\+/g, "-").replace(/\//g, "_")
    .replace(/=+$/, "");
}

/** An unsigned `alg: none` token. */
export function forgeNoneToken(claims: JwtClaims): string {
  return `${segment({ alg: "none", typ: "JWT" })}.${segment(claims)}.`;
}

/** An HS256 token whose HMAC key is the account host's public key bytes (key confusion). */
export async function forgeHs256Token(claims: JwtClaims, publicKey: Uint8Array): Promise<string> {
  const signingInput = `${segment({ alg: "HS256", typ: "JWT" })}.${segment(claims)}`;
  const key = await crypto.subtle.importKey(
    "raw",
    publicKey as Uint8Array<ArrayBuffer>,
    { name: "HMAC", hash: "SHA-256" },
    false,
    ["sign"],
  );
  const mac = new Uint8Array(
    await crypto.subtle.sign("HMAC", key, new TextEncoder().encode(signingInput)),
  );
  const sig = btoa(String.fromCharCode(...mac)).replace(/\+/g, "-").replace(/\//g, "_")
    .replace(/=+$/, "");
  return `${signingInput}.${sig}`;
}

// The query API: a real index (SQLite `:memory:`, or a fresh PostgreSQL database), the real write
// path with a controllable clock, and the real app answering `app.request()`. On SQLite `apply`
// calls the store's synchronous writer (the one its async boundary wraps), so it has applied the
// ops when it returns, awaited or not; on PostgreSQL it must be awaited.

/** The clock of the harness: `ms` moves by `stepMs` at every reading, and by `tick`. */
export class TestClock {
  constructor(public ms: number, public stepMs = 0) {}
  readonly now = (): Date => {
    const d = new Date(this.ms);
    this.ms += this.stepMs;
    return d;
  };
  tick(ms = 1): void {
    this.ms += ms;
  }
}

/** A backend of the index (`IndexStore.kind`). */
export type Backend = "sqlite" | "postgres";

/** An index with its app. */
export interface QueryHarness extends Disposable, AsyncDisposable {
  readonly backend: Backend;
  readonly store: IndexStore;
  /** The SQLite connection (throws on PostgreSQL: use {@link QueryHarness.rows}). */
  readonly db: DatabaseSync;
  /** The synchronous SQLite writer (throws on PostgreSQL). */
  readonly writer: IndexWriter;
  readonly clock: TestClock;
  readonly app: Hono;
  /**
   * Applies ops through the write path; fails the test when any op is skipped. On SQLite the ops
   * are applied (or the failure thrown) before it returns.
   */
  apply(...ops: IndexOp[]): Promise<void>;
  /**
   * Runs one SQL statement on either backend and answers its rows: `?` placeholders (outside
   * quotes) become `$1`, `$2`, ... on PostgreSQL, whose `int8` values come back as numbers.
   */
  rows<T = Record<string, unknown>>(sql: string, ...params: unknown[]): Promise<T[]>;
  /** Sends a request to the app; returns the status, headers and parsed JSON body. */
  request(
    path: string,
    init?: RequestInit,
    // deno-lint-ignore no-explicit-any
  ): Promise<{ status: number; headers: Headers; body: any }>;
}

/** Options of {@link openQueryHarness} and {@link openHarness}. */
export interface QueryHarnessOptions {
  env?: Record<string, string>;
  verifier?: TokenVerifier | null;
  stepMs?: number;
  batchSize?: number;
}

function harnessConfig(opts: QueryHarnessOptions) {
  return loadAppviewConfig({
    APPVIEW_AUTH_REQUIRED: "false",
    APPVIEW_PUBLIC_URL: "http://localhost:3000",
    ...opts.env,
  });
}

function harnessClock(opts: QueryHarnessOptions): TestClock {
  return new TestClock(Date.parse("2024-06-01T00:00:00.000Z"), opts.stepMs ?? 0);
}

async function requestJson(app: Hono, path: string, init?: RequestInit) {
  const res = await app.request(path, init);
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: text === "" ? null : JSON.parse(text) };
}

/**
 * Opens a harness over SQLite (synchronously, for `using h = openQueryHarness()`); by default
 * authentication is off (`APPVIEW_AUTH_REQUIRED=false`). {@link openHarness} opens either backend.
 */
export function openQueryHarness(opts: QueryHarnessOptions = {}): QueryHarness {
  const config = harnessConfig(opts);
  const db = openIndexDb(":memory:");
  const clock = harnessClock(opts);
  const store = openSqliteIndexStore(db, {
    now: clock.now,
    log: silentLogger,
    batchSize: opts.batchSize ?? 5_000,
  });
  const ctx = createAppviewContext({ config, store, log: silentLogger, now: clock.now });
  const writer = store.syncWriter;
  const app = createAppviewApp(ctx, { verifier: opts.verifier ?? null });
  return {
    backend: "sqlite",
    store,
    db,
    writer,
    clock,
    app,
    apply(...ops) {
      // Synchronous on purpose: tests that do not await still see the ops applied.
      const result = writer.applyOps(ops);
      assert.equal(result.skipped, 0, "an op was skipped");
      return Promise.resolve();
    },
    rows<T>(sql: string, ...params: unknown[]) {
      const rows = db.prepare(sql).all(...(params as never[]));
      return Promise.resolve(rows.map((r) => ({ ...r })) as T[]);
    },
    request: (path, init) => requestJson(app, path, init),
    [Symbol.dispose]: () => db.close(),
    [Symbol.asyncDispose]: () => Promise.resolve(db.close()),
  };
}

/** Rewrites the `?` placeholders of `sql` (outside quotes) as PostgreSQL's `$n`. */
export function toPgPlaceholders(sql: string): string {
  let n = 0;
  let quote: string | null = null;
  let out = "";
  for (const c of sql) {
    if (quote !== null) {
      if (c === quote) quote = null;
    } else if (c === "'" || c === '"') {
      quote = c;
    } else if (c === "?") {
      out += `$${++n}`;
      continue;
    }
    out += c;
  }
  return out;
}

/** Opens a harness over `backend` (PostgreSQL: a fresh database on this file's cluster). */
export async function openHarness(
  backend: Backend,
  opts: QueryHarnessOptions = {},
): Promise<QueryHarness> {
  if (backend === "sqlite") return openQueryHarness(opts);
  const { openPgIndexStore } = await import("./db/pg/store.ts");
  const config = harnessConfig(opts);
  const clock = harnessClock(opts);
  const store = await openPgIndexStore(await freshBackendDatabase(), {
    now: clock.now,
    log: silentLogger,
    batchSize: opts.batchSize ?? 5_000,
    poolMax: 4,
  });
  const ctx = createAppviewContext({ config, store, log: silentLogger, now: clock.now });
  const app = createAppviewApp(ctx, { verifier: opts.verifier ?? null });
  const sqliteOnly = (what: string): never => {
    throw new Error(`h.${what} is SQLite's; on PostgreSQL use h.rows or h.store`);
  };
  return {
    backend,
    store,
    get db(): DatabaseSync {
      return sqliteOnly("db");
    },
    get writer(): IndexWriter {
      return sqliteOnly("writer");
    },
    clock,
    app,
    async apply(...ops) {
      const result = await store.writer.applyOps(ops);
      assert.equal(result.skipped, 0, "an op was skipped");
    },
    async rows<T>(sql: string, ...params: unknown[]) {
      const rows = await store.sql.unsafe(toPgPlaceholders(sql), params as never[]);
      return rows.map((r) => ({ ...r })) as T[];
    },
    request: (path, init) => requestJson(app, path, init),
    [Symbol.dispose]: () => sqliteOnly("[Symbol.dispose] (use await using)"),
    [Symbol.asyncDispose]: () => store.close(),
  };
}

// One suite over both backends (issue 40): `forEachBackend` registers a test for SQLite and one
// for PostgreSQL. Without PostgreSQL binaries the second is ignored and the file prints how to
// run it (POSTGRES_SKIP_MESSAGE); with `CI=true` it runs and fails instead. One throwaway cluster
// per test file, started by the file's first PostgreSQL test and stopped by the test
// `endBackendTests()` registers last; a fresh database per test, copied from a migrated template.

let pgPresent: boolean | null = null;
let pgDatabases = 0;

/** Whether PostgreSQL's binaries look present (a synchronous look; `locatePostgres` decides). */
function postgresPresent(): boolean {
  if (pgPresent !== null) return pgPresent;
  const exists = (path: string) => {
    try {
      return Deno.statSync(path).isFile;
    } catch {
      return false;
    }
  };
  const fromEnv = Deno.env.get("PG_BINDIR");
  let found: boolean;
  if (fromEnv !== undefined && fromEnv !== "") {
    found = exists(`${fromEnv}/initdb`);
  } else {
    found = (Deno.env.get("PATH") ?? "").split(":").some((d) => d !== "" && exists(`${d}/initdb`));
    try {
      for (const e of Deno.readDirSync("/usr/lib/postgresql")) {
        if (exists(`/usr/lib/postgresql/${e.name}/bin/initdb`)) found = true;
      }
    } catch { /* no Debian install */ }
  }
  // Under CI the PostgreSQL half runs, and fails without an install (`locatePostgres`).
  pgPresent = found || Deno.env.get("CI") === "true";
  if (!pgPresent) console.warn(POSTGRES_SKIP_MESSAGE);
  return pgPresent;
}

/** This file's cluster, its migrated template database and a connection to create copies. */
interface BackendCluster {
  readonly cluster: PostgresCluster;
  readonly template: string;
  /** `CREATE DATABASE` runs here (the driver of `db/pg`, loaded with the first test). */
  readonly admin: { unsafe(sql: string): Promise<unknown>; end(): Promise<void> };
}

let pgBackend: Promise<BackendCluster> | null = null;

/**
 * A new database with the index schema on this file's cluster: a copy of a template migrated
 * once (a copy and opening it took 129 ms, median, on the loaded two-core machine; `createdb`
 * and the migrations 182 ms; STRATEGY FILE_COPY 168 ms).
 */
export async function freshBackendDatabase(): Promise<string> {
  pgBackend ??= (async () => {
    const cluster = await startPostgres();
    if (cluster === null) throw new Error(POSTGRES_SKIP_MESSAGE);
    const template = `index_template_${Deno.pid}`;
    const { openPgIndexStore } = await import("./db/pg/store.ts");
    const store = await openPgIndexStore(await cluster.createDatabase(template), { poolMax: 1 });
    await store.close();
    const { default: postgres } = await import("postgres");
    const admin = postgres(cluster.url, { max: 1, onnotice: () => {} });
    return { cluster, template, admin };
  })();
  const { cluster, template, admin } = await pgBackend;
  const name = `test_${Deno.pid}_${++pgDatabases}`;
  await admin.unsafe(`CREATE DATABASE ${name} TEMPLATE ${template}`);
  return cluster.url.replace(/\/[^/]*$/, `/${name}`);
}

/**
 * The environment that puts an index started from its configuration (`startAppview`,
 * `openIndexStore`) on `backend`: nothing for SQLite (`DATA_DIR` places it), on PostgreSQL
 * `APPVIEW_DATABASE_URL` naming a fresh database on this file's cluster (see {@link forEachBackend}).
 */
export async function backendDatabaseEnv(backend: Backend): Promise<Record<string, string>> {
  if (backend === "sqlite") return {};
  return { APPVIEW_DATABASE_URL: await freshBackendDatabase() };
}

/** Sanitizer options {@link forEachBackend} passes to the SQLite test (e.g. off for sockets). */
export type BackendTestOptions = Pick<Deno.TestDefinition, "sanitizeResources" | "sanitizeOps">;

/**
 * Registers `fn` twice, as `[sqlite] name` and `[postgres] name`, each given its backend (open
 * the index with {@link openHarness}). The PostgreSQL test is ignored without PostgreSQL, and
 * not sanitized (the driver keeps timers per connection after `end()`); `opts` applies to the
 * SQLite test.
 */
export function forEachBackend(
  name: string,
  fn: (backend: Backend) => Promise<void>,
  opts: BackendTestOptions = {},
): void {
  Deno.test({ name: `[sqlite] ${name}`, fn: () => fn("sqlite"), ...opts });
  Deno.test({
    name: `[postgres] ${name}`,
    ignore: !postgresPresent(),
    fn: () => fn("postgres"),
    sanitizeResources: false,
    sanitizeOps: false,
  });
}

/**
 * A fresh index of either backend reached only through the store's writer (`IndexWriterApi`) and
 * raw SQL: the write path's tests on both backends (`_fixtures.ts` `openTestIndex` is SQLite's).
 */
export interface BackendIndex extends AsyncDisposable {
  readonly backend: Backend;
  readonly store: IndexStore;
  readonly writer: IndexWriterApi;
  /** Applies ops through `store.writer` and returns the result. */
  apply(...ops: IndexOp[]): Promise<ApplyResult>;
  /** One row as a plain object, or undefined (`?` placeholders on both backends). */
  row(sql: string, ...params: unknown[]): Promise<Record<string, unknown> | undefined>;
  /** All rows as plain objects (`?` placeholders on both backends). */
  rows(sql: string, ...params: unknown[]): Promise<Record<string, unknown>[]>;
  /**
   * Every table as {@link dumpTables} gives it (on PostgreSQL: its base tables, `schema_migrations`
   * left out; ids as numbers), to compare states reached on one backend.
   */
  dump(opts?: DumpOptions): Promise<Record<string, Record<string, unknown>[]>>;
  /** The SQLite connection, for SQLite-only checks (throws on PostgreSQL). */
  readonly db: DatabaseSync;
}

/**
 * Opens a {@link BackendIndex} whose writer's clock ticks one second per reading from
 * 2024-06-01 (`fixedClock` pins it, `now` replaces it), as `openTestIndex` does.
 */
export async function openBackendIndex(
  backend: Backend,
  opts: { fixedClock?: boolean; now?: () => Date; batchSize?: number } = {},
): Promise<BackendIndex> {
  let t = Date.parse("2024-06-01T00:00:00.000Z");
  const now = opts.now ?? (opts.fixedClock ? () => new Date(t) : () => new Date(t += 1000));
  let store: IndexStore;
  let rows: (sql: string, params: unknown[]) => Promise<Record<string, unknown>[]>;
  let close: () => Promise<void>;
  let db: DatabaseSync | null = null;
  if (backend === "sqlite") {
    db = openIndexDb(":memory:");
    store = openSqliteIndexStore(db, { now, log: silentLogger, batchSize: opts.batchSize });
    const sqlite = db;
    rows = (sql, params) =>
      Promise.resolve(sqlite.prepare(sql).all(...(params as never[])).map((r) => ({ ...r })));
    close = () => Promise.resolve(sqlite.close());
  } else {
    const { openPgIndexStore } = await import("./db/pg/store.ts");
    const pg = await openPgIndexStore(await freshBackendDatabase(), {
      now,
      log: silentLogger,
      batchSize: opts.batchSize,
      poolMax: 4,
    });
    store = pg;
    rows = async (sql, params) =>
      (await pg.sql.unsafe(toPgPlaceholders(sql), params as never[])).map((r) => ({ ...r }));
    close = () => pg.close();
  }
  return {
    backend,
    store,
    writer: store.writer,
    apply: (...ops) => store.writer.applyOps(ops),
    row: async (sql, ...params) => (await rows(sql, params))[0],
    rows: (sql, ...params) => rows(sql, params),
    async dump(opts = {}) {
      if (db !== null) return dumpTables(db, opts);
      const tables = await rows(
        `SELECT table_name AS name FROM information_schema.tables
         WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'
         AND table_name <> 'schema_migrations' ORDER BY table_name`,
        [],
      );
      const raw: Record<string, Record<string, unknown>[]> = {};
      for (const { name } of tables) {
        raw[name as string] = await rows(`SELECT * FROM "${name}"`, []);
      }
      return dumpRows(raw, opts);
    },
    get db(): DatabaseSync {
      if (db === null) throw new Error("ix.db is SQLite's; on PostgreSQL use ix.rows or ix.store");
      return db;
    },
    [Symbol.asyncDispose]: close,
  };
}

/** Registers the last test of a file using {@link forEachBackend}: it stops the file's cluster. */
export function endBackendTests(): void {
  Deno.test({
    name: "(stops the file's PostgreSQL cluster)",
    ignore: !postgresPresent(),
    async fn() {
      const backend = await pgBackend?.catch(() => null);
      pgBackend = null;
      await backend?.admin.end();
      await backend?.cluster.stop();
    },
    sanitizeResources: false,
    sanitizeOps: false,
  });
}

/** Member names of a Post, in the order of spec 2.1. */
export const POST_KEYS = [
  "uri",
  "did",
  "handle",
  "rkey",
  "collection",
  "text",
  "cid",
  "parent_uri",
  "root_uri",
  "embed",
  "langs",
  "created_at",
  "like_count",
  "repost_count",
  "avatar_cid",
];

/** Asserts the spec 2.1 shape of a Post: every member, in order, with its type. */
export function assertPostShape(post: Record<string, unknown>): void {
  assert.deepEqual(Object.keys(post), POST_KEYS);
  for (const key of ["uri", "did", "handle", "rkey", "collection", "text", "cid", "created_at"]) {
    assert.equal(typeof post[key], "string", key);
  }
  assert.ok(!(post.handle as string).startsWith("@"), "handle has no leading @");
  for (const key of ["parent_uri", "root_uri", "avatar_cid"]) {
    assert.ok(post[key] === null || typeof post[key] === "string", key);
  }
  assert.ok(
    post.embed === null ||
      (typeof post.embed === "object" && typeof (post.embed as { $type: unknown }).$type ===
          "string"),
    "embed",
  );
  assert.ok(Array.isArray(post.langs) && post.langs.every((l) => typeof l === "string"), "langs");
  assert.ok(Number.isInteger(post.like_count), "like_count");
  assert.ok(Number.isInteger(post.repost_count), "repost_count");
}

/** A fake Jetstream endpoint: a real WebSocket server whose events the test sends. */
export interface FakeJetstream extends AsyncDisposable {
  /** WebSocket URL of the `/subscribe` endpoint, e.g. `ws://127.0.0.1:1234/subscribe`. */
  readonly url: string;
  /** Query strings of every connection made so far (`wantedCollections`, `cursor`, ...). */
  readonly requests: URLSearchParams[];
  /** Number of currently open client sockets. */
  openCount(): number;
  /** Sends one event (serialised as JSON text unless already a string) to every open client. */
  send(event: unknown): void;
  /** Closes every open client socket (the server keeps accepting new ones). */
  dropClients(code?: number): void;
  /** Waits until at least `n` clients are connected. */
  waitForClients(n?: number): Promise<void>;
  close(): Promise<void>;
}

/** Starts a fake Jetstream server on port 0. */
export function startFakeJetstream(): FakeJetstream {
  const sockets = new Set<WebSocket>();
  const requests: URLSearchParams[] = [];
  const server = serveOnPort0((req) => {
    const url = new URL(req.url);
    if (url.pathname !== "/subscribe" || req.headers.get("upgrade") !== "websocket") {
      return new Response("not found", { status: 404 });
    }
    requests.push(url.searchParams);
    const { socket, response } = Deno.upgradeWebSocket(req);
    socket.onopen = () => sockets.add(socket);
    socket.onclose = () => sockets.delete(socket);
    socket.onerror = () => sockets.delete(socket);
    return response;
  });
  const closeAll = (code = 1000) => {
    for (const s of sockets) {
      try {
        s.close(code);
      } catch { /* already closing */ }
    }
  };
  const close = async () => {
    closeAll();
    await waitFor(() => sockets.size === 0, { timeoutMs: 2000 }).catch(() => {});
    await server.close();
  };
  return {
    url: `ws://127.0.0.1:${server.port}/subscribe`,
    requests,
    openCount: () => sockets.size,
    send(event) {
      const text = typeof event === "string" ? event : JSON.stringify(event);
      for (const s of sockets) if (s.readyState === WebSocket.OPEN) s.send(text);
    },
    dropClients: closeAll,
    waitForClients: (n = 1) =>
      waitFor(() => sockets.size >= n, { message: `${n} jetstream clients` }).then(() => {}),
    close,
    [Symbol.asyncDispose]: close,
  };
}
