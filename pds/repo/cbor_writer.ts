/**
 * Hand-written canonical DAG-CBOR encoders for the fixed shapes of the commit hot path: MST
 * nodes, commits and `#commit` event bodies (with their CAR). They write exactly the bytes
 * `encodeCbor` writes for the same values (map keys pre-sorted length-first, shortest-form
 * lengths, CIDs as tag 42 over `0x00 || cid bytes`), in one pass, without building the
 * intermediate objects or copies the generic encoder needs. `cbor_writer_test.ts` checks them
 * against `encodeCbor`.
 *
 * @module
 */

import type { CID } from "../../shared/cid.ts";

const utf8 = new TextEncoder();

/** Largest encoding that starts in the shared scratch buffer. */
const SCRATCH_BYTES = 64 * 1024;
/**
 * One buffer the writers of the hot path share, one writer at a time (encodes are synchronous):
 * a writer that takes it returns an exact-size copy from `finish`, so a commit allocates one
 * right-sized buffer per encoding instead of a zeroed oversized one, plus its growth. A writer
 * created while another holds it gets a buffer of its own (as does every writer after one that
 * threw before `finish`: slower, never wrong).
 */
let scratch: Uint8Array | null = null;
let scratchHeld = false;

/** A growable byte buffer with CBOR primitives. */
export class CborWriter {
  #buf: Uint8Array;
  #pos = 0;
  #holdsScratch = false;

  constructor(capacity = 256) {
    if (capacity <= SCRATCH_BYTES && !scratchHeld) {
      this.#buf = scratch ??= new Uint8Array(SCRATCH_BYTES);
      scratchHeld = this.#holdsScratch = true;
    } else {
      this.#buf = new Uint8Array(capacity);
    }
  }

  /** The bytes written so far (do not write to the writer afterwards). */
  finish(): Uint8Array {
    if (!this.#holdsScratch) return this.#buf.subarray(0, this.#pos);
    const out = this.#buf.slice(0, this.#pos);
    scratchHeld = this.#holdsScratch = false;
    // Exact size: a later write grows into a new buffer and leaves `out` as it is.
    this.#buf = out;
    return out;
  }

  #reserve(n: number): void {
    if (this.#pos + n <= this.#buf.length) return;
    let size = Math.max(this.#buf.length * 2, 256);
    while (size < this.#pos + n) size *= 2;
    const next = new Uint8Array(size);
    next.set(this.#buf.subarray(0, this.#pos));
    if (this.#holdsScratch) scratchHeld = this.#holdsScratch = false;
    this.#buf = next;
  }

  /** A major type with its argument in shortest form. */
  head(major: number, n: number): void {
    this.#reserve(9);
    const b = this.#buf;
    const m = major << 5;
    if (n < 24) {
      b[this.#pos++] = m | n;
    } else if (n < 0x100) {
      b[this.#pos++] = m | 24;
      b[this.#pos++] = n;
    } else if (n < 0x10000) {
      b[this.#pos++] = m | 25;
      b[this.#pos++] = n >> 8;
      b[this.#pos++] = n & 0xff;
    } else if (n < 0x100000000) {
      b[this.#pos++] = m | 26;
      b[this.#pos++] = n >>> 24;
      b[this.#pos++] = (n >> 16) & 0xff;
      b[this.#pos++] = (n >> 8) & 0xff;
      b[this.#pos++] = n & 0xff;
    } else {
      const hi = Math.floor(n / 0x100000000);
      const lo = n >>> 0;
      b[this.#pos++] = m | 27;
      for (let s = 24; s >= 0; s -= 8) b[this.#pos++] = (hi >>> s) & 0xff;
      for (let s = 24; s >= 0; s -= 8) b[this.#pos++] = (lo >>> s) & 0xff;
    }
  }

  /** A safe integer. */
  int(n: number): void {
    if (n >= 0) this.head(0, n);
    else this.head(1, -1 - n);
  }

  /** Raw bytes, no header. */
  raw(bytes: Uint8Array): void {
    this.#reserve(bytes.length);
    this.#buf.set(bytes, this.#pos);
    this.#pos += bytes.length;
  }

  /** An unsigned LEB128 varint (CAR framing), no CBOR header. */
  varint(n: number): void {
    this.#reserve(10);
    while (n >= 0x80) {
      this.#buf[this.#pos++] = (n % 0x80) | 0x80;
      n = Math.floor(n / 0x80);
    }
    this.#buf[this.#pos++] = n;
  }

  bytes(bytes: Uint8Array): void {
    this.head(2, bytes.length);
    this.raw(bytes);
  }

  /** The characters of ASCII string `s` from index `from` on, as a CBOR byte string. */
  asciiBytes(s: string, from = 0): void {
    const n = s.length - from;
    this.head(2, n);
    this.#reserve(n);
    for (let i = from; i < s.length; i++) this.#buf[this.#pos++] = s.charCodeAt(i);
  }

  text(s: string): void {
    // ASCII fast path (keys, DIDs, TIDs, CID-free paths).
    if (!isAscii(s)) {
      const bytes = utf8.encode(s);
      this.head(3, bytes.length);
      this.raw(bytes);
      return;
    }
    this.head(3, s.length);
    this.#reserve(s.length);
    for (let i = 0; i < s.length; i++) this.#buf[this.#pos++] = s.charCodeAt(i);
  }

  cid(cid: CID): void {
    const bytes = cid.bytes;
    this.#reserve(3);
    this.#buf[this.#pos++] = 0xd8; // tag(42)
    this.#buf[this.#pos++] = 42;
    this.head(2, bytes.length + 1);
    this.#reserve(1);
    this.#buf[this.#pos++] = 0;
    this.raw(bytes);
  }

  cidOrNull(cid: CID | null): void {
    if (cid === null) this.null();
    else this.cid(cid);
  }

  null(): void {
    this.#reserve(1);
    this.#buf[this.#pos++] = 0xf6;
  }

  bool(v: boolean): void {
    this.#reserve(1);
    this.#buf[this.#pos++] = v ? 0xf5 : 0xf4;
  }
}

/** One entry of an MST node to encode (full key; prefix compression is done here). */
export interface MstNodeEntry {
  readonly key: string;
  readonly value: CID;
  readonly right: CID | null;
}

/** `{e: [{k, p, t, v}], l}` of an MST node (docs/protocol.md 8). */
export function encodeMstNode(left: CID | null, entries: readonly MstNodeEntry[]): Uint8Array {
  const w = new CborWriter(64 + entries.length * 90);
  w.head(5, 2);
  w.text("e");
  w.head(4, entries.length);
  // Repository paths are ASCII (the MST key syntax), so the shared prefix and the suffix bytes
  // can be taken from the strings without encoding each key; other keys go through UTF-8.
  const ascii = entries.every((e) => isAscii(e.key));
  let prevText = "";
  let prev: Uint8Array = new Uint8Array(0);
  for (const e of entries) {
    let p = 0;
    if (ascii) {
      const key = e.key;
      const n = Math.min(prevText.length, key.length);
      while (p < n && prevText.charCodeAt(p) === key.charCodeAt(p)) p++;
      prevText = key;
      w.head(5, 4);
      w.text("k");
      w.asciiBytes(key, p);
    } else {
      const key = utf8.encode(e.key);
      const n = Math.min(prev.length, key.length);
      while (p < n && prev[p] === key[p]) p++;
      prev = key;
      w.head(5, 4);
      w.text("k");
      w.bytes(key.subarray(p));
    }
    w.text("p");
    w.int(p);
    w.text("t");
    w.cidOrNull(e.right);
    w.text("v");
    w.cid(e.value);
  }
  w.text("l");
  w.cidOrNull(left);
  return w.finish();
}

/** The fields of a v3 commit (docs/protocol.md 7). */
export interface CommitFields {
  did: string;
  data: CID;
  rev: string;
}

/** `{did, rev, [sig,] data, prev: null, version: 3}`: unsigned without `sig`. */
export function encodeCommit(c: CommitFields, sig?: Uint8Array): Uint8Array {
  const w = new CborWriter(160);
  w.head(5, sig ? 6 : 5);
  w.text("did");
  w.text(c.did);
  w.text("rev");
  w.text(c.rev);
  if (sig) {
    w.text("sig");
    w.bytes(sig);
  }
  w.text("data");
  w.cid(c.data);
  w.text("prev");
  w.null();
  w.text("version");
  w.int(3);
  return w.finish();
}

/** A block of a CAR file (the shape of `Block` in `mst.ts`, which imports this module). */
export interface CarBlock {
  cid: CID;
  bytes: Uint8Array;
}

/** A CAR v1 with one root, blocks in the given order (as `writeCar` writes it). */
export function writeCarOneRoot(w: CborWriter, root: CID, blocks: readonly CarBlock[]): void {
  // Header `{roots: [root], version: 1}`.
  const headerLen = 1 + 6 + 1 + cidLength(root) + 8 + 1;
  w.varint(headerLen);
  w.head(5, 2);
  w.text("roots");
  w.head(4, 1);
  w.cid(root);
  w.text("version");
  w.int(1);
  for (const b of blocks) {
    const cid = b.cid.bytes;
    w.varint(cid.length + b.bytes.length);
    w.raw(cid);
    w.raw(b.bytes);
  }
}

function isAscii(s: string): boolean {
  for (let i = 0; i < s.length; i++) if (s.charCodeAt(i) > 0x7f) return false;
  return true;
}

/** Length of a CID's tag-42 encoding. */
function cidLength(cid: CID): number {
  const n = cid.bytes.length + 1;
  return 2 + (n < 24 ? 1 : n < 0x100 ? 2 : 3) + n;
}

/** CAR byte length of {@link writeCarOneRoot}'s output. */
export function carLength(root: CID, blocks: readonly CarBlock[]): number {
  const headerLen = 1 + 6 + 1 + cidLength(root) + 8 + 1;
  let n = varintLength(headerLen) + headerLen;
  for (const b of blocks) {
    const len = b.cid.bytes.length + b.bytes.length;
    n += varintLength(len) + len;
  }
  return n;
}

function varintLength(n: number): number {
  let len = 1;
  while (n >= 0x80) {
    n = Math.floor(n / 0x80);
    len++;
  }
  return len;
}
