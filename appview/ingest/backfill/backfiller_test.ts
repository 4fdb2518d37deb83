import assert from "node:assert/strict";
import { serveOnPort0 } from "../../../runtime/_test_helpers.ts";
import { didOf, postOp } from "../../_fixtures.ts";
import {
  type Backend,
  type BackendContext,
  endBackendTests,
  forEachBackend,
  openBackendContext,
  revOf,
  testDidDocument,
} from "../../_test_helpers.ts";
import { Backfiller, createRepoSource } from "./backfiller.ts";

const ALICE = didOf("alice");

/** An account host answering resolveDid with `answer` and getRepo with RepoNotFound. */
function host(answer: (url: string) => Response) {
  return serveOnPort0((req) => {
    const url = new URL(req.url);
    if (url.pathname === "/xrpc/com.atproto.identity.resolveDid") return answer(url.origin);
    return Response.json({ error: "RepoNotFound", message: "no" }, { status: 400 });
  });
}

async function indexWithAlice(backend: Backend, pdsUrl: string) {
  const ctx = await openBackendContext(backend, { env: { PDS_INTERNAL_URL: pdsUrl } });
  // A commit from the account host's stream: the index holds Alice as the host's.
  await ctx.store.writer.applyOps([postOp(ALICE, "3kalicepost12", "hello")], {
    commit: { did: ALICE, rev: revOf(1), since: null, mode: "newer" },
  });
  return ctx;
}

const posts = async (ctx: BackendContext) =>
  (await ctx.rows<{ n: number }>("SELECT count(*) AS n FROM posts"))[0].n;

forEachBackend(
  "an account the configured account host says it does not host is removed as deleted",
  async (backend) => {
    await using pds = host(() =>
      Response.json({ error: "DidNotFound", message: "no" }, { status: 400 })
    );
    await using ctx = await indexWithAlice(backend, pds.url);
    await using worker = new Backfiller(ctx, { source: createRepoSource(ctx.config) });
    assert.deepEqual(await worker.backfill(ALICE), { kind: "removed" });
    assert.equal(await posts(ctx), 0);
  },
);

forEachBackend(
  "a host the SSRF check refuses, or another host without the repository, removes nothing: the backfill fails and is retried",
  async (backend) => {
    // The document names a loopback host other than the configured one: refused (private).
    await using refusing = host(() => Response.json({ did: ALICE, didDoc: testDidDocument(ALICE) }) // names http://127.0.0.1
    );
    await using ctx = await indexWithAlice(backend, refusing.url);
    await using worker = new Backfiller(ctx, { source: createRepoSource(ctx.config) });
    await assert.rejects(() => worker.backfill(ALICE), { name: "RepoFetchError", kind: "invalid" });
    assert.equal(await posts(ctx), 1);
    // Another host (allowed here) that has no such repository.
    await using other = host(() => Response.json({ error: "RepoNotFound" }, { status: 400 }));
    await using naming = host(() =>
      Response.json({
        did: ALICE,
        didDoc: {
          ...testDidDocument(ALICE),
          service: [{
            id: "#atproto_pds",
            type: "AtprotoPersonalDataServer",
            serviceEndpoint: other.url,
          }],
        },
      })
    );
    await using ctx2 = await openBackendContext(backend, {
      env: { PDS_INTERNAL_URL: naming.url, APPVIEW_ALLOW_PRIVATE_FETCH: "true" },
    });
    await ctx2.store.writer.applyOps([postOp(ALICE, "3kalicepost12", "hello")], {
      commit: { did: ALICE, rev: revOf(1), since: null, mode: "newer" },
    });
    await using worker2 = new Backfiller(ctx2, { source: createRepoSource(ctx2.config) });
    await assert.rejects(() => worker2.backfill(ALICE), {
      name: "RepoFetchError",
      kind: "unavailable",
      message: `Host ${other.url} has no repository ${ALICE}`,
    });
    assert.equal(await posts(ctx2), 1);
  },
);

endBackendTests();
