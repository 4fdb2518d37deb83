// Active content (issue 36 item 8) on the index's side: whatever the source (push, local stream,
// Jetstream), a post whose external link is not a web URL is skipped and counted by the one write
// path, as the account host refuses it (pds/xrpc/repo_inputs_test.ts). On SQLite and on
// PostgreSQL (issue 40), through the store's writer.

import assert from "node:assert/strict";
import { COLLECTION_POST, EMBED_EXTERNAL, EMBED_RECORD_WITH_MEDIA } from "../shared/nsid.ts";
import { didOf, postOp, uriOf } from "../appview/_fixtures.ts";
import { endBackendTests, forEachBackend, openBackendIndex } from "../appview/_test_helpers.ts";

forEachBackend(
  "the index skips posts whose external link or thumb is not http(s) and counts them (issue 36)",
  async (backend) => {
    await using ix = await openBackendIndex(backend);
    const alice = didOf("alice");
    const quoted = uriOf(alice, COLLECTION_POST, "q");
    const external = (x: Record<string, unknown>) => ({ $type: EMBED_EXTERNAL, external: x });
    const ops = [
      postOp(alice, "js", "a", { embed: external({ uri: "javascript:alert(1)" }) }),
      postOp(alice, "thumb", "b", {
        embed: external({ uri: "https://example.com", thumb: "data:image/svg+xml,<svg/>" }),
      }),
      postOp(alice, "media", "c", {
        embed: {
          $type: EMBED_RECORD_WITH_MEDIA,
          record: { uri: quoted },
          media: { external: { uri: "vbscript:msgbox(1)" } },
        },
      }),
      postOp(alice, "web", "d", { embed: external({ uri: "https://example.com/a" }) }),
    ];
    assert.deepEqual(await ix.apply(...ops), { applied: 1, skipped: 3 });
    assert.deepEqual(await ix.rows("SELECT rkey FROM posts"), [{ rkey: "web" }]);
    assert.deepEqual(
      await ix.rows("SELECT reason, collection, count, last_detail FROM ingest_skips"),
      [{
        reason: "invalid_record",
        collection: COLLECTION_POST,
        count: 3,
        last_detail:
          'Invalid embed.media.external.uri, not an http or https URL: "vbscript:msgbox(1)"',
      }],
    );
  },
);

endBackendTests();
