/**
 * Test fixture for `ops_test.ts`: one logical commit (a post with an unknown embed holding a
 * blob ref, a like, a follow, a profile with avatar, a delete) built in every source form.
 *
 * @module
 */

import assert from "node:assert/strict";
import { writeCar } from "./car.ts";
import { type CID, cidForCbor, cidForRaw, encodeBlock, formatCid } from "./cid.ts";
import { decodeFrame, encodeFrame } from "./frame.ts";
import { fromLexJson } from "./lex_json.ts";
import {
  COLLECTION_FOLLOW,
  COLLECTION_LIKE,
  COLLECTION_POST,
  COLLECTION_PROFILE,
  PROFILE_RKEY,
} from "./nsid.ts";
import { OpsError, type RecordOp } from "./ops.ts";

/** The repository owner. */
export const DID = "did:plc:abcdefghijklmnopqrstuvwx";
/** Another account: the follow and like subjects. */
export const OTHER = "did:plc:zyxwvutsrqponmlkjihgfedc";
/** Revision of the commit. */
export const REV = "3l3qo2vutsw2b";
/** `createdAt` of every record. */
export const NOW = "2024-05-01T12:00:00.000Z";
/** CID string of the blob referenced by the post embed and the avatar. */
export const BLOB = formatCid(cidForRaw(new TextEncoder().encode("a picture")));
const SUBJECT = {
  uri: `at://${OTHER}/${COLLECTION_POST}/3jzfcijpj2z2a`,
  cid: formatCid(cidForRaw(new Uint8Array(1))),
};
const blob = (mimeType: string) => ({ $type: "blob", ref: { $link: BLOB }, mimeType, size: 9 });

/** One logical commit in lex JSON form: [action, collection, rkey, record or null]. */
export const COMMIT: [RecordOp["action"], string, string, Record<string, unknown> | null][] = [
  ["create", COLLECTION_POST, "3kaaaaaaaaaa2", {
    $type: COLLECTION_POST,
    text: "Poll time 👩‍👩‍👧‍👦",
    langs: ["en"],
    reply: { root: SUBJECT, parent: SUBJECT },
    embed: {
      $type: "com.example.embed.poll",
      options: [{ label: "yes", votes: 3 }, { label: "no", votes: 0 }],
      nested: { media: { image: blob("image/png") }, list: [1, "two", null, true] },
    },
    createdAt: NOW,
  }],
  ["create", COLLECTION_LIKE, "3kaaaaaaaaab2", {
    $type: COLLECTION_LIKE,
    subject: SUBJECT,
    createdAt: NOW,
  }],
  ["create", COLLECTION_FOLLOW, "3kaaaaaaaaac2", {
    $type: COLLECTION_FOLLOW,
    subject: OTHER,
    createdAt: NOW,
  }],
  ["update", COLLECTION_PROFILE, PROFILE_RKEY, {
    $type: COLLECTION_PROFILE,
    displayName: "Alice",
    avatar: blob("image/jpeg"),
  }],
  ["delete", COLLECTION_POST, "3kaaaaaaaaad2", null],
];

/** A block as `encodeBlock` returns it. */
export type Block = { cid: CID; bytes: Uint8Array };

/** Blocks of the commit's records: links binary (tag 42) or kept as `{$link}` maps. */
export function recordBlocks(form: "binary" | "string"): (Block | null)[] {
  return COMMIT.map(([, , , record]) => {
    if (record === null) return null;
    return encodeBlock(form === "binary" ? fromLexJson(record) : record);
  });
}

/** The RecordOps every source must give, with the record CIDs of `blocks`. */
export function expectedOps(blocks: (Block | null)[]): RecordOp[] {
  return COMMIT.map(([action, collection, rkey, record], i) => ({
    kind: "record",
    action,
    did: DID,
    collection,
    rkey,
    cid: blocks[i] ? formatCid(blocks[i]!.cid) : null,
    record,
  }));
}

/** A `#commit` body as the account host sends it, through a real frame encode/decode. */
export function commitBody(
  blocks: (Block | null)[],
  cidForm: "instance" | "string",
  car?: Uint8Array,
) {
  const commit = encodeBlock({
    did: DID,
    version: 3,
    data: cidForRaw(new Uint8Array(2)),
    rev: REV,
    prev: null,
    sig: new Uint8Array(64),
  });
  const present = blocks.filter((b): b is Block => b !== null);
  const body = {
    seq: 1,
    rebase: false,
    tooBig: false,
    repo: DID,
    commit: commit.cid,
    rev: REV,
    since: "3jzfcijpj2z2a",
    blocks: car ?? writeCar([commit.cid], [commit, ...present]),
    ops: COMMIT.map(([action, collection, rkey], i) => ({
      action,
      path: `${collection}/${rkey}`,
      cid: blocks[i] === null
        ? null
        : cidForm === "instance"
        ? blocks[i]!.cid
        : formatCid(blocks[i]!.cid),
    })),
    blobs: [],
    time: NOW,
  };
  return decodeFrame(encodeFrame({ op: 1, t: "#commit" }, body)).body;
}

/** The commit as Jetstream JSON events, one per op, parsed from their JSON text. */
export function jetstreamEvents(blocks: (Block | null)[]): unknown[] {
  return COMMIT.map(([operation, collection, rkey, record], i) => {
    const commit = record === null
      ? { rev: REV, operation, collection, rkey }
      : { rev: REV, operation, collection, rkey, record, cid: formatCid(blocks[i]!.cid) };
    return JSON.parse(
      JSON.stringify({ did: DID, time_us: 1725911162329308 + i, kind: "commit", commit }),
    );
  });
}

/** The commit as an `/internal/ingest-commit` body, parsed from its JSON text. */
export function pushPayload(blocks: (Block | null)[]): Record<string, unknown> {
  const ops = COMMIT.map(([action, collection, rkey, record], i) => ({
    action,
    collection,
    rkey,
    cid: blocks[i] ? formatCid(blocks[i]!.cid) : null,
    record,
  }));
  const commit = formatCid(cidForCbor(new Uint8Array([1])));
  return JSON.parse(
    JSON.stringify({ did: DID, handle: "Alice.Example.COM", rev: REV, commit, ops }),
  );
}

/** Asserts that `convert` throws an `OpsError` with exactly `message` (or matching it). */
export function assertOpsError(convert: () => unknown, message: string | RegExp) {
  assert.throws(convert, (e: unknown) => {
    assert.ok(e instanceof OpsError, `not an OpsError: ${e}`);
    assert.equal(e.name, "OpsError");
    if (typeof message === "string") assert.equal(e.message, message);
    else assert.match(e.message, message);
    return true;
  });
}
