/**
 * Read side of the repository: records (`repo.getRecord`, `listRecords`, `describeRepo`) and
 * the sync exports (`sync.getRepo`, `getBlocks`, `getRecord` proofs, `listRepos`). Reads never
 * take the write lock: every value read is immutable (blocks) or read once (the root).
 *
 * @module
 */

import { type Pace, TimeSlicer } from "./time_slice.ts";
import { writeCar } from "../../shared/car.ts";
import { decodeCbor } from "../../shared/cbor.ts";
import { type CID, formatCid, parseCid } from "../../shared/cid.ts";
import { formatAtUri } from "../../shared/at_uri.ts";
import { toLexJson } from "../../shared/lex_json.ts";
import {
  repoRecordCollectionPrefix,
  repoRecordKey,
  repoRecordPrefix,
  repoRootKey,
  repoRootPrefix,
} from "../store/keys.ts";
import type { BlockStore } from "./block_store.ts";
import { decodeCommit } from "./commit.ts";
import type { RepoRoot, StoredRecord } from "./repo_root.ts";
import { type Block, decodeNode, Mst } from "./mst.ts";
import { RepoError } from "./errors.ts";

/** A record as `repo.getRecord` and `listRecords` answer it. */
export interface RecordView {
  uri: string;
  cid: string;
  value: unknown;
}

/** Reads the root of a repository, or null. */
export async function readRepoRoot(kv: Deno.Kv, did: string): Promise<RepoRoot | null> {
  return (await kv.get<RepoRoot>(repoRootKey(did))).value;
}

/** Reads the root of a repository; throws `RepoNotFound` when there is none. */
export async function requireRepoRoot(kv: Deno.Kv, did: string): Promise<RepoRoot> {
  const root = await readRepoRoot(kv, did);
  if (!root) throw new RepoError("RepoNotFound", `Could not find repo for DID: ${did}`);
  return root;
}

/** Reads one record by collection and rkey; null when absent. */
export async function getRecord(
  kv: Deno.Kv,
  did: string,
  collection: string,
  rkey: string,
): Promise<RecordView | null> {
  const entry = await kv.get<StoredRecord>(repoRecordKey(did, collection, rkey));
  if (entry.value === null) return null;
  return {
    uri: formatAtUri(did, collection, rkey),
    cid: entry.value.cid,
    value: toLexJson(decodeCbor(entry.value.bytes)),
  };
}

/**
 * Lists the records of a collection by rkey, descending by default (newest TID first); the
 * cursor is the last rkey returned.
 */
export async function listRecords(
  kv: Deno.Kv,
  did: string,
  collection: string,
  opts: { limit: number; cursor?: string; reverse?: boolean },
): Promise<{ records: RecordView[]; cursor?: string }> {
  const prefix = repoRecordCollectionPrefix(did, collection);
  const ascending = opts.reverse === true;
  const selector: Deno.KvListSelector = opts.cursor === undefined
    ? { prefix }
    : ascending
    ? { prefix, start: [...prefix, opts.cursor + "\0"] }
    : { prefix, end: [...prefix, opts.cursor] };
  const rows: { rkey: string; cid: string }[] = [];
  const records: RecordView[] = [];
  const iter = kv.list<StoredRecord>(selector, { limit: opts.limit, reverse: !ascending });
  for await (const e of iter) {
    const rkey = e.key[3] as string;
    rows.push({ rkey, cid: e.value.cid });
    records.push({
      uri: formatAtUri(did, collection, rkey),
      cid: e.value.cid,
      value: toLexJson(decodeCbor(e.value.bytes)),
    });
  }
  const cursor = rows.length === opts.limit ? rows[rows.length - 1].rkey : undefined;
  return cursor === undefined ? { records } : { records, cursor };
}

/** Collections with at least one record (`describeRepo`). */
export async function listCollections(kv: Deno.Kv, did: string): Promise<string[]> {
  // Any collection may hold records (docs/behaviour.md 4.1 rule 14): one read per collection,
  // each starting past the last one's keys (`true` sorts after every string rkey).
  const prefix = repoRecordPrefix(did);
  const out: string[] = [];
  let start: Deno.KvKey | null = null;
  while (true) {
    const selector: Deno.KvListSelector = start === null ? { prefix } : { prefix, start };
    const [entry] = await Array.fromAsync(kv.list(selector, { limit: 1 }));
    if (entry === undefined) return out;
    const collection = entry.key[prefix.length] as string;
    out.push(collection);
    start = [...prefix, collection, true];
  }
}

/**
 * The repository as a CAR (`sync.getRepo`): root = the current commit; the commit, every MST
 * node and every record. With `since`, only the blocks written by commits after that rev.
 */
export function exportRepoCar(
  store: BlockStore,
  did: string,
  since?: string,
): Promise<Uint8Array> {
  return fromCurrentRoot(store.kv, did, (root) => exportFrom(store, did, root, since));
}

/**
 * Runs a read of the repository from its current root. A compaction (`compaction.ts`) removes
 * blocks only once a newer commit no longer reaches them: when the read fails and the root has
 * moved meanwhile, it is run again from the new root (at most 3 times in all).
 */
async function fromCurrentRoot<T>(
  kv: Deno.Kv,
  did: string,
  read: (root: RepoRoot) => Promise<T>,
): Promise<T> {
  for (let attempt = 1;; attempt++) {
    const root = await requireRepoRoot(kv, did);
    try {
      return await read(root);
    } catch (err) {
      if (attempt >= 3 || (await readRepoRoot(kv, did))?.commitCid === root.commitCid) throw err;
    }
  }
}

async function exportFrom(
  store: BlockStore,
  did: string,
  root: RepoRoot,
  since: string | undefined,
): Promise<Uint8Array> {
  // One ordered scan of the repository's commits, then a walk from the root: only reachable
  // blocks are exported.
  const stored = await store.source(did).all();
  const out: Block[] = [];
  const slicer = new TimeSlicer();
  for (const id of await reachableBlocks(did, root.commitCid, (id) => stored.get(id)?.bytes)) {
    if (slicer.due()) await slicer.next();
    const block = stored.get(id)!;
    if (since === undefined || block.rev > since) {
      out.push({ cid: parseCid(id), bytes: block.bytes });
    }
  }
  return writeCar([parseCid(root.commitCid)], out);
}

/**
 * The CID strings of the blocks the commit `commitCid` reaches, in walk order: the commit, then
 * each MST node followed by the records it names (a record shared by several keys once).
 * `get` returns a stored block's bytes; a block it lacks throws. Lets the event loop run between
 * slices of the walk (`time_slice.ts`).
 */
export async function reachableBlocks(
  did: string,
  commitCid: string,
  get: (id: string) => Uint8Array | undefined,
  pace?: Pace,
): Promise<Set<string>> {
  const need = (id: string, what: string): Uint8Array => {
    const bytes = get(id);
    if (bytes === undefined) throw new Error(`${what} ${id} of ${did} is missing`);
    return bytes;
  };
  const out = new Set<string>([commitCid]);
  const stack = [formatCid(decodeCommit(need(commitCid, "Commit block")).data)];
  const slicer = new TimeSlicer(pace);
  while (stack.length > 0) {
    if (slicer.due()) await slicer.next();
    const id = stack.pop()!;
    if (out.has(id)) continue;
    out.add(id);
    const node = decodeNode(need(id, "MST node"), parseCid(id));
    if (node.left) stack.push(formatCid(node.left as CID));
    for (const e of node.entries) {
      const record = formatCid(e.value);
      if (!out.has(record)) {
        need(record, "Record");
        out.add(record);
      }
      if (e.right) stack.push(formatCid(e.right as CID));
    }
  }
  return out;
}

/** The blocks named by `cids` as a CAR with no roots (`sync.getBlocks`). */
export async function getBlocksCar(
  store: BlockStore,
  did: string,
  cids: string[],
): Promise<Uint8Array> {
  await requireRepoRoot(store.kv, did);
  const wanted = [...new Set(cids.map((c) => formatCid(parseCid(c))))];
  const stored = await store.source(did).getStored(wanted);
  const missing = wanted.filter((c) => !stored.has(c));
  if (missing.length > 0) {
    throw new RepoError("BlockNotFound", `Could not find blocks: ${missing.join(", ")}`);
  }
  return writeCar([], wanted.map((c) => ({ cid: parseCid(c), bytes: stored.get(c)!.bytes })));
}

/**
 * A proof of a record's presence or absence (`sync.getRecord`): root = the current commit; the
 * commit, every MST node on the path to the key, and the record when it exists.
 */
export function getRecordProofCar(
  store: BlockStore,
  did: string,
  collection: string,
  rkey: string,
): Promise<Uint8Array> {
  return fromCurrentRoot(store.kv, did, (root) => proofFrom(store, did, root, collection, rkey));
}

async function proofFrom(
  store: BlockStore,
  did: string,
  root: RepoRoot,
  collection: string,
  rkey: string,
): Promise<Uint8Array> {
  const source = store.source(did);
  const tree = await Mst.load(source, parseCid(root.dataCid));
  const path = `${collection}/${rkey}`;
  const ids = (await tree.pathTo(path)).map(formatCid);
  const value = await tree.get(path);
  if (value) ids.push(formatCid(value));
  const stored = await source.getStored([root.commitCid, ...ids]);
  const blocks: Block[] = [];
  for (const id of [root.commitCid, ...ids]) {
    const block = stored.get(id);
    if (!block) throw new Error(`Block ${id} of ${did} is not stored`);
    blocks.push({ cid: parseCid(id), bytes: block.bytes });
  }
  return writeCar([parseCid(root.commitCid)], blocks);
}

/** One page of `sync.listRepos`, ordered by DID; the cursor is the last DID. */
export async function listRepos(
  kv: Deno.Kv,
  opts: { limit: number; cursor?: string },
): Promise<
  { repos: { did: string; head: string; rev: string; active: boolean }[]; cursor?: string }
> {
  const prefix = repoRootPrefix();
  const selector: Deno.KvListSelector = opts.cursor === undefined
    ? { prefix }
    : { prefix, start: [...prefix, opts.cursor + "\0"] };
  const repos = [];
  for await (const e of kv.list<RepoRoot>(selector, { limit: opts.limit })) {
    repos.push({
      did: e.key[1] as string,
      head: e.value.commitCid,
      rev: e.value.rev,
      active: true,
    });
  }
  const cursor = repos.length === opts.limit ? repos[repos.length - 1].did : undefined;
  return cursor === undefined ? { repos } : { repos, cursor };
}
