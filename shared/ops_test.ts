import assert from "node:assert/strict";
import { writeCar } from "./car.ts";
import { encodeCbor } from "./cbor.ts";
import { cidForCbor, encodeBlock, formatCid } from "./cid.ts";
import { fromLexJson } from "./lex_json.ts";
import { COLLECTION_POST } from "./nsid.ts";
import {
  type IndexOp,
  OpsError,
  opsFromCommitEvent,
  opsFromJetstream,
  opsFromPush,
  type RecordOp,
} from "./ops.ts";
import { validateRecord } from "./records.ts";
import {
  assertOpsError,
  BLOB,
  COMMIT,
  commitBody,
  DID,
  expectedOps,
  jetstreamEvents,
  NOW,
  OTHER,
  pushPayload,
  recordBlocks,
} from "./_ops_fixture.ts";
Deno.test("the stream (binary and string links), Jetstream and push give equal ops (spec 6.2 rule 3)", () => {
  const binary = recordBlocks("binary");
  const strings = recordBlocks("string");
  const expected = expectedOps(binary);
  const fromStream = opsFromCommitEvent(commitBody(binary, "instance"));
  const fromStringStream = opsFromCommitEvent(commitBody(strings, "string"));
  const fromJetstream = jetstreamEvents(binary).flatMap((e) => opsFromJetstream(e));
  const fromPush = opsFromPush(pushPayload(binary));
  assert.deepEqual(fromStream, expected);
  assert.deepEqual(fromJetstream, expected);
  assert.deepEqual(fromPush[0], {
    kind: "handle",
    did: DID,
    handle: "alice.example.com",
    authoritative: true,
  });
  assert.deepEqual(fromPush.slice(1), expected);
  // String-form blocks hash differently; the records and paths are the same.
  assert.deepEqual(fromStringStream, expectedOps(strings));
  assert.deepEqual(fromStringStream.map((op) => op.record), fromStream.map((op) => op.record));
  for (let i = 0; i < strings.length; i++) {
    assert.equal(fromStringStream[i].cid, strings[i] && formatCid(cidForCbor(strings[i]!.bytes)));
  }
  assert.notEqual(fromStringStream[0].cid, fromStream[0].cid);
});

Deno.test("an unknown embed survives conversion and validation byte for byte (spec 2.2)", () => {
  const binary = recordBlocks("binary");
  const [op] = opsFromCommitEvent(commitBody(binary, "instance")) as RecordOp[];
  const checked = validateRecord(op.collection, op.record);
  assert.equal(checked.ok, true);
  assert.deepEqual(encodeCbor(fromLexJson(checked.ok ? checked.value : null)), binary[0]!.bytes);
  const [viaJetstream] = opsFromJetstream(jetstreamEvents(binary)[0]) as RecordOp[];
  assert.deepEqual(encodeCbor(fromLexJson(viaJetstream.record)), binary[0]!.bytes);
});

Deno.test("a repository's first commit (since null) also says the account exists", () => {
  const binary = recordBlocks("binary");
  const later = commitBody(binary, "instance");
  const first = { ...later, since: null };
  const ops = opsFromCommitEvent(first);
  assert.deepEqual(ops[0], { kind: "account", did: DID });
  assert.deepEqual(ops.slice(1), opsFromCommitEvent(later));
  assert.deepEqual(opsFromCommitEvent({ ...first, ops: [] }), [{ kind: "account", did: DID }]);
});

Deno.test("a Jetstream account event gives the account's status, and an account op while active", () => {
  const event = (active: boolean, status?: unknown) => ({
    did: DID,
    time_us: 1725516665333808,
    kind: "account",
    account: { active, did: DID, seq: 1, time: "2024-09-05T06:11:04.870Z", status },
  });
  assert.deepEqual(opsFromJetstream(event(true)), [
    { kind: "account", did: DID },
    { kind: "account_status", did: DID, active: true, status: null },
  ]);
  assert.deepEqual(opsFromJetstream(event(false, "takendown")), [
    { kind: "account_status", did: DID, active: false, status: "takendown" },
  ]);
  assert.deepEqual(opsFromJetstream(event(false)), [
    { kind: "account_status", did: DID, active: false, status: null },
  ]);
  assertOpsError(
    () => opsFromJetstream({ ...event(true), account: { active: "yes" } }),
    `Invalid account.active: "yes"`,
  );
  assertOpsError(() => opsFromJetstream(event(false, 7)), "Invalid account.status: 7");
});

Deno.test("opsFromCommitEvent reads no CAR for a delete-only commit and keeps every collection", () => {
  const body = {
    repo: DID,
    blocks: new Uint8Array(0),
    ops: [{ action: "delete", path: "com.example.thing/abc", cid: null }],
  };
  assert.deepEqual(opsFromCommitEvent(body), [{
    kind: "record",
    action: "delete",
    did: DID,
    collection: "com.example.thing",
    rkey: "abc",
    cid: null,
    record: null,
  }]);
});

Deno.test("opsFromCommitEvent throws OpsError on hostile blocks", () => {
  const binary = recordBlocks("binary");
  const first = binary[0]!;
  const body = (car: Uint8Array) => commitBody(binary, "instance", car);
  assertOpsError(() => opsFromCommitEvent(body(new Uint8Array([1, 2, 3, 4]))), /^Invalid blocks: /);
  const forged = writeCar([first.cid], [{ cid: first.cid, bytes: binary[1]!.bytes }]);
  assertOpsError(
    () => opsFromCommitEvent(body(forged)),
    /^Invalid blocks: .*does not match its CID/,
  );
  const missing = writeCar([first.cid], [binary[1]!, binary[2]!, binary[3]!]);
  assertOpsError(
    () => opsFromCommitEvent(body(missing)),
    `Commit blocks lack the record of ${COLLECTION_POST}/3kaaaaaaaaaa2: ${formatCid(first.cid)}`,
  );
  const junk = new Uint8Array([0xa1, 0x61, 0x61, 0xfb, 1, 2, 3, 4, 5, 6, 7, 8]);
  const junkCid = cidForCbor(junk);
  const junkOps = {
    repo: DID,
    blocks: writeCar([junkCid], [{ cid: junkCid, bytes: junk }]),
    ops: [{ action: "create", path: `${COLLECTION_POST}/abc`, cid: junkCid }],
  };
  assertOpsError(
    () => opsFromCommitEvent(junkOps),
    /^Record block bafyrei\w+ is not valid DAG-CBOR: /,
  );
  const list = encodeBlock([1, 2]);
  const listOps = {
    ...junkOps,
    blocks: writeCar([list.cid], [list]),
    ops: [{ action: "create", path: `${COLLECTION_POST}/abc`, cid: list.cid }],
  };
  assertOpsError(
    () => opsFromCommitEvent(listOps),
    `Record block ${formatCid(list.cid)} is not a map: an array of 2 items`,
  );
});

Deno.test("opsFromCommitEvent throws OpsError naming bad fields", () => {
  const good = commitBody(recordBlocks("binary"), "instance");
  const op = (o: Record<string, unknown>) => ({
    ...good,
    ops: [{ ...(good.ops as object[])[0], ...o }],
  });
  const cases: [unknown, string][] = [
    [{ ...good, repo: "alice" }, 'Invalid repo: "alice"'],
    [{ ...good, ops: {} }, "Invalid ops: an object without the expected members"],
    [{ ...good, ops: Array(201).fill({}) }, "Too many ops: 201 (max 200)"],
    [{ ...good, ops: [7] }, "Invalid ops[0]: 7"],
    [{ ...good, blocks: "car" }, 'Invalid blocks: "car"'],
    [op({ action: "upsert" }), 'Invalid ops[0].action: "upsert"'],
    [op({ path: COLLECTION_POST }), `Invalid ops[0].path: "${COLLECTION_POST}"`],
    [op({ path: `${COLLECTION_POST}/a/b` }), `Invalid ops[0].path: "${COLLECTION_POST}/a/b"`],
    [op({ path: `${COLLECTION_POST}/` }), `Invalid ops[0].path: "${COLLECTION_POST}/"`],
    [op({ path: 5 }), "Invalid ops[0].path: 5"],
    [op({ cid: "bafy-nope" }), 'Invalid ops[0].cid: "bafy-nope"'],
    [op({ cid: null }), "Invalid ops[0].cid: null"],
    [op({ cid: BLOB }), `Invalid ops[0].cid: "${BLOB}"`],
    [null, "Commit event is not a map: null"],
  ];
  for (const [body, message] of cases) {
    assertOpsError(() => opsFromCommitEvent(body as Record<string, unknown>), message);
  }
});

Deno.test("opsFromCommitEvent throws only OpsError on randomly corrupted CAR bytes", () => {
  const binary = recordBlocks("binary");
  const good = commitBody(binary, "instance");
  const car = good.blocks as Uint8Array;
  let seed = 7;
  const next = () => (seed = (seed * 1103515245 + 12345) & 0x7fffffff) >> 8;
  for (let i = 0; i < 300; i++) {
    const bytes = car.slice(0, i % 3 === 0 ? next() % car.length : car.length);
    for (let j = 0; j < 3; j++) bytes[next() % bytes.length] = next() & 0xff;
    try {
      opsFromCommitEvent({ ...good, blocks: bytes });
    } catch (e) {
      assert.ok(e instanceof OpsError, `threw ${e}`);
    }
  }
});

Deno.test("opsFromJetstream converts identity and account events (docs/behaviour.md 10.8)", () => {
  const identity = (handle: unknown) => ({
    did: DID,
    time_us: 1,
    kind: "identity",
    identity: { did: DID, handle, seq: 9, time: NOW },
  });
  assert.deepEqual(opsFromJetstream(identity("Alice.Example.COM")), [{
    kind: "handle",
    did: DID,
    handle: "alice.example.com",
  }]);
  assert.deepEqual(opsFromJetstream(identity(undefined)), [{
    kind: "handle",
    did: DID,
    handle: null,
  }]);
  assert.deepEqual(opsFromJetstream(identity("handle.invalid")), [{
    kind: "handle",
    did: DID,
    handle: null,
  }]);
  assert.deepEqual(
    opsFromJetstream({
      did: DID,
      time_us: 2,
      kind: "account",
      account: { active: false, did: DID },
    }),
    [{ kind: "account_status", did: DID, active: false, status: null }],
  );
  assertOpsError(() => opsFromJetstream(identity(42)), "Invalid identity.handle: 42");
  assertOpsError(
    () => opsFromJetstream({ ...identity("a.com"), identity: { did: OTHER } }),
    `Invalid identity.did: "${OTHER}"`,
  );
});

Deno.test("opsFromJetstream throws OpsError on malformed events", () => {
  const [create, , , , del] = jetstreamEvents(recordBlocks("binary")) as Record<
    string,
    Record<string, unknown>
  >[];
  const commit = (c: Record<string, unknown>) => ({
    ...create,
    commit: { ...create.commit, ...c },
  });
  const cases: [unknown, string][] = [
    ["{}", 'Jetstream event is not an object: "{}"'],
    [{ ...create, did: 1 }, "Invalid did: 1"],
    [{ ...create, kind: "sync" }, 'Unknown Jetstream event kind: "sync"'],
    [{ ...create, commit: null }, "Invalid commit: null"],
    [commit({ operation: "put" }), 'Invalid commit.operation: "put"'],
    [commit({ collection: "not a nsid" }), 'Invalid commit.collection: "not a nsid"'],
    [commit({ rkey: "a/b" }), 'Invalid commit.rkey: "a/b"'],
    [commit({ record: [] }), "Invalid commit.record: an array of 0 items"],
    [
      commit({ cid: { $link: BLOB } }),
      "Invalid commit.cid: an object without the expected members",
    ],
    [{ did: DID, kind: "identity" }, "Invalid identity: undefined"],
    [
      { ...del, commit: { ...del.commit, operation: undefined } },
      "Invalid commit.operation: undefined",
    ],
  ];
  for (const [event, message] of cases) assertOpsError(() => opsFromJetstream(event), message);
});

Deno.test("opsFromPush validates the payload and omits the HandleOp without a handle", () => {
  const payload = pushPayload(recordBlocks("binary"));
  const noHandle = opsFromPush({ ...payload, handle: null });
  assert.equal(noHandle.length, COMMIT.length);
  assert.ok(noHandle.every((op: IndexOp) => op.kind === "record"));
  const ops = payload.ops as Record<string, unknown>[];
  const cases: [unknown, string][] = [
    [[], "Push payload is not an object: an array of 0 items"],
    [{ ...payload, did: "did:bad" }, 'Invalid did: "did:bad"'],
    [{ ...payload, rev: "not-a-tid" }, 'Invalid rev: "not-a-tid"'],
    [{ ...payload, commit: 3 }, "Invalid commit: 3"],
    [{ ...payload, handle: ["a.com"] }, "Invalid handle: an array of 1 items"],
    [{ ...payload, ops: [{ ...ops[0], record: null }] }, "Invalid ops[0].record: null"],
    [{ ...payload, ops: [{ ...ops[0], cid: undefined }] }, "Invalid ops[0].cid: undefined"],
    [{ ...payload, ops: [{ ...ops[1], action: 1 }] }, "Invalid ops[0].action: 1"],
    [{ ...payload, ops: [{ ...ops[4], rkey: "" }] }, 'Invalid ops[0].rkey: ""'],
  ];
  for (const [body, message] of cases) assertOpsError(() => opsFromPush(body), message);
});
