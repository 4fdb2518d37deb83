import assert from "node:assert/strict";
import { encodeCbor } from "./cbor.ts";
import { encodeBlock } from "./cid.ts";
import { importVerifyKey } from "./jwt.ts";
import { deriveP256KeyPair, signCompact } from "./keys.ts";
import { CommitError, parseSignedCommit, verifyCommitSignature } from "./signed_commit.ts";

const data = encodeBlock({ l: null, e: [] }).cid;
const key = deriveP256KeyPair("mst lookup test", "commit");
const unsigned = {
  did: "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa",
  version: 3,
  data,
  rev: "3kaaaaaaaaaa2",
  prev: null,
};

Deno.test("a signed commit verifies against its key, and not once a member changes", async () => {
  const verifyKey = await importVerifyKey(key.publicKey);
  const sig = signCompact(key.privateKey, encodeCbor(unsigned));
  const commit = parseSignedCommit(encodeCbor({ ...unsigned, sig }));
  assert.equal(await verifyCommitSignature(commit, verifyKey), true);
  const moved = parseSignedCommit(encodeCbor({ ...unsigned, rev: "3kaaaaaaaaab2", sig }));
  assert.equal(await verifyCommitSignature(moved, verifyKey), false);
  // The same signature with high S (n - s) is refused.
  const n = BigInt("0xffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551");
  const s = BigInt("0x" + [...sig.slice(32)].map((b) => b.toString(16).padStart(2, "0")).join(""));
  const high = Uint8Array.from(
    (n - s).toString(16).padStart(64, "0").match(/../g)!,
    (h) => parseInt(h, 16),
  );
  const highSig = new Uint8Array([...sig.slice(0, 32), ...high]);
  const highCommit = parseSignedCommit(encodeCbor({ ...unsigned, sig: highSig }));
  assert.equal(await verifyCommitSignature(highCommit, verifyKey), false);
});

Deno.test("parseSignedCommit refuses blocks that are not v3 commits", () => {
  const sig = new Uint8Array(64);
  assert.throws(
    () => parseSignedCommit(encodeCbor({ ...unsigned, version: 2, sig })),
    new CommitError("Commit version is not 3: 2"),
  );
  assert.throws(
    () => parseSignedCommit(encodeCbor({ ...unsigned, sig: sig.slice(1) })),
    new CommitError("Commit sig is not 64 bytes: 63 bytes"),
  );
  assert.throws(
    () => parseSignedCommit(encodeCbor({ ...unsigned, did: "nope", sig })),
    new CommitError('Commit has an invalid did: "nope"'),
  );
});
