import assert from "node:assert/strict";
import postgres from "postgres";
import { makeTempDir } from "./_test_helpers.ts";
import { locatePostgres, POSTGRES_SKIP_MESSAGE, startPostgres } from "./_postgres.ts";

const install = await locatePostgres();
if (install === null) console.warn(POSTGRES_SKIP_MESSAGE);

Deno.test({
  name: "a throwaway cluster answers select 1 through the driver, and stop removes it",
  ignore: install === null,
  async fn() {
    const pg = (await startPostgres({ install: install! }))!;
    let stopped = false;
    try {
      assert.equal(pg.url, `postgres://postgres@127.0.0.1:${pg.port}/postgres`);
      // Its socket is there too (reaching it from Deno takes net "unix:<dir>" and write grants).
      assert.ok((await Deno.stat(`${pg.socketDir}/.s.PGSQL.${pg.port}`)).isSocket);
      const sql = postgres(pg.url, { max: 1, onnotice: () => {} });
      try {
        assert.deepEqual([...await sql`select 1 as one`], [{ one: 1 }]);
        // The test settings: nothing is flushed to disk.
        const [{ fsync }] = await sql`show fsync`;
        assert.equal(fsync, "off");
      } finally {
        await sql.end();
      }
      await pg.stop();
      stopped = true;
      await assert.rejects(Deno.stat(pg.socketDir), Deno.errors.NotFound);
      const gone = postgres(pg.url, { max: 1, connect_timeout: 2 });
      try {
        await assert.rejects(gone`select 1`, /ECONNREFUSED|refused/i);
      } finally {
        await gone.end();
      }
    } finally {
      if (!stopped) await pg.stop();
    }
  },
});

Deno.test({
  name: "createDatabase gives an empty database of its own, ordering text by bytes",
  ignore: install === null,
  async fn() {
    await using pg = (await startPostgres({ install: install! }))!;
    const url = await pg.createDatabase("index_a");
    assert.equal(url, `postgres://postgres@127.0.0.1:${pg.port}/index_a`);
    const sql = postgres(url, { max: 1, onnotice: () => {} });
    try {
      const [db] = await sql`select current_database() as name, datcollate, datctype
        from pg_database where datname = current_database()`;
      assert.deepEqual({ ...db }, { name: "index_a", datcollate: "C", datctype: pg.ctype });
      // Cursors rely on byte order (appview/views/cursor.ts): `~` sorts after every ISO 8601
      // time, and upper case before lower case.
      const [order] = await sql`select '~' > '2026-01-01T00:00:00.000Z' as tilde, 'B' < 'a' as b`;
      assert.deepEqual({ ...order }, { tilde: true, b: true });
      if (pg.ctype === "C.UTF-8") {
        const [{ lower }] = await sql`select lower('ÀÉÎ') as lower`;
        assert.equal(lower, "àéî");
      }
      const [{ n }] = await sql`select count(*)::int as n from pg_tables
        where schemaname = 'public'`;
      assert.equal(n, 0);
    } finally {
      await sql.end();
    }
    await assert.rejects(pg.createDatabase("Bad-Name"), RangeError);
  },
});

Deno.test({
  name: "a cluster whose process died is stopped and removed by the next start",
  ignore: install === null,
  async fn() {
    await using orphan = (await startPostgres({ install: install! }))!;
    // Its owner is now a process that has exited.
    const gone = await new Deno.Command("true").spawn();
    await gone.status;
    await Deno.writeTextFile(`${orphan.socketDir}/owner`, String(gone.pid));
    await using next = (await startPostgres({ install: install! }))!;
    await assert.rejects(Deno.stat(orphan.socketDir), Deno.errors.NotFound);
    const sql = postgres(orphan.url, { max: 1, connect_timeout: 2 });
    try {
      await assert.rejects(sql`select 1`, /ECONNREFUSED|refused/i);
    } finally {
      await sql.end();
    }
    // The cluster of a live process is left alone.
    assert.ok((await Deno.stat(next.socketDir)).isDirectory);
  },
});

Deno.test("without binaries PostgreSQL is absent, except under CI=true", async () => {
  await using empty = await makeTempDir();
  const saved = { bindir: Deno.env.get("PG_BINDIR"), ci: Deno.env.get("CI") };
  const restore = (name: string, value: string | undefined) =>
    value === undefined ? Deno.env.delete(name) : Deno.env.set(name, value);
  try {
    Deno.env.set("PG_BINDIR", empty.path);
    Deno.env.delete("CI");
    assert.equal(await locatePostgres(), null);
    assert.equal(await startPostgres(), null);
    Deno.env.set("CI", "true");
    await assert.rejects(locatePostgres(), /CI=true: PostgreSQL tests skipped.*apt-get install/);
  } finally {
    restore("PG_BINDIR", saved.bindir);
    restore("CI", saved.ci);
  }
});
