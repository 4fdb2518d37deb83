/**
 * `GET /api/viewer`: the viewer's like, repost and follow record URIs for the posts and accounts
 * asked about, built through the write path; invalid parameters answer 400 naming them.
 */

import assert from "node:assert/strict";
import {
  COLLECTION_BLOCK,
  COLLECTION_FOLLOW,
  COLLECTION_LIKE,
  COLLECTION_POST,
  COLLECTION_REPOST,
} from "../../shared/nsid.ts";
import { LoginRequiredError, MemorySessionStore, SocialClient } from "../../shared/client.ts";
import {
  blockOp,
  deleteOp,
  didOf,
  followOp,
  likeOp,
  postOp,
  repostOp,
  uriOf,
} from "../_fixtures.ts";
import {
  type Backend,
  endBackendTests,
  forEachBackend,
  openHarness,
  type QueryHarness,
} from "../_test_helpers.ts";
import { MAX_VIEWER_ENTRIES } from "./viewer.ts";

const VIEWER = didOf("viewer");
const ALICE = didOf("alice");
const BOB = didOf("bob");
const P1 = uriOf(ALICE, COLLECTION_POST, "3kaaaaaaaaa22");
const P2 = uriOf(BOB, COLLECTION_POST, "3kbbbbbbbbb22");
const LIKE = uriOf(VIEWER, COLLECTION_LIKE, "3klike0000022");
const REPOST = uriOf(VIEWER, COLLECTION_REPOST, "3krepost00022");
const FOLLOW = uriOf(VIEWER, COLLECTION_FOLLOW, "3kfollow00022");
const EMPTY = { likes: {}, reposts: {}, follows: {}, blocks: {} };

/**
 * Alice posts P1, Bob P2. The viewer likes P1, reposts P2 and follows Alice; Bob likes P2,
 * reposts P1 and follows Alice too (someone else's records must not count).
 */
async function seed(backend: Backend): Promise<QueryHarness> {
  const h = await openHarness(backend, { stepMs: 1000 });
  await h.apply(
    postOp(ALICE, "3kaaaaaaaaa22", "first"),
    postOp(BOB, "3kbbbbbbbbb22", "second"),
    likeOp(VIEWER, "3klike0000022", P1),
    repostOp(VIEWER, "3krepost00022", P2),
    followOp(VIEWER, "3kfollow00022", ALICE),
    likeOp(BOB, "3kboblike0022", P2),
    repostOp(BOB, "3kbobrepost22", P1),
    followOp(BOB, "3kbobfollow22", ALICE),
  );
  return h;
}

function viewerPath(did: string, opts: { uris?: string[]; actors?: string[] } = {}): string {
  const q = new URLSearchParams({ did });
  if (opts.uris !== undefined) q.set("uris", opts.uris.join(","));
  if (opts.actors !== undefined) q.set("actors", opts.actors.join(","));
  return `/api/viewer?${q}`;
}

forEachBackend(
  "viewer answers the like, repost and follow record URIs it holds",
  async (backend) => {
    await using h = await seed(backend);
    const { status, body } = await h.request(viewerPath(VIEWER, {
      uris: [P1, P2],
      actors: [ALICE, BOB],
    }));
    assert.equal(status, 200);
    assert.deepEqual(Object.keys(body), ["likes", "reposts", "follows", "blocks"]);
    assert.deepEqual(body, {
      likes: { [P1]: LIKE },
      reposts: { [P2]: REPOST },
      follows: { [ALICE]: FOLLOW },
      blocks: {},
    });
  },
);

forEachBackend("viewer drops a like once the unlike is applied", async (backend) => {
  await using h = await seed(backend);
  await h.apply(deleteOp(VIEWER, COLLECTION_LIKE, "3klike0000022"));
  const { status, body } = await h.request(viewerPath(VIEWER, {
    uris: [P1, P2],
    actors: [ALICE, BOB],
  }));
  assert.equal(status, 200);
  assert.deepEqual(body, {
    likes: {},
    reposts: { [P2]: REPOST },
    follows: { [ALICE]: FOLLOW },
    blocks: {},
  });
});

forEachBackend("viewer drops a follow and a repost once they are deleted", async (backend) => {
  await using h = await seed(backend);
  await h.apply(
    deleteOp(VIEWER, COLLECTION_FOLLOW, "3kfollow00022"),
    deleteOp(VIEWER, COLLECTION_REPOST, "3krepost00022"),
  );
  const { body } = await h.request(viewerPath(VIEWER, { uris: [P1, P2], actors: [ALICE] }));
  assert.deepEqual(body, { likes: { [P1]: LIKE }, reposts: {}, follows: {}, blocks: {} });
});

forEachBackend("viewer leaves unknown posts and accounts out", async (backend) => {
  await using h = await seed(backend);
  const unknownPost = uriOf(ALICE, COLLECTION_POST, "3kzzzzzzzzz22");
  const { status, body } = await h.request(viewerPath(VIEWER, {
    uris: [unknownPost, P1],
    actors: [didOf("nobody"), ALICE],
  }));
  assert.equal(status, 200);
  assert.deepEqual(body, {
    likes: { [P1]: LIKE },
    reposts: {},
    follows: { [ALICE]: FOLLOW },
    blocks: {},
  });
});

forEachBackend(
  "viewer answers empty maps for a viewer the index has never seen",
  async (backend) => {
    await using h = await seed(backend);
    const { status, body } = await h.request(viewerPath(didOf("stranger"), {
      uris: [P1, P2],
      actors: [ALICE, BOB],
    }));
    assert.equal(status, 200);
    assert.deepEqual(body, EMPTY);
  },
);

forEachBackend(
  "viewer answers empty maps when no uris or actors are asked about",
  async (backend) => {
    await using h = await seed(backend);
    for (const path of [viewerPath(VIEWER), `/api/viewer?did=${VIEWER}&uris=&actors=`]) {
      const { status, body } = await h.request(path);
      assert.equal(status, 200, path);
      assert.deepEqual(body, EMPTY, path);
    }
  },
);

forEachBackend(
  "viewer names the viewer's newest block record of an account, and drops it when deleted",
  async (backend) => {
    await using h = await seed(backend);
    const BLOCK = uriOf(VIEWER, COLLECTION_BLOCK, "3kblock000032");
    await h.apply(
      blockOp(VIEWER, "3kblock000022", BOB),
      blockOp(VIEWER, "3kblock000032", BOB),
      blockOp(BOB, "3kbobblock022", VIEWER),
    );
    const path = viewerPath(VIEWER, { actors: [ALICE, BOB] });
    assert.deepEqual((await h.request(path)).body.blocks, { [BOB]: BLOCK });
    // Bob's block of the viewer is Bob's record, not the viewer's.
    const bobs = await h.request(viewerPath(BOB, { actors: [VIEWER] }));
    assert.deepEqual(bobs.body.blocks, { [VIEWER]: uriOf(BOB, COLLECTION_BLOCK, "3kbobblock022") });
    await h.apply(
      deleteOp(VIEWER, COLLECTION_BLOCK, "3kblock000032"),
      deleteOp(VIEWER, COLLECTION_BLOCK, "3kblock000022"),
    );
    assert.deepEqual((await h.request(path)).body.blocks, {});
  },
);

forEachBackend("viewer names a follow row without a record key with null", async (backend) => {
  await using h = await seed(backend);
  // Rows from before follows stored their rkey; the write path no longer makes them.
  await h.rows("UPDATE follows SET rkey = NULL");
  const { body } = await h.request(viewerPath(VIEWER, { actors: [ALICE] }));
  assert.deepEqual(body, { likes: {}, reposts: {}, follows: { [ALICE]: null }, blocks: {} });
});

forEachBackend("viewer names the newest of two likes of one post", async (backend) => {
  await using h = await seed(backend);
  await h.apply(likeOp(VIEWER, "3klike0000122", P1));
  const { body } = await h.request(viewerPath(VIEWER, { uris: [P1] }));
  assert.deepEqual(body.likes, { [P1]: uriOf(VIEWER, COLLECTION_LIKE, "3klike0000122") });
});

forEachBackend("viewer serves 100 entries of each list", async (backend) => {
  await using h = await seed(backend);
  const uris = Array.from({ length: MAX_VIEWER_ENTRIES }, (_, i) => i === 0 ? P1 : fakePost(i));
  const actors = Array.from({ length: MAX_VIEWER_ENTRIES }, (_, i) => i === 0 ? ALICE : fakeDid(i));
  const { status, body } = await h.request(viewerPath(VIEWER, { uris, actors }));
  assert.equal(status, 200);
  assert.deepEqual(body, {
    likes: { [P1]: LIKE },
    reposts: {},
    follows: { [ALICE]: FOLLOW },
    blocks: {},
  });
});

forEachBackend(
  "viewer needs no token while authentication is required (public)",
  async (backend) => {
    await using h = await openHarness(backend, {
      env: { APPVIEW_AUTH_REQUIRED: "true" },
      verifier: null,
    });
    const { status, body } = await h.request(viewerPath(VIEWER, { uris: [P1], actors: [ALICE] }));
    assert.equal(status, 200);
    assert.deepEqual(body, EMPTY);
  },
);

const LIKE_URI = uriOf(VIEWER, COLLECTION_LIKE, "3klike0000022");
const HANDLE_POST = `at://alice.test/${COLLECTION_POST}/3kaaaaaaaaa22`;

const INVALID: [string, string][] = [
  ["/api/viewer", "Missing required parameter: did"],
  ["/api/viewer?did=", "Missing required parameter: did"],
  [`/api/viewer?uris=${P1}`, "Missing required parameter: did"],
  ["/api/viewer?did=alice.test", "Invalid did: alice.test"],
  [viewerPath(VIEWER, { uris: ["not-a-uri"] }), "Invalid uris: not-a-uri"],
  [viewerPath(VIEWER, { uris: [P1, ""] }), "Invalid uris: "],
  [viewerPath(VIEWER, { uris: [`at://${ALICE}`] }), `Invalid uris: at://${ALICE}`],
  [
    viewerPath(VIEWER, { uris: [P1, LIKE_URI] }),
    `Invalid uris: ${LIKE_URI} (not a post URI with a DID)`,
  ],
  [
    viewerPath(VIEWER, { uris: [HANDLE_POST] }),
    `Invalid uris: ${HANDLE_POST} (not a post URI with a DID)`,
  ],
  [viewerPath(VIEWER, { actors: [ALICE, "bob.test"] }), "Invalid actors: bob.test"],
  [viewerPath(VIEWER, { actors: [P1] }), `Invalid actors: ${P1}`],
  [
    viewerPath(VIEWER, { uris: Array.from({ length: 101 }, (_, i) => fakePost(i)) }),
    "Too many uris: 101 (at most 100)",
  ],
  [
    viewerPath(VIEWER, { actors: Array.from({ length: 101 }, (_, i) => fakeDid(i)) }),
    "Too many actors: 101 (at most 100)",
  ],
];

forEachBackend(
  "viewer answers 400 InvalidRequest naming the parameter at fault",
  async (backend) => {
    await using h = await seed(backend);
    for (const [path, message] of INVALID) {
      const { status, body } = await h.request(path);
      assert.equal(status, 400, path);
      assert.deepEqual(body, { error: "InvalidRequest", message }, path);
    }
  },
);

forEachBackend("viewer echoes a long bad entry shortened", async (backend) => {
  await using h = await seed(backend);
  const long = `did:${"x".repeat(300)}`;
  const { status, body } = await h.request(viewerPath(VIEWER, { actors: [`${long}!`] }));
  assert.equal(status, 400);
  assert.deepEqual(body, {
    error: "InvalidRequest",
    message: `Invalid actors: ${long.slice(0, 128)}...`,
  });
});

forEachBackend(
  "SocialClient.viewerState asks for the logged-in account without a token",
  async (backend) => {
    await using h = await seed(backend);
    const sent: Request[] = [];
    const client = new SocialClient({
      pdsUrl: "http://pds.invalid",
      appviewUrl: "http://appview.invalid/",
      store: new MemorySessionStore({
        did: VIEWER,
        handle: "viewer.test",
        accessJwt: "access",
        refreshJwt: "refresh",
      }),
      fetch: (input, init) => {
        const req = new Request(input, init);
        sent.push(req);
        const url = new URL(req.url);
        return Promise.resolve(h.app.request(url.pathname + url.search, { headers: req.headers }));
      },
    });
    const state = await client.viewerState({ uris: [P1, P2], actors: [ALICE, BOB] });
    assert.deepEqual(state, {
      likes: { [P1]: LIKE },
      reposts: { [P2]: REPOST },
      follows: { [ALICE]: FOLLOW },
      blocks: {},
    });
    assert.deepEqual(await client.viewerState({}), EMPTY);
    assert.equal(sent.length, 2);
    const url = new URL(sent[0].url);
    assert.equal(url.pathname, "/api/viewer");
    assert.deepEqual([...url.searchParams], [
      ["did", VIEWER],
      ["uris", `${P1},${P2}`],
      ["actors", `${ALICE},${BOB}`],
    ]);
    assert.deepEqual([...new URL(sent[1].url).searchParams], [["did", VIEWER]]);
    assert.equal(sent[0].headers.get("authorization"), null);
  },
);

Deno.test("SocialClient.viewerState needs a session", async () => {
  const client = new SocialClient({
    pdsUrl: "http://pds.invalid",
    appviewUrl: "http://appview.invalid",
    fetch: () => Promise.reject(new Error("no request expected")),
  });
  await assert.rejects(client.viewerState({ uris: [P1] }), LoginRequiredError);
});

endBackendTests();

function fakePost(i: number): string {
  return uriOf(didOf(`author${i}`), COLLECTION_POST, `3kpost${String(i).padStart(5, "0")}22`);
}

function fakeDid(i: number): string {
  return didOf(`actor${i}`);
}
