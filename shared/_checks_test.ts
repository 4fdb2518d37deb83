import assert from "node:assert/strict";
import { isCidString } from "./_checks.ts";
import { cidForCbor, cidForRaw, formatCid, parseCid } from "./cid.ts";

const BASE32 = "abcdefghijklmnopqrstuvwxyz234567";

function parses(s: string): boolean {
  try {
    parseCid(s);
    return true;
  } catch {
    return false;
  }
}

Deno.test("isCidString agrees with the CID parser on every one-character change of sha-256 CIDs", () => {
  const cids = [
    "bafyreie5737gdxlw5i64vzichcalba3z2v5n6icifvx5xytvske7mr3hpm", // the empty MST node
    ...Array.from({ length: 8 }, (_, i) => formatCid(cidForCbor(new Uint8Array([i, 1, 2])))),
    ...Array.from({ length: 8 }, (_, i) => formatCid(cidForRaw(new Uint8Array([i, 9])))),
  ];
  let accepted = 0;
  let refused = 0;
  for (const cid of cids) {
    assert.equal(isCidString(cid), true, cid);
    for (let pos = 0; pos < cid.length; pos++) {
      for (const c of BASE32 + "A0189=_-é") {
        const changed = cid.slice(0, pos) + c + cid.slice(pos + 1);
        const expected = parses(changed);
        assert.equal(isCidString(changed), expected, `${changed} (position ${pos})`);
        if (expected) accepted++;
        else refused++;
      }
    }
  }
  // Both outcomes occur in bulk: digest digits are free, padding and header digits are not.
  assert.ok(accepted > 10_000, `accepted ${accepted}`);
  assert.ok(refused > 5_000, `refused ${refused}`);
});

Deno.test("isCidString refuses nonzero padding and a wrong length digit, and accepts other CIDs", () => {
  const cid = formatCid(cidForCbor(new Uint8Array([1])));
  // The last digit carries 3 digest bits and 2 padding bits, which must be zero.
  const last = BASE32.indexOf(cid[58]);
  assert.equal(isCidString(cid.slice(0, 58) + BASE32[last | 1]), false);
  // The 8th digit's top 2 bits are the end of the digest length (0x20): any other is refused.
  assert.equal(isCidString(cid.slice(0, 7) + "q" + cid.slice(8)), false);
  assert.equal(isCidString(cid.slice(0, 58)), false);
  assert.equal(isCidString(cid + "a"), false);
  assert.equal(isCidString(cid.toUpperCase()), false);
  assert.equal(isCidString(null), false);
  // Shapes outside the fast path still go through the parser.
  assert.equal(isCidString("QmdfTbBqBPQ7VNxZEYEj14VmRuZBkqFbiwReogJgS1zR1n"), true);
  assert.equal(isCidString("bafybeigdyrzt5sfp7udm7hu76uh7y26nf3efuylqabf3oclgtqy55fbzdi"), true);
  assert.equal(isCidString("bafyreie"), false);
});
