/**
 * Merkle Search Tree (docs/protocol.md 8): fanout 4, key depth = leading zero bits
 * of SHA-256(key) / 2, nodes `{e: [{k, p, t, v}], l}` with prefix compression, `l`/`t` written as
 * null when empty, empty intermediate nodes kept, empty nodes trimmed at the top and bottom.
 *
 * The tree is copy-on-write over content-addressed nodes: only the nodes on the path of a key
 * are loaded (through a {@link NodeSource}, with a process-wide cache of decoded nodes), and
 * {@link Mst.finalize} encodes only the nodes a change touched.
 *
 * @module
 */

import { decodeCbor } from "../../shared/cbor.ts";
import {
  asCid,
  type CID,
  cidForCbor,
  encodeBlock,
  formatCid,
  sha256Digest,
} from "../../shared/cid.ts";
import { encodeMstNode, type MstNodeEntry } from "./cbor_writer.ts";

/** A block: bytes and their CID. */
export interface Block {
  cid: CID;
  bytes: Uint8Array;
}

/** Where MST node blocks come from. */
export interface NodeSource {
  /** Returns the bytes of a block, or null when it is not stored. */
  getBlock(cid: CID): Promise<Uint8Array | null>;
}

/** Thrown when a stored node is missing or malformed, or a key is not a valid MST key. */
export class MstError extends Error {
  override readonly name = "MstError";
}

type Ref = CID | MemNode | null;

/** An in-memory node. `cid` is set when the node is unchanged from a stored block. */
interface MemNode {
  readonly left: Ref;
  readonly entries: readonly MemEntry[];
  readonly cid?: CID;
}

interface MemEntry {
  readonly key: string;
  readonly value: CID;
  readonly right: Ref;
}

const EMPTY_NODE: MemNode = { left: null, entries: [] };
const MAX_KEY_LENGTH = 1024;
const MST_KEY_RE = /^[a-zA-Z0-9_~\-:.]+\/[a-zA-Z0-9_~\-:.]+$/;
const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Decoded nodes by CID string; nodes are immutable, so any repository may share them. */
const NODE_CACHE_LIMIT = 200_000;
const nodeCache = new Map<string, MemNode>();

function cacheNode(key: string, node: MemNode): void {
  if (nodeCache.size >= NODE_CACHE_LIMIT) {
    // Drop the oldest tenth (Map iteration order is insertion order).
    let n = NODE_CACHE_LIMIT / 10;
    for (const k of nodeCache.keys()) {
      nodeCache.delete(k);
      if (--n === 0) break;
    }
  }
  nodeCache.set(key, node);
}

/** Whether the node with this CID is in the process-wide node cache (tests, diagnostics). */
export function isNodeCached(cid: CID): boolean {
  return nodeCache.has(formatCid(cid));
}

/** The depth (layer) of a key: leading zero bits of SHA-256(key) divided by 2, rounded down. */
export function keyHeight(key: string | Uint8Array): number {
  const hash = sha256Digest(typeof key === "string" ? encoder.encode(key) : key);
  let zeros = 0;
  for (const byte of hash) {
    if (byte === 0) {
      zeros += 8;
      continue;
    }
    zeros += Math.clz32(byte) - 24;
    break;
  }
  return Math.floor(zeros / 2);
}

/** Number of leading bytes two keys share. */
export function commonPrefixLength(a: Uint8Array, b: Uint8Array): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}

/** Whether `key` is a repository path the MST accepts: `<collection>/<rkey>`, at most 1024 bytes. */
export function isValidMstKey(key: string): boolean {
  return key.length <= MAX_KEY_LENGTH && MST_KEY_RE.test(key);
}

/** The CID of the empty tree `{e: [], l: null}`. */
export const EMPTY_TREE_CID: CID = encodeBlock({ e: [], l: null }).cid;
const EMPTY_TREE_KEY = formatCid(EMPTY_TREE_CID);
const EMPTY_STORED_NODE: MemNode = Object.freeze({
  left: null,
  entries: Object.freeze([]),
  cid: EMPTY_TREE_CID,
});

/** A copy-on-write MST rooted at a stored (or empty) tree. */
export class Mst {
  readonly #source: NodeSource;
  #root: Ref;
  #layer: number;
  /** Cache keys of the stored nodes that changes to this tree replaced (see {@link release}). */
  #replaced: string[] = [];
  /** Cache keys of the nodes the last {@link finalize} encoded (see {@link coveringProof}). */
  #written = new Set<string>();

  private constructor(source: NodeSource, root: Ref, layer: number) {
    this.#source = source;
    this.#root = root;
    this.#layer = layer;
  }

  /** An empty tree. */
  static empty(source: NodeSource): Mst {
    return new Mst(source, null, 0);
  }

  /** Opens the tree whose root node is `root`, loading only that node. */
  static async load(source: NodeSource, root: CID): Promise<Mst> {
    const tree = new Mst(source, null, 0);
    let node = await tree.#resolve(root);
    if (node.entries.length === 0 && node.left === null) {
      // The stored empty node: replaced by whatever change comes first.
      tree.#replaced.push(formatCid(root));
      return tree;
    }
    tree.#root = root;
    let depth = 0;
    while (node.entries.length === 0) {
      if (node.left === null) throw new MstError(`MST node ${formatCid(root)} is empty`);
      node = await tree.#resolve(node.left);
      depth++;
    }
    tree.#layer = keyHeight(node.entries[0].key) + depth;
    return tree;
  }

  /** Returns the value CID stored under `key`, or null. */
  async get(key: string): Promise<CID | null> {
    let ref = this.#root;
    while (ref !== null) {
      const node = await this.#resolve(ref);
      const i = lowerBound(node.entries, key);
      if (i < node.entries.length && node.entries[i].key === key) return node.entries[i].value;
      ref = i === 0 ? node.left : node.entries[i - 1].right;
    }
    return null;
  }

  /**
   * Returns the CIDs of every node visited looking up `key` from the root: a proof of presence
   * or absence. The tree must be unchanged since it was loaded (or finalized).
   */
  async pathTo(key: string): Promise<CID[]> {
    const out: CID[] = [];
    let ref = this.#root;
    if (ref === null) return [EMPTY_TREE_CID];
    while (ref !== null) {
      const node = await this.#resolve(ref);
      if (!node.cid) throw new MstError("MST has unsaved changes");
      out.push(node.cid);
      const i = lowerBound(node.entries, key);
      if (i < node.entries.length && node.entries[i].key === key) break;
      ref = i === 0 ? node.left : node.entries[i - 1].right;
    }
    return out;
  }

  /** Inserts or replaces `key`. */
  async set(key: string, value: CID): Promise<void> {
    if (!isValidMstKey(key)) throw new MstError(`Invalid MST key: ${JSON.stringify(key)}`);
    const height = keyHeight(key);
    if (this.#root === null) {
      this.#root = { left: null, entries: [{ key, value, right: null }] };
      this.#layer = height;
      return;
    }
    while (this.#layer < height) {
      this.#root = { left: this.#root, entries: [] };
      this.#layer++;
    }
    this.#root = await this.#insert(this.#root, this.#layer, key, height, value);
  }

  /** Removes `key`; returns whether it was present. */
  async delete(key: string): Promise<boolean> {
    if (this.#root === null) return false;
    const height = keyHeight(key);
    if (height > this.#layer) return false;
    const before = this.#root;
    const after = await this.#remove(this.#root, this.#layer, key, height);
    if (after === before) return false;
    this.#root = after;
    // Trim empty nodes at the top.
    while (this.#root !== null) {
      const node = await this.#resolve(this.#root);
      if (node.entries.length > 0) break;
      this.#noteReplaced(this.#root); // a stored empty node is unreachable from now on
      this.#root = node.left;
      this.#layer--;
    }
    if (this.#root === null) this.#layer = 0;
    return true;
  }

  /**
   * Encodes every changed node and returns the root CID with the new blocks (children before
   * parents). Afterwards the tree is clean and {@link pathTo} works.
   */
  finalize(): { root: CID; blocks: Block[] } {
    const blocks: Block[] = [];
    this.#written = new Set();
    if (this.#root === null) {
      const block = encodeBlock({ e: [], l: null });
      cacheNode(formatCid(block.cid), { left: null, entries: [], cid: block.cid });
      this.#written.add(EMPTY_TREE_KEY);
      return { root: EMPTY_TREE_CID, blocks: [block] };
    }
    const root = this.#save(this.#root, blocks);
    this.#root = root;
    return { root, blocks };
  }

  /**
   * The covering proof of `keys`, as the reference builds it (`getCoveringProof`): for each key,
   * the nodes on its path from the root (a proof of presence or absence) and, where the key is
   * present, the nodes down to its neighbours (the right spine of the subtree before it and the
   * left spine of the one after). With them a consumer proves every key against this tree and
   * undoes a change of those keys to get the previous tree (docs/protocol.md 8.4).
   *
   * Returns the blocks of the proof's nodes that the last {@link finalize} did not write (a
   * commit has those already); the tree must be unchanged since.
   */
  async coveringProof(keys: Iterable<string>): Promise<Block[]> {
    const root = this.#root;
    // No root: the empty tree, whose node finalize wrote.
    if (root === null) return [];
    if (!isCid(root)) throw new MstError("MST has unsaved changes");
    const seen = new Set<string>();
    const out: Block[] = [];
    const visit = async (cid: CID): Promise<MemNode> => {
      const key = formatCid(cid);
      const node = await this.#resolveStored(cid, key);
      if (!seen.has(key)) {
        seen.add(key);
        if (!this.#written.has(key)) out.push(await this.#storedBlock(cid, node));
      }
      return node;
    };
    const spine = async (ref: Ref, rightmost: boolean): Promise<void> => {
      while (ref !== null) {
        const node = await visit(ref as CID);
        const n = node.entries.length;
        ref = rightmost && n > 0 ? node.entries[n - 1].right : node.left;
      }
    };
    for (const key of keys) {
      let ref: Ref = root;
      while (ref !== null) {
        const node = await visit(ref as CID);
        const i = lowerBound(node.entries, key);
        if (i < node.entries.length && node.entries[i].key === key) {
          await spine(i === 0 ? node.left : node.entries[i - 1].right, true);
          await spine(node.entries[i].right, false);
          break;
        }
        ref = i === 0 ? node.left : node.entries[i - 1].right;
      }
    }
    return out;
  }

  /**
   * The block of a stored node. Re-encoding the decoded node gives its bytes without a read (the
   * encoding is canonical); should they not hash to its CID, the stored block is read.
   */
  async #storedBlock(cid: CID, node: MemNode): Promise<Block> {
    // A stored node's children are CIDs (decodeNode, #save).
    const bytes = encodeMstNode(node.left as CID | null, node.entries as MstNodeEntry[]);
    if (cidForCbor(bytes).equals(cid)) return { cid, bytes };
    const stored = await this.#source.getBlock(cid);
    if (stored === null) throw new MstError(`MST node ${formatCid(cid)} is missing`);
    return { cid, bytes: stored };
  }

  /**
   * Drops from the node cache the stored nodes that this tree's changes replaced, once the new
   * tree is committed: they belong to older trees only, which the write path never reads again,
   * so caching them would only grow the heap with every commit (and make each garbage
   * collection slower). A node another tree still shares is read again from its store.
   */
  release(): void {
    for (const key of this.#replaced) nodeCache.delete(key);
    this.#replaced = [];
  }

  /** How many stored nodes this tree's changes replaced (unreachable from it) so far. */
  get replacedNodes(): number {
    return this.#replaced.length;
  }

  /** Visits every entry in key order (loads the whole tree). */
  async *entries(): AsyncGenerator<{ key: string; value: CID }> {
    yield* this.#walk(this.#root);
  }

  async *#walk(ref: Ref): AsyncGenerator<{ key: string; value: CID }> {
    if (ref === null) return;
    const node = await this.#resolve(ref);
    yield* this.#walk(node.left);
    for (const e of node.entries) {
      yield { key: e.key, value: e.value };
      yield* this.#walk(e.right);
    }
  }

  async #insert(
    ref: Ref,
    layer: number,
    key: string,
    height: number,
    value: CID,
  ): Promise<MemNode> {
    const node = ref === null ? EMPTY_NODE : await this.#resolveReplaced(ref);
    const i = lowerBound(node.entries, key);
    if (height === layer) {
      const entries = node.entries.slice();
      if (i < entries.length && entries[i].key === key) {
        entries[i] = { key, value, right: entries[i].right };
        return { left: node.left, entries };
      }
      const [lo, hi] = await this.#split(i === 0 ? node.left : entries[i - 1].right, key);
      entries.splice(i, 0, { key, value, right: hi });
      return withChild({ left: node.left, entries }, i, lo);
    }
    const childRef = i === 0 ? node.left : node.entries[i - 1].right;
    const child = await this.#insert(childRef, layer - 1, key, height, value);
    return withChild(node, i, child);
  }

  /** Splits a subtree around `key` (absent from it) into the parts below and above it. */
  async #split(ref: Ref, key: string): Promise<[Ref, Ref]> {
    if (ref === null) return [null, null];
    const node = await this.#resolveReplaced(ref);
    const i = lowerBound(node.entries, key);
    const [lo, hi] = await this.#split(i === 0 ? node.left : node.entries[i - 1].right, key);
    const below = withChild({ left: node.left, entries: node.entries.slice(0, i) }, i, lo);
    const above: MemNode = { left: hi, entries: node.entries.slice(i) };
    return [prune(below), prune(above)];
  }

  async #remove(ref: Ref, layer: number, key: string, height: number): Promise<Ref> {
    if (ref === null) return null;
    const node = await this.#resolve(ref);
    const i = lowerBound(node.entries, key);
    if (height === layer) {
      if (i >= node.entries.length || node.entries[i].key !== key) return ref;
      this.#noteReplaced(ref);
      const before = i === 0 ? node.left : node.entries[i - 1].right;
      const merged = await this.#merge(before, node.entries[i].right);
      const entries = node.entries.slice();
      entries.splice(i, 1);
      return prune(withChild({ left: node.left, entries }, i, merged));
    }
    const childRef = i === 0 ? node.left : node.entries[i - 1].right;
    const child = await this.#remove(childRef, layer - 1, key, height);
    if (child === childRef) return ref;
    this.#noteReplaced(ref);
    return prune(withChild(node, i, child));
  }

  /** Joins two adjacent subtrees of the same layer (every key of `a` below every key of `b`). */
  async #merge(a: Ref, b: Ref): Promise<Ref> {
    if (a === null) return b;
    if (b === null) return a;
    const left = await this.#resolveReplaced(a);
    const right = await this.#resolveReplaced(b);
    const n = left.entries.length;
    const mid = await this.#merge(n === 0 ? left.left : left.entries[n - 1].right, right.left);
    const entries = left.entries.slice();
    if (n === 0) return { left: mid, entries: right.entries };
    entries[n - 1] = { key: entries[n - 1].key, value: entries[n - 1].value, right: mid };
    entries.push(...right.entries);
    return { left: left.left, entries };
  }

  #resolve(ref: CID | MemNode): Promise<MemNode> {
    return isCid(ref) ? this.#resolveStored(ref, formatCid(ref)) : Promise.resolve(ref);
  }

  /** A stored node by CID and its cache key. */
  async #resolveStored(cid: CID, key: string): Promise<MemNode> {
    const hit = nodeCache.get(key);
    if (hit) return hit;
    // The empty node (every new repository's first tree) is known without reading it: the
    // first write of a repository then reads no block, and builds no block index
    // (`block_store.ts`) that every later commit would grow.
    if (key === EMPTY_TREE_KEY) return EMPTY_STORED_NODE;
    const bytes = await this.#source.getBlock(cid);
    if (bytes === null) throw new MstError(`MST node ${key} is missing`);
    const node = decodeNode(bytes, cid);
    cacheNode(key, node);
    return node;
  }

  /** Resolves a node that the change in progress rewrites (its CID string is made once). */
  #resolveReplaced(ref: CID | MemNode): Promise<MemNode> {
    if (!isCid(ref)) {
      this.#noteReplaced(ref);
      return Promise.resolve(ref);
    }
    const key = formatCid(ref);
    this.#replaced.push(key);
    return this.#resolveStored(ref, key);
  }

  #noteReplaced(ref: CID | MemNode): void {
    if (isCid(ref)) this.#replaced.push(formatCid(ref));
    else if (ref.cid) this.#replaced.push(formatCid(ref.cid));
  }

  #save(ref: CID | MemNode, blocks: Block[]): CID {
    if (isCid(ref)) return ref;
    if (ref.cid) return ref.cid;
    const left = ref.left === null ? null : this.#save(ref.left, blocks);
    const entries = ref.entries.map((e) => ({
      key: e.key,
      value: e.value,
      right: e.right === null ? null : this.#save(e.right, blocks),
    }));
    const bytes = encodeMstNode(left, entries);
    const block = { cid: cidForCbor(bytes), bytes };
    blocks.push(block);
    const key = formatCid(block.cid);
    cacheNode(key, { left, entries, cid: block.cid });
    this.#written.add(key);
    return block.cid;
  }
}

/** Replaces the child pointer before entry `i` (`l` when `i` is 0). */
function withChild(node: MemNode, i: number, child: Ref): MemNode {
  if (i === 0) return { left: child, entries: node.entries };
  const entries = node.entries.slice();
  const e = entries[i - 1];
  entries[i - 1] = { key: e.key, value: e.value, right: child };
  return { left: node.left, entries };
}

/** An entry-less node without a subtree is no node at all (bottom trimming). */
function prune(node: MemNode): Ref {
  return node.entries.length === 0 && node.left === null ? null : node;
}

function lowerBound(entries: readonly MemEntry[], key: string): number {
  let lo = 0;
  let hi = entries.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (entries[mid].key < key) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

function isCid(ref: CID | MemNode): ref is CID {
  return !("entries" in ref);
}

/** Decodes and checks a stored node block (keys rebuilt from the prefix compression). */
export function decodeNode(bytes: Uint8Array, cid: CID): MemNode {
  const where = formatCid(cid);
  // Nodes are cached, and decoded CIDs are views of what they were read from: decode a copy of
  // the block, so that a cached node does not keep the whole commit pack it came from alive.
  const data = decodeCbor(bytes.slice()) as Record<string, unknown>;
  if (data === null || typeof data !== "object" || !Array.isArray(data.e)) {
    throw new MstError(`MST node ${where} is malformed`);
  }
  const left = data.l === null ? null : asCid(data.l);
  if (data.l !== null && left === null) throw new MstError(`MST node ${where} has a bad l`);
  let prev = new Uint8Array(0);
  let prevKey = "";
  const entries: MemEntry[] = data.e.map((raw: unknown) => {
    const e = raw as Record<string, unknown>;
    const value = asCid(e?.v);
    const right = e?.t === null ? null : asCid(e?.t);
    if (
      !(e?.k instanceof Uint8Array) || typeof e.p !== "number" || e.p > prev.length ||
      value === null || (e.t !== null && right === null)
    ) {
      throw new MstError(`MST node ${where} has a malformed entry`);
    }
    const keyBytes = new Uint8Array(e.p + e.k.length);
    keyBytes.set(prev.subarray(0, e.p));
    keyBytes.set(e.k, e.p);
    prev = keyBytes;
    const key = decoder.decode(keyBytes);
    if (key <= prevKey && prevKey !== "") throw new MstError(`MST node ${where} is not sorted`);
    prevKey = key;
    return { key, value, right };
  });
  return { left, entries, cid };
}
