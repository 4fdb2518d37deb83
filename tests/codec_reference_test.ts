// Cross-check of the shared codecs against the reference implementation (`@atproto/repo`):
// CIDs of records and CAR files must be byte-compatible both ways (docs/protocol.md 9, 10).
import assert from "node:assert/strict";
import {
  BlockMap,
  blocksToCarFile,
  cborToLex,
  cidForRecord,
  readCar as refReadCar,
} from "@atproto/repo";
import { decodeCbor, encodeCbor } from "../shared/cbor.ts";
import { asCid, encodeBlock, formatCid } from "../shared/cid.ts";
import { readCar, writeCar } from "../shared/car.ts";
import { fromLexJson } from "../shared/lex_json.ts";

const RECORD_JSON = {
  $type: "app.social.feed.post",
  text: "hello 👋 world",
  createdAt: "2024-01-01T00:00:00.000Z",
  langs: ["en", "fr"],
  reply: null,
  count: -42,
  embed: {
    $type: "app.social.embed.images",
    images: [{
      alt: "",
      image: {
        $type: "blob",
        ref: { $link: "bafkreiccldh766hwcnuxnf2wh6jgzepf2nlu2lvcllt63eww5p6chi4ity" },
        mimeType: "image/jpeg",
        size: 10000,
      },
    }],
  },
  raw: { $bytes: "nFERjvLLiw9qm45JrqH9QTzyC2Lu1Xb4ne6+sBrCzI0" },
};

function refValue(): Parameters<typeof cidForRecord>[0] {
  // The reference takes its own CID class; give it the value decoded by itself.
  return cborToLex(encodeCbor(fromLexJson(RECORD_JSON)));
}

Deno.test("encodeBlock gives the same CID as the reference cidForRecord", async () => {
  const ours = encodeBlock(fromLexJson(RECORD_JSON));
  const theirs = await cidForRecord(refValue());
  assert.equal(formatCid(ours.cid), theirs.toString());
});

Deno.test("the reference CAR reader accepts and verifies a CAR from writeCar", async () => {
  const record = encodeBlock(fromLexJson(RECORD_JSON));
  const node = encodeBlock({ e: [], l: record.cid });
  const { roots, blocks } = await refReadCar(writeCar([node.cid], [node, record]));
  assert.deepEqual(roots.map(String), [formatCid(node.cid)]);
  assert.equal(blocks.size, 2);
});

Deno.test("readCar accepts a CAR from the reference writer", async () => {
  const map = new BlockMap();
  const recordCid = await map.add(refValue());
  const rootCid = await map.add({ e: [], l: recordCid });
  const car = await blocksToCarFile(rootCid, map);
  const { roots, blocks } = readCar(car);
  assert.deepEqual(roots.map(formatCid), [rootCid.toString()]);
  const recordBytes = blocks.get(recordCid.toString());
  assert.ok(recordBytes);
  const decoded = decodeCbor(recordBytes) as Record<string, unknown>;
  assert.equal(decoded.text, RECORD_JSON.text);
  assert.ok(
    asCid((decoded.embed as { images: { image: { ref: unknown } }[] }).images[0].image.ref),
  );
});
