// The sequencer under contention (spec 6.1 rules 1-2): two KV handles on one file, as two
// account-host processes sharing it, commit at the same time; every commit lands at a seq of its
// own and the seqs stay gapless.

import assert from "node:assert/strict";
import { CID, cidForCbor } from "../../shared/cid.ts";
import { makeTempDir } from "../../runtime/_test_helpers.ts";
import { readEventBodies } from "./event_log.ts";
import { type CommitRequest, decodeEvent, Sequencer } from "./sequencer.ts";

function request(repo: string, n: number): CommitRequest {
  const commit: CID = cidForCbor(new TextEncoder().encode(`${repo} ${n}`));
  return {
    fill: () => {},
    event: {
      rebase: false,
      tooBig: false,
      repo,
      commit,
      rev: `rev${String(n).padStart(6, "0")}`,
      since: null,
      blocks: new Uint8Array(0),
      ops: [],
      blobs: [],
      time: "2024-05-01T12:00:00.000Z",
    },
    mutations: 0,
    bytes: 0,
  };
}

Deno.test("two KV handles on one file committing at the same time: every commit lands, seqs gapless", async () => {
  await using dir = await makeTempDir();
  const path = `${dir.path}/pds.kv`;
  const kvs = [await Deno.openKv(path), await Deno.openKv(path)];
  try {
    const sequencers = kvs.map((kv) => new Sequencer(kv));
    const PER_HANDLE = 400;
    const IN_FLIGHT = 8;
    const committed = await Promise.all(sequencers.map(async (s, h) => {
      const seqs: number[] = [];
      let next = 0;
      await Promise.all(Array.from({ length: IN_FLIGHT }, async () => {
        while (next < PER_HANDLE) {
          const n = next++;
          const outcome = await s.commit(request(`did:plc:handle${h}`, n));
          assert.ok(outcome !== null, `commit ${n} of handle ${h} was refused`);
          seqs.push(outcome.seq);
        }
      }));
      return seqs;
    }));
    const all = committed.flat().sort((a, b) => a - b);
    assert.equal(all.length, 2 * PER_HANDLE);
    assert.deepEqual(all, Array.from({ length: 2 * PER_HANDLE }, (_, i) => i + 1));
    const stored = await readEventBodies(kvs[0], 0, 10_000);
    assert.deepEqual(stored.map((e) => e.seq), all);
    const perRepo = new Map<string, number>();
    for (const e of stored) {
      const event = decodeEvent(e.body);
      assert.equal(event.seq, e.seq);
      perRepo.set(event.repo, (perRepo.get(event.repo) ?? 0) + 1);
    }
    assert.deepEqual(
      perRepo,
      new Map([["did:plc:handle0", PER_HANDLE], ["did:plc:handle1", PER_HANDLE]]),
    );
  } finally {
    for (const kv of kvs) kv.close();
  }
});
