// Conformance: DAG-CBOR / lex JSON against the interop `data-model/` vectors (docs/protocol.md
// 9 and 16 item 1; spec part 6 for the records they carry).
import assert from "node:assert/strict";
import { decodeCbor, encodeCbor } from "../shared/cbor.ts";
import { cidForCbor, formatCid } from "../shared/cid.ts";
import { fromLexJsonObject, LexJsonError, toLexJson } from "../shared/lex_json.ts";

const repoRoot = new URL("../", import.meta.url);
// The vectors live beside the checkout: <repo>/../shared/testdata/atproto-interop/.
const vectorsDir = new URL("../shared/testdata/atproto-interop/", repoRoot);
const dataModelDir = new URL("data-model/", vectorsDir);

function dirExists(url: URL): boolean {
  try {
    return Deno.statSync(url).isDirectory;
  } catch {
    return false;
  }
}

const exists = dirExists(dataModelDir);
if (!exists) {
  console.log(`Skipping data-model conformance tests: ${dataModelDir.pathname} is absent`);
}

function readJson<T>(name: string): T {
  return JSON.parse(Deno.readTextFileSync(new URL(name, dataModelDir)));
}

function fromBase64(s: string): Uint8Array {
  const bin = atob(s.padEnd(s.length + ((4 - s.length % 4) % 4), "="));
  return Uint8Array.from(bin, (c) => c.charCodeAt(0));
}

interface Fixture {
  json: unknown;
  cbor_base64: string;
  cid: string;
}

interface Case {
  note: string;
  json: unknown;
}

Deno.test({
  name: "data-model fixtures encode to the exact CBOR bytes and CID",
  ignore: !exists,
  fn() {
    const fixtures = readJson<Fixture[]>("data-model-fixtures.json");
    assert.ok(fixtures.length >= 3);
    for (const [i, f] of fixtures.entries()) {
      const bytes = encodeCbor(fromLexJsonObject(f.json));
      assert.deepEqual(bytes, fromBase64(f.cbor_base64), `fixture ${i} bytes`);
      assert.equal(formatCid(cidForCbor(bytes)), f.cid, `fixture ${i} CID`);
    }
  },
});

Deno.test({
  name: "data-model fixture CBOR decodes strictly back to the same lex JSON",
  ignore: !exists,
  fn() {
    for (const [i, f] of readJson<Fixture[]>("data-model-fixtures.json").entries()) {
      const value = decodeCbor(fromBase64(f.cbor_base64));
      assert.deepEqual(toLexJson(value), f.json, `fixture ${i}`);
    }
  },
});

// Every invalid case is a data-model rule the codec layer checks in fromLexJson (none needs a
// lexicon): the expected rejection reason per note.
const INVALID_REASONS: Record<string, RegExp> = {
  "top-level not an object": /^Value is not an object: string$/,
  "float": /^Number at \$\.rcrd\.a is not a safe integer: 123\.456$/,
  "record with $type null": /^\$type at \$\.rcrd is not a non-empty string: null$/,
  "record with $type wrong type": /^\$type at \$\.rcrd is not a non-empty string: 123$/,
  "record with empty $type string": /^\$type at \$\.rcrd is not a non-empty string: ""$/,
  "blob with string size": /^Blob at \$\.blb has no integer size: "10000"$/,
  "blob with missing key": /^Blob at \$\.blb has no ref link$/,
  "bytes with wrong field type": /^\$bytes at \$\.lnk is not a string$/,
  "bytes with extra fields": /^Bytes object at \$\.lnk has keys other than \$bytes$/,
  "link with wrong field type": /^\$link at \$\.lnk is not a string$/,
  "link with bogus CID": /^\$link at \$\.lnk is not a CID: "\."$/,
  "link with extra fields": /^Link object at \$\.lnk has keys other than \$link$/,
};

Deno.test({
  name: "data-model invalid cases are rejected for the stated reason",
  ignore: !exists,
  fn() {
    const cases = readJson<Case[]>("data-model-invalid.json");
    assert.ok(cases.length > 0);
    for (const c of cases) {
      const reason = INVALID_REASONS[c.note];
      assert.ok(reason, `unclassified invalid case: ${c.note}`);
      assert.throws(() => encodeCbor(fromLexJsonObject(c.json)), (err: unknown) => {
        assert.ok(err instanceof LexJsonError, `${c.note}: got ${err}`);
        assert.match(err.message, reason, c.note);
        return true;
      });
    }
  },
});

Deno.test({
  name: "data-model valid cases encode and decode back unchanged",
  ignore: !exists,
  fn() {
    const cases = readJson<Case[]>("data-model-valid.json");
    assert.ok(cases.length > 0);
    for (const c of cases) {
      const bytes = encodeCbor(fromLexJsonObject(c.json));
      assert.deepEqual(toLexJson(decodeCbor(bytes)), c.json, c.note);
    }
  },
});
