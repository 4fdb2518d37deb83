// Starting the account host (DESIGN.md section 5: PDS_PORT).

import assert from "node:assert/strict";
import { makeTempDir } from "../tests/_util.ts";
import { captureLogger, TEST_ENV } from "./_test_helpers.ts";
import { ConfigError } from "./config.ts";
import { startPds } from "./server.ts";

Deno.test("startPds on a port already in use fails naming PDS_PORT and the address", async () => {
  await using dir = await makeTempDir();
  using taken = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (taken.addr as Deno.NetAddr).port;
  await assert.rejects(
    startPds({
      env: { ...TEST_ENV, DATA_DIR: dir.path, PDS_PORT: String(port) },
      hostname: "127.0.0.1",
      log: captureLogger().log,
    }),
    (err: unknown) =>
      err instanceof ConfigError &&
      err.message ===
        `PDS_PORT: address 127.0.0.1:${port} is already in use; set PDS_PORT to a free port`,
  );
});
