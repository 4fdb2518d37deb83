/**
 * Reading one key of a Merkle Search Tree (atproto repository, docs/protocol.md 8)
 * out of a set of blocks: what a consumer needs to check that a commit's op is what the signed
 * tree says. A node is `{l: link | null, e: [{p, k, v, t: link | null}]}` with keys
 * prefix-compressed and sorted; `l` holds the keys before the first entry, an entry's `t` those
 * between it and the next. Links are accepted as CID instances or strings (spec 6.2 rule 3).
 *
 * The lookup never guesses: a node it needs that is not among the blocks is a
 * {@link MstProofError}, so "absent" is only answered when the path to where the key would be is
 * complete.
 *
 * @module
 */

import { show } from "./_checks.ts";
import { decodeCbor } from "./cbor.ts";
import { asCid, type CID, formatCid } from "./cid.ts";

/** Deepest tree walked (a tree of fanout 4 this deep holds far more than 2^64 keys). */
export const MAX_MST_DEPTH = 64;

/** Blocks by CID string, as `readCar` gives them. */
export type BlockMap = ReadonlyMap<string, Uint8Array>;

/** Thrown when the blocks cannot prove the answer: a node is missing, malformed or too deep. */
export class MstProofError extends Error {
  /** Creates an error; the message names the node at fault. */
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "MstProofError";
  }
}

/**
 * The value (record CID) of `key` in the tree rooted at `root`, or null when the tree does not
 * hold the key. Every node on the key's path must be in `blocks`.
 *
 * @example
 * ```ts
 * const cid = lookupMstKey(blocks, commitData, "app.social.feed.post/3kaaaaaaaaaa2");
 * ```
 *
 * @throws {MstProofError} when a node on the path is missing or malformed
 */
export function lookupMstKey(blocks: BlockMap, root: CID, key: string): CID | null {
  let cid: CID | null = root;
  for (let depth = 0; depth < MAX_MST_DEPTH; depth++) {
    if (cid === null) return null;
    const where = formatCid(cid);
    const bytes = blocks.get(where);
    if (bytes === undefined) throw new MstProofError(`Blocks lack the tree node ${where}`);
    const node = decodeNode(bytes, where);
    let child = node.left;
    let next: CID | null | undefined;
    for (const entry of node.entries) {
      if (entry.key === key) return entry.value;
      if (entry.key > key) {
        next = child;
        break;
      }
      child = entry.right;
    }
    cid = next === undefined ? child : next;
  }
  throw new MstProofError(`Tree is deeper than ${MAX_MST_DEPTH} levels`);
}

interface Node {
  left: CID | null;
  entries: { key: string; value: CID; right: CID | null }[];
}

const UTF8 = new TextDecoder("utf-8", { fatal: true });

function decodeNode(bytes: Uint8Array, where: string): Node {
  let data: unknown;
  try {
    data = decodeCbor(bytes);
  } catch (e) {
    throw new MstProofError(`Tree node ${where} is not valid DAG-CBOR`, { cause: e });
  }
  const node = data as { l?: unknown; e?: unknown } | null;
  if (node === null || typeof node !== "object" || !Array.isArray(node.e)) {
    throw new MstProofError(`Tree node ${where} is malformed: ${show(data)}`);
  }
  const left = link(node.l, where);
  let prev = new Uint8Array(0);
  let prevKey: string | null = null;
  const entries = node.e.map((raw: unknown) => {
    const e = raw as { p?: unknown; k?: unknown; v?: unknown; t?: unknown } | null;
    const value = asCid(e?.v);
    if (
      e === null || typeof e !== "object" || !(e.k instanceof Uint8Array) ||
      typeof e.p !== "number" || !Number.isInteger(e.p) || e.p < 0 || e.p > prev.length ||
      value === null
    ) {
      throw new MstProofError(`Tree node ${where} has a malformed entry`);
    }
    const keyBytes = new Uint8Array(e.p + e.k.length);
    keyBytes.set(prev.subarray(0, e.p));
    keyBytes.set(e.k, e.p);
    prev = keyBytes;
    let key: string;
    try {
      key = UTF8.decode(keyBytes);
    } catch {
      throw new MstProofError(`Tree node ${where} has a key that is not UTF-8`);
    }
    if (prevKey !== null && key <= prevKey) {
      throw new MstProofError(`Tree node ${where} is not sorted`);
    }
    prevKey = key;
    return { key, value, right: link(e.t, where) };
  });
  return { left, entries };
}

function link(value: unknown, where: string): CID | null {
  if (value === null) return null;
  const cid = asCid(value);
  if (cid === null) throw new MstProofError(`Tree node ${where} has a bad link: ${show(value)}`);
  return cid;
}

/** One key of a tree and its value (record CID), as {@link walkMst} gives them. */
export interface MstEntry {
  readonly key: string;
  readonly value: CID;
}

/**
 * Every key of the tree rooted at `root`, in key order (a whole-repository export: the
 * `getRepo` CAR). Every node must be in `blocks`; the keys must be strictly increasing across the
 * whole tree (each node's entries are checked, and so is the order between nodes), so a tree
 * whose nodes were put together from different trees is refused rather than read twice.
 *
 * @example
 * ```ts
 * for (const { key, value } of walkMst(blocks, commit.data)) console.log(key, value);
 * ```
 *
 * @throws {MstProofError} when a node is missing, malformed, out of order, too deep, or the tree
 *   has more than `maxEntries` keys
 */
export function* walkMst(
  blocks: BlockMap,
  root: CID,
  opts: { maxEntries?: number } = {},
): Generator<MstEntry> {
  const maxEntries = opts.maxEntries ?? Infinity;
  let count = 0;
  let last: string | null = null;
  // An explicit stack of what is left to visit: a subtree (by its link), or an entry.
  type Item = { tree: CID; depth: number } | { entry: MstEntry };
  const stack: Item[] = [{ tree: root, depth: 0 }];
  while (stack.length > 0) {
    const item = stack.pop()!;
    if ("entry" in item) {
      const { entry } = item;
      if (last !== null && entry.key <= last) {
        throw new MstProofError(`Tree keys are out of order: ${entry.key} after ${last}`);
      }
      last = entry.key;
      if (++count > maxEntries) throw new MstProofError(`Tree has more than ${maxEntries} keys`);
      yield entry;
      continue;
    }
    if (item.depth >= MAX_MST_DEPTH) {
      throw new MstProofError(`Tree is deeper than ${MAX_MST_DEPTH} levels`);
    }
    const where = formatCid(item.tree);
    const bytes = blocks.get(where);
    if (bytes === undefined) throw new MstProofError(`Blocks lack the tree node ${where}`);
    const node = decodeNode(bytes, where);
    const depth = item.depth + 1;
    // Pushed in reverse, so the left subtree comes off first, then each entry and its right.
    for (let i = node.entries.length - 1; i >= 0; i--) {
      const e = node.entries[i];
      if (e.right !== null) stack.push({ tree: e.right, depth });
      stack.push({ entry: { key: e.key, value: e.value } });
    }
    if (node.left !== null) stack.push({ tree: node.left, depth });
  }
}
