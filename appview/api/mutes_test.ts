/**
 * Mutes (spec 4.2 rule 11, issue 37): private to the member, kept by the index; a muted account
 * leaves the member's timeline and notifications only; unmuting brings both back; the list pages
 * newest first; bad bodies answer 400.
 */

import assert from "node:assert/strict";
import { COLLECTION_POST } from "../../shared/nsid.ts";
import { didOf, followOp, handleOp, likeOp, postOp, uriOf } from "../_fixtures.ts";
import {
  type Backend,
  endBackendTests,
  forEachBackend,
  openHarness,
  type QueryHarness,
} from "../_test_helpers.ts";

const ALICE = didOf("alice");
const CAROL = didOf("carol"); // muted by Alice
const DAVE = didOf("dave");
const A1 = uriOf(ALICE, COLLECTION_POST, "3kaaaaaaaaa22");
const C1 = uriOf(CAROL, COLLECTION_POST, "3kccccccccc22");
const CR = uriOf(CAROL, COLLECTION_POST, "3kcccccccce22");
const D1 = uriOf(DAVE, COLLECTION_POST, "3kddddddddd22");

async function seed(backend: Backend): Promise<QueryHarness> {
  const h = await openHarness(backend, { stepMs: 1000 });
  await h.apply(
    handleOp(ALICE, "alice.test"),
    handleOp(CAROL, "carol.test"),
    handleOp(DAVE, "dave.test"),
    followOp(ALICE, "3kfollow00022", CAROL),
    followOp(ALICE, "3kfollow00122", DAVE),
    followOp(CAROL, "3kfollow00222", ALICE),
    postOp(ALICE, "3kaaaaaaaaa22", "a post by alice"),
    postOp(CAROL, "3kccccccccc22", "a post by carol"),
    postOp(CAROL, "3kcccccccce22", "a reply post by carol", { parent: A1 }),
    postOp(DAVE, "3kddddddddd22", "a post by dave"),
    likeOp(CAROL, "3klike0000022", A1),
    likeOp(DAVE, "3klike0000122", A1),
  );
  return h;
}

const uris = (posts: { uri: string }[]) => posts.map((p) => p.uri);

async function views(h: QueryHarness) {
  const get = async (path: string) => {
    const res = await h.request(path);
    assert.equal(res.status, 200, path);
    return res.body;
  };
  const notes = await get(`/api/notifications?did=${ALICE}`);
  return {
    timeline: uris((await get(`/api/timeline/home?did=${ALICE}`)).posts),
    notifications: notes.notifications.map((n: { kind: string; author_did: string }) =>
      `${n.kind} ${n.author_did === CAROL ? "carol" : "dave"}`
    ).sort(),
    unread: (await get(`/api/notifications/count?did=${ALICE}`)).count,
    // Mutes leave every other view alone.
    profile: uris((await get(`/api/profile?did=${CAROL}&viewerDid=${ALICE}`)).posts),
    search: uris((await get(`/api/search?q=carol&viewerDid=${ALICE}`)).posts),
    thread: uris((await get(`/api/thread?uri=${A1}&viewerDid=${ALICE}`)).replies),
    followers: (await get(`/api/followers?did=${ALICE}&viewerDid=${ALICE}`)).profiles.length,
  };
}

const UNMUTED = {
  timeline: [D1, CR, C1],
  notifications: ["follow carol", "like carol", "like dave", "reply carol"],
  unread: 4,
  profile: [CR, C1],
  search: [CR, C1],
  thread: [CR],
  followers: 1,
};

function mute(h: QueryHarness, subject: string, did = ALICE) {
  return h.request("/api/mutes", { method: "POST", body: JSON.stringify({ did, subject }) });
}

forEachBackend(
  "a muted account leaves the member's timeline and notifications only, until unmuted",
  async (backend) => {
    await using h = await seed(backend);
    assert.deepEqual(await views(h), UNMUTED);
    const isMuted = async (subject: string, did = ALICE) =>
      (await h.request(`/api/mutes/${subject}?did=${did}`)).body;
    assert.deepEqual(await isMuted(CAROL), { muted: false });

    assert.deepEqual((await mute(h, CAROL)).body, { ok: true, muted: true });
    assert.deepEqual(await isMuted(CAROL), { muted: true });
    assert.deepEqual(await isMuted(DAVE), { muted: false });
    assert.deepEqual(await isMuted(ALICE, CAROL), { muted: false }, "a mute is one-sided");
    assert.deepEqual((await mute(h, CAROL)).body, { ok: true, muted: false });
    assert.deepEqual(await views(h), {
      ...UNMUTED,
      timeline: [D1],
      notifications: ["like dave"],
      unread: 1,
    });
    // Carol's own views are untouched: a mute is one-sided and private.
    assert.deepEqual(
      uris((await h.request(`/api/timeline/home?did=${CAROL}`)).body.posts),
      [A1],
    );

    const removed = await h.request(`/api/mutes/${CAROL}?did=${ALICE}`, { method: "DELETE" });
    assert.deepEqual(removed.body, { ok: true, removed: true });
    const again = await h.request(`/api/mutes/${CAROL}?did=${ALICE}`, { method: "DELETE" });
    assert.deepEqual(again.body, { ok: true, removed: false });
    assert.deepEqual(await isMuted(CAROL), { muted: false });
    assert.deepEqual(await views(h), UNMUTED);
  },
);

forEachBackend(
  "GET /api/mutes lists actor cards newest mute first, paged by cursor",
  async (backend) => {
    await using h = await seed(backend);
    await mute(h, CAROL);
    h.clock.tick(1000);
    await mute(h, DAVE);
    h.clock.tick(1000);
    await mute(h, didOf("erin")); // unknown to the index: a placeholder handle
    const first = await h.request(`/api/mutes?did=${ALICE}&limit=2`);
    assert.equal(first.status, 200);
    assert.deepEqual(first.body.profiles, [
      {
        did: didOf("erin"),
        handle: first.body.profiles[0].handle,
        display_name: null,
        avatar_cid: null,
      },
      { did: DAVE, handle: "dave.test", display_name: null, avatar_cid: null },
    ]);
    assert.match(first.body.profiles[0].handle, /^did:plc:erin/);
    const second = await h.request(`/api/mutes?did=${ALICE}&limit=2&cursor=${first.body.cursor}`);
    assert.deepEqual(second.body, {
      profiles: [{ did: CAROL, handle: "carol.test", display_name: null, avatar_cid: null }],
      cursor: null,
    });
    assert.deepEqual((await h.request(`/api/mutes?did=${DAVE}`)).body, {
      profiles: [],
      cursor: null,
    });
  },
);

forEachBackend(
  "mute requests with a bad body or subject answer 400 InvalidRequest naming it",
  async (backend) => {
    await using h = await seed(backend);
    const cases: [BodyInit, string][] = [
      ["not json", "Request body is not valid JSON"],
      ["[]", "Request body is not a JSON object"],
      [JSON.stringify({ subject: CAROL }), "Missing required parameter: did"],
      [JSON.stringify({ did: ALICE }), "Missing required parameter: subject"],
      [JSON.stringify({ did: ALICE, subject: 7 }), "Invalid subject: 7"],
      [JSON.stringify({ did: ALICE, subject: "carol.test" }), "Invalid subject: carol.test"],
      [JSON.stringify({ did: ALICE, subject: ALICE }), `Invalid subject: ${ALICE} is did`],
    ];
    for (const [body, message] of cases) {
      const res = await h.request("/api/mutes", { method: "POST", body });
      assert.equal(res.status, 400, message);
      assert.deepEqual(res.body, { error: "InvalidRequest", message });
    }
    const del = await h.request(`/api/mutes/carol.test?did=${ALICE}`, { method: "DELETE" });
    assert.deepEqual(del.body, { error: "InvalidRequest", message: "Invalid subject: carol.test" });
    assert.deepEqual((await h.request(`/api/mutes?did=${ALICE}`)).body.profiles, []);
  },
);

endBackendTests();
