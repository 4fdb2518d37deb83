// Conformance: syntax validators against the interop `syntax/*_valid.txt` / `*_invalid.txt`
// lists (docs/protocol.md 16 item 7; spec 4.1 rule 2 for TIDs).
import assert from "node:assert/strict";
import { isValidTid } from "../shared/tid.ts";
import {
  isValidAtUri,
  isValidDatetime,
  isValidDid,
  isValidHandle,
  isValidNsid,
  isValidRecordKey,
} from "../shared/syntax.ts";

// tests/ -> repo root (/work/main/) -> its sibling shared/ (/work/shared/testdata/...).
const repoRoot = new URL("../", import.meta.url);
const vectorsDir = new URL("../shared/testdata/atproto-interop/", repoRoot);
const syntaxDir = new URL("syntax/", vectorsDir);

function dirExists(url: URL): boolean {
  try {
    return Deno.statSync(url).isDirectory;
  } catch {
    return false;
  }
}

const exists = dirExists(syntaxDir);
if (!exists) {
  console.log(`Skipping syntax conformance tests: ${syntaxDir.pathname} is absent`);
}

/**
 * Reads one vector list. Lines starting with `#` and empty lines are comments; every other line
 * is a test value taken verbatim (leading or trailing spaces are part of the value).
 */
function readVectors(name: string): string[] {
  const text = Deno.readTextFileSync(new URL(name, syntaxDir));
  const lines = text.split("\n");
  if (lines.at(-1) === "") lines.pop();
  return lines.filter((line) => line !== "" && !line.startsWith("#"));
}

function checkList(
  validator: (s: string) => boolean,
  file: string,
  expected: boolean,
): void {
  const values = readVectors(file);
  assert.ok(values.length > 0, `${file} has no vectors`);
  const wrong = values.filter((v) => validator(v) !== expected);
  assert.deepEqual(
    wrong.map((v) => (v.length > 80 ? v.slice(0, 80) + `...(${v.length} chars)` : v)),
    [],
    `${file}: these values were not classified ${expected ? "valid" : "invalid"}`,
  );
}

const CASES: Array<[string, (s: string) => boolean, string[], string[]]> = [
  ["isValidTid", isValidTid, ["tid_syntax_valid.txt"], ["tid_syntax_invalid.txt"]],
  ["isValidDid", isValidDid, ["did_syntax_valid.txt"], ["did_syntax_invalid.txt"]],
  ["isValidHandle", isValidHandle, ["handle_syntax_valid.txt"], ["handle_syntax_invalid.txt"]],
  ["isValidNsid", isValidNsid, ["nsid_syntax_valid.txt"], ["nsid_syntax_invalid.txt"]],
  [
    "isValidRecordKey",
    isValidRecordKey,
    ["recordkey_syntax_valid.txt"],
    ["recordkey_syntax_invalid.txt"],
  ],
  ["isValidAtUri", isValidAtUri, ["aturi_syntax_valid.txt"], ["aturi_syntax_invalid.txt"]],
  [
    "isValidDatetime",
    isValidDatetime,
    ["datetime_syntax_valid.txt"],
    ["datetime_syntax_invalid.txt", "datetime_parse_invalid.txt"],
  ],
];

for (const [name, validator, validFiles, invalidFiles] of CASES) {
  Deno.test({
    name: `${name} accepts every value of ${validFiles.join(", ")}`,
    ignore: !exists,
    fn() {
      for (const file of validFiles) checkList(validator, file, true);
    },
  });
  Deno.test({
    name: `${name} rejects every value of ${invalidFiles.join(", ")}`,
    ignore: !exists,
    fn() {
      for (const file of invalidFiles) checkList(validator, file, false);
    },
  });
}

Deno.test({
  name: "interop syntax vectors keep their significant trailing whitespace",
  ignore: !exists,
  fn() {
    // Guards the reader: trimming lines would turn these invalid values into valid ones.
    assert.ok(readVectors("aturi_syntax_invalid.txt").includes("at://did:plc:asdf123 "));
    assert.ok(readVectors("handle_syntax_invalid.txt").includes("john.test "));
    assert.ok(readVectors("datetime_syntax_invalid.txt").includes(" 1985-04-12T23:20:50.123Z"));
  },
});

Deno.test({
  name: "isValidHandle and isValidDid classify the interop at-identifier lists by either form",
  ignore: !exists,
  fn() {
    const either = (s: string) => isValidDid(s) || isValidHandle(s);
    checkList(either, "atidentifier_syntax_valid.txt", true);
    checkList(either, "atidentifier_syntax_invalid.txt", false);
  },
});
